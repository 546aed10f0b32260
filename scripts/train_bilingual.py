from ramen.train import TrainSettings
from ramen.transfer import train_bilingual
from ramen.workflow import logged, settings_from

with logged(snakemake.log[0]):
    source, lang = snakemake.config["source"]["lang"], snakemake.wildcards.lang
    settings = settings_from(TrainSettings, {**snakemake.params.settings, "threads": snakemake.threads}, "training")
    train_bilingual(
        snakemake.input.source,
        {lang: {"init": snakemake.input.init, "tokenizer": snakemake.input.tokenizer}},
        {source: snakemake.input.source_data, lang: snakemake.input.foreign_data},
        settings,
        {source: snakemake.output.source, lang: snakemake.output.foreign},
        snakemake.params.checkpoints, snakemake.output.metrics, source_lang=source,
        device=snakemake.params.device,
    )
