from ramen.data.conllu import read_conllu
from ramen.tasks.ud import UdSettings, parse_and_write
from ramen.glue import logged, settings_from

# Table 4: train, select and test on the target's own treebank with the target side of the model.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(UdSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.ud.supervised_settings")
    scores = parse_and_write(
        snakemake.input.foreign, None, list(read_conllu(snakemake.input.train)), snakemake.input.dev,
        snakemake.input.test, settings, snakemake.output, variant=variant, lang=lang, mode="supervised",
        checkpoint_dir=snakemake.params.checkpoints, checkpoint_every=snakemake.params.checkpoint_every)
    print(lang, scores)
