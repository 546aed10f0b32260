from ramen.encode import write_id_lines
from ramen.transfer import load_tokenizer
from ramen.workflow import logged, resolve_model_path

with logged(snakemake.log[0]):
    source = load_tokenizer(resolve_model_path(snakemake.params.source_model))
    foreign = load_tokenizer(snakemake.input.tokenizer)
    print("source lines", write_id_lines(source, snakemake.input.source, snakemake.output.source))
    print("foreign lines", write_id_lines(foreign, snakemake.input.foreign, snakemake.output.foreign))
