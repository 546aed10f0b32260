from ramen.vocab.tokenizer import load_tokenizer
from ramen.alignment.vectors import FastTextSettings, train_token_fasttext
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    values = {k: v for k, v in snakemake.params.settings.items() if k != "threads"}
    settings = settings_from(FastTextSettings, values, "peers.focus.fasttext")
    tokens = train_token_fasttext(snakemake.input.text, load_tokenizer(snakemake.input.tokenizer),
                                  snakemake.output.vectors, settings, threads=snakemake.threads)
    print(f"{tokens} token vectors written to {snakemake.output.vectors}")
