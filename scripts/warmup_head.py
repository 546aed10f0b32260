from ramen.train import TrainSettings
from ramen.transfer import warmup_head
from ramen.workflow import logged, resolve_model_path, settings_from

with logged(snakemake.log[0]):
    params = snakemake.params
    settings = settings_from(TrainSettings, {**params.settings, "threads": snakemake.threads}, "head_warmup")
    warmup_head(resolve_model_path(params.source_model), snakemake.input.data, settings,
                snakemake.output.model, params.checkpoints, snakemake.output.metrics, device=params.device)
