from ramen.download import download
from ramen.workflow import logged

with logged(snakemake.log[0]):
    download(snakemake.params.url, snakemake.output[0], sha256=snakemake.params.sha256)
