from ramen.data.conllu import read_conllu
from ramen.tasks.ud import UdSettings, train_parser
from ramen.glue import logged, settings_from

# Once for every target language: no dev treebank here; each language selects an epoch (ud_zero_shot_shared).
with logged(snakemake.log[0]):
    settings = settings_from(UdSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.ud.settings")
    train_parser(snakemake.input.english, list(read_conllu(snakemake.input.train)), None, settings,
                 snakemake.output[0], variant=snakemake.wildcards.variant, mode="zero-shot",
                 checkpoint_dir=snakemake.params.checkpoints, checkpoint_every=snakemake.params.checkpoint_every,
                 keep_epochs=True)
