from ramen.vocab.encode import write_id_lines
from ramen.vocab.tokenizer import load_tokenizer
from ramen.glue import logged, source_model_dir

with logged(snakemake.log[0]):
    source = load_tokenizer(source_model_dir(snakemake))
    foreign = load_tokenizer(snakemake.input.tokenizer)
    print("source lines", write_id_lines(source, snakemake.input.source, snakemake.output.source))
    print("foreign lines", write_id_lines(foreign, snakemake.input.foreign, snakemake.output.foreign))
