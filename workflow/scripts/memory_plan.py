import csv

from ramen.io import atomic_path
from ramen.training.memory import COLUMNS
from ramen.glue import logged

with logged(snakemake.log[0]):
    with atomic_path(snakemake.output[0]) as tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
            writer.writeheader()
            writer.writerows(snakemake.params.rows)
