from ramen.alignment.monolingual import pretokenize_corpus
from ramen.vocab.tokenizer import load_tokenizer
from ramen.glue import logged

with logged(snakemake.log[0]):
    lines = pretokenize_corpus(snakemake.input.text, load_tokenizer(snakemake.input.tokenizer),
                               snakemake.output.words)
    print(f"{lines} lines of words written to {snakemake.output.words}")
