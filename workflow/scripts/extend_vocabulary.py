import json

from ramen.io import atomic_path
from ramen.pipeline.vocabulary import extend_foreign_vocabulary
from ramen.glue import logged

with logged(snakemake.log[0]):
    stats = extend_foreign_vocabulary(
        snakemake.input.text, snakemake.input.source, snakemake.output.tokenizer,
        new_tokens=snakemake.params.new_tokens, min_frequency=snakemake.params.min_frequency,
        source_text=snakemake.input.source_text, keep_lines=snakemake.params.keep_lines,
    )
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
