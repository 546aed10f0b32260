from ramen.encode import encode_id_pairs
from ramen.transfer import load_tokenizer
from ramen.workflow import logged, resolve_model_path

with logged(snakemake.log[0]):
    source = load_tokenizer(resolve_model_path(snakemake.params.source_model))
    foreign = load_tokenizer(snakemake.input.tokenizer)
    meta = encode_id_pairs(snakemake.input.source, snakemake.input.foreign, snakemake.output[0],
                           len(source), len(foreign))
    print("translation pairs", meta)
