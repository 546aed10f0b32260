from ramen.data.nli_data import read_nli, read_xnli_tsv
from ramen.tasks.xnli import NliSettings, finetune
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    lang = snakemake.wildcards.lang
    settings = settings_from(NliSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.xnli.settings")
    train = [example for source in snakemake.params.train_sources for example in read_nli(source)]
    dev = {lang: (snakemake.input.foreign, read_xnli_tsv(snakemake.input.dev))}
    finetune(snakemake.input.english, train, dev, settings, snakemake.output[0],
             variant=snakemake.wildcards.variant,
             checkpoint_dir=snakemake.params.checkpoints, checkpoint_every=snakemake.params.checkpoint_every)
