import json

from ramen.encode import encode_corpus
from ramen.transfer import load_tokenizer
from ramen.workflow import logged, resolve_model_path

with logged(snakemake.log[0]):
    tokenizer_dir = snakemake.input.tokenizer or resolve_model_path(snakemake.params.source_model)
    meta = encode_corpus(load_tokenizer(tokenizer_dir), snakemake.input.text, snakemake.output[0])
    print(json.dumps(meta, indent=2))
