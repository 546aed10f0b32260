import json

from ramen.io import atomic_path
from ramen.text import evaluation_keys, prepare_parallel
from ramen.workflow import logged

with logged(snakemake.log[0]):
    params = snakemake.params
    stats = prepare_parallel(
        snakemake.input.source, snakemake.input.foreign, snakemake.output.source, snakemake.output.foreign,
        exclude_keys=evaluation_keys(snakemake.input.evaluation), max_pairs=params.max_pairs,
        seed=params.seed, min_chars=params.min_chars, max_chars=params.max_chars, progress=True,
    )
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
