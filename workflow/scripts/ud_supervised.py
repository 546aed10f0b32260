from ramen.data.conllu import read_conllu
from ramen.tasks.ud import UdSettings, parse_and_write
from ramen.workflow import logged

# Table 4: train, select and test on the target's own treebank with the target side of the model.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = UdSettings.from_dict({**snakemake.params.settings, "threads": snakemake.threads})
    scores = parse_and_write(
        snakemake.input.foreign, None, list(read_conllu(snakemake.input.train)), snakemake.input.dev,
        snakemake.input.test, settings, snakemake.output, variant=variant, lang=lang, mode="supervised",
        checkpoint_dir=f"{snakemake.config['checkpoint_dir']}/ud/supervised/{variant}_{lang}",
        checkpoint_every=snakemake.config["task_checkpoint_every"])
    print(lang, scores)
