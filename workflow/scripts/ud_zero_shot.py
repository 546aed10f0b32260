from ramen.data.conllu import read_conllu
from ramen.tasks.ud import UdSettings, parse_and_write
from ramen.workflow import logged

# Train on the source language's treebank, select on the target dev set, parse the target test set
# with the target's word embeddings swapped in.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = UdSettings.from_dict({**snakemake.params.settings, "threads": snakemake.threads})
    scores = parse_and_write(
        snakemake.input.english, snakemake.input.foreign, list(read_conllu(snakemake.input.train)),
        snakemake.input.dev, snakemake.input.test, settings, snakemake.output, variant=variant, lang=lang,
        mode="zero-shot", checkpoint_dir=f"{snakemake.config['checkpoint_dir']}/ud/{variant}_{lang}",
        checkpoint_every=snakemake.config["task_checkpoint_every"])
    print(lang, scores)
