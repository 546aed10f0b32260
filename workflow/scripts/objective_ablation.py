from ramen.io import write_tsv
from ramen.reports.objectives import ablation_table, plot_ablation
from ramen.glue import logged

with logged(snakemake.log[0]):
    columns, rows = ablation_table(snakemake.params.variants, snakemake.input.xnli, snakemake.input.ud)
    write_tsv(snakemake.output.table, rows, columns)
    plot_ablation(columns, rows, snakemake.output.plot)
    for row in rows:
        print(row)
