import yaml

from ramen.io import atomic_path
from ramen.glue import logged

with logged(snakemake.log[0]):
    with atomic_path(snakemake.output[0]) as tmp:
        tmp.write_text(yaml.safe_dump(dict(snakemake.params.config), sort_keys=False, allow_unicode=True),
                       encoding="utf-8")
