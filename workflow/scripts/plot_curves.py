from ramen.reports.paper import plot_curves
from ramen.glue import logged

with logged(snakemake.log[0]):
    plot_curves(snakemake.input, snakemake.output[0])
