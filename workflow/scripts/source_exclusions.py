import json

from ramen.io import atomic_path
from ramen.vocab.exclusions import write_exclusions
from ramen.glue import logged

with logged(snakemake.log[0]):
    stats = write_exclusions(snakemake.input.text, snakemake.input.encoded, snakemake.input.excluded,
                             snakemake.input.evaluation, snakemake.output.sentences, snakemake.output.excluded)
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
