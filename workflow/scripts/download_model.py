from ramen.data.download import snapshot_model
from ramen.glue import logged

with logged(snakemake.log[0]):
    snapshot_model(snakemake.params.repo_id, snakemake.output[0], revision=snakemake.params.revision)
