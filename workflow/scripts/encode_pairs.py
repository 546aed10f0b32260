from ramen.vocab.encode import encode_id_pairs
from ramen.vocab.tokenizer import load_tokenizer
from ramen.glue import logged, source_model_dir

with logged(snakemake.log[0]):
    source = load_tokenizer(source_model_dir(snakemake))
    foreign = load_tokenizer(snakemake.input.tokenizer)
    meta = encode_id_pairs(snakemake.input.source, snakemake.input.foreign, snakemake.output[0],
                           len(source), len(foreign))
    print("translation pairs", meta)
