from ramen.nmt.pipeline import summarise
from ramen.glue import logged

with logged(snakemake.log[0]):
    summarise(list(snakemake.input), snakemake.output[0])
