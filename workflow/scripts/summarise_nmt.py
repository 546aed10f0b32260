from ramen.nmt.pipeline import summarise
from ramen.workflow import logged

with logged(snakemake.log[0]):
    summarise(list(snakemake.input), snakemake.output[0])
