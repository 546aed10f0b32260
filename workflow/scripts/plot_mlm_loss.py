from ramen.reports.summary import plot_mlm_losses
from ramen.glue import logged

with logged(snakemake.log[0]):
    plot_mlm_losses(snakemake.input, snakemake.output[0])
