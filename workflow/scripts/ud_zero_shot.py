from ramen.data.conllu import read_conllu
from ramen.tasks.ud import UdSettings, parse_and_write
from ramen.glue import logged, settings_from

# Train on the source language's treebank, select on the target dev set, parse the target test set
# with the target's word embeddings swapped in.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(UdSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.ud.settings")
    scores = parse_and_write(
        snakemake.input.english, snakemake.input.foreign, list(read_conllu(snakemake.input.train)),
        snakemake.input.dev, snakemake.input.test, settings, snakemake.output, variant=variant, lang=lang,
        mode="zero-shot", checkpoint_dir=snakemake.params.checkpoints,
        checkpoint_every=snakemake.params.checkpoint_every)
    print(lang, scores)
