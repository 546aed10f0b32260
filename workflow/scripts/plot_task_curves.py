from ramen.reports.paper import plot_task_curves
from ramen.glue import logged

with logged(snakemake.log[0]):
    plot_task_curves(snakemake.input, snakemake.params.column, snakemake.params.ylabel, snakemake.output[0])
