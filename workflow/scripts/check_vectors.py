import json

from ramen.data.vector_check import check_vec_file
from ramen.io import atomic_path
from ramen.glue import logged

with logged(snakemake.log[0]):
    counts = check_vec_file(snakemake.input[0], snakemake.params.setting)
    print(json.dumps(counts))
    with atomic_path(snakemake.output[0]) as tmp:
        tmp.write_text(json.dumps({"path": snakemake.input[0], **counts}, indent=2))
