from ramen.tasks.sib200 import Sib200Settings, finetune_on_files
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    settings = settings_from(Sib200Settings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.sib200.settings")
    finetune_on_files(snakemake.input.english, snakemake.input.train, snakemake.input.dev, snakemake.output[0],
                      settings, variant=snakemake.wildcards.name, checkpoint_dir=snakemake.params.checkpoints,
                      checkpoint_every=snakemake.params.checkpoint_every)
