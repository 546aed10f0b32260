from ramen.alignment.vectors import FastTextSettings, train_fasttext
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    values = {k: v for k, v in snakemake.params.settings.items() if k != "threads"}
    settings = settings_from(FastTextSettings, values, "monolingual.fasttext")
    words = train_fasttext(snakemake.input.words, snakemake.output.vectors, settings, threads=snakemake.threads,
                           out_bin=snakemake.output.model)
    print(f"{words} word vectors written to {snakemake.output.vectors}")
