from ramen.data.nli_data import read_nli
from ramen.tasks.xnli import NliSettings, finetune
from ramen.glue import logged, settings_from

# Once for every target language: no dev set here; each language selects an epoch (evaluate_xnli_shared).
with logged(snakemake.log[0]):
    settings = settings_from(NliSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.xnli.settings")
    train = [example for source in snakemake.params.train_sources for example in read_nli(source)]
    finetune(snakemake.input.english, train, None, settings, snakemake.output[0], variant=snakemake.wildcards.variant,
             checkpoint_dir=snakemake.params.checkpoints, checkpoint_every=snakemake.params.checkpoint_every,
             keep_epochs=True)
