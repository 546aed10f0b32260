import json

from ramen.data.decontamination import key_digests, write_digests
from ramen.io import atomic_path
from ramen.data.text.corpus import prepare_parallel
from ramen.data.text.keys import evaluation_keys
from ramen.glue import logged

with logged(snakemake.log[0]):
    params = snakemake.params
    excluded = evaluation_keys(snakemake.input.evaluation)
    stats = prepare_parallel(
        snakemake.input.source, snakemake.input.foreign, snakemake.output.source, snakemake.output.foreign,
        exclude_keys=excluded, excluded_from=snakemake.input.evaluation,
        max_pairs=params.max_pairs,
        seed=params.seed, min_chars=params.min_chars, max_chars=params.max_chars, progress=True,
        setting=f"parallel.{snakemake.wildcards.lang}",
    )
    print(json.dumps(stats, indent=2))
    write_digests(snakemake.output.excluded, key_digests(excluded))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
