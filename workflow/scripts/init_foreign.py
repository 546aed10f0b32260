import json

from ramen.pipeline.initialise import initialise_foreign
from ramen.glue import logged

with logged(snakemake.log[0]):
    # Every input besides the source model and the tokenizer is one the initialiser's registry entry declares.
    inputs = {kind: path for kind, path in snakemake.input.items() if kind not in ("source", "tokenizer")}
    stats = initialise_foreign(
        snakemake.params.method, snakemake.input.source, snakemake.input.tokenizer, inputs,
        snakemake.params.seed, snakemake.output.embeddings, snakemake.output.stats,
        settings=snakemake.params.settings, vocabulary=snakemake.params.vocabulary,
        output_init=snakemake.params.output_init, checkpoint_dir=snakemake.params.checkpoints,
    )
    print(json.dumps(stats, indent=2, default=float))
