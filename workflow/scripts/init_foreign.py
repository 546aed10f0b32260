import json

from ramen.transfer import initialise_foreign
from ramen.workflow import logged

with logged(snakemake.log[0]):
    stats = initialise_foreign(
        snakemake.params.method, snakemake.input.source, snakemake.input.tokenizer,
        snakemake.input.get("alpha"), snakemake.params.seed,
        snakemake.output.embeddings, snakemake.output.stats,
        char_module_path=snakemake.input.get("char_module"),
    )
    print(json.dumps(stats, indent=2, default=float))
