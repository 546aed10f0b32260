from ramen.data.text.wikipedia import extract_wikipedia
from ramen.glue import logged

with logged(snakemake.log[0]):
    extract_wikipedia(snakemake.input[0], snakemake.output[0], processes=snakemake.threads)
