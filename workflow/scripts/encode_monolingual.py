import json

from ramen.vocab.encode import encode_corpus
from ramen.vocab.tokenizer import load_tokenizer
from ramen.glue import logged, source_model_dir

with logged(snakemake.log[0]):
    tokenizer_dir = snakemake.input.tokenizer or source_model_dir(snakemake)
    meta = encode_corpus(load_tokenizer(tokenizer_dir), snakemake.input.text, snakemake.output[0])
    print(json.dumps(meta, indent=2))
