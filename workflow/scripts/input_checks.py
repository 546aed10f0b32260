import json

from ramen.io import atomic_path
from ramen.glue import logged

with logged(snakemake.log[0]):
    # Every full input check of the run has passed: the jobs that train may start.
    with atomic_path(snakemake.output[0]) as tmp:
        tmp.write_text(json.dumps({"passed": list(snakemake.input)}, indent=2) + "\n", encoding="utf-8")
