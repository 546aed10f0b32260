from ramen.objective_report import ablation_table, plot_ablation, write_ablation
from ramen.workflow import logged

with logged(snakemake.log[0]):
    columns, rows = ablation_table(snakemake.params.variants, snakemake.input.xnli, snakemake.input.ud)
    write_ablation(columns, rows, snakemake.output.table)
    plot_ablation(columns, rows, snakemake.output.plot)
    for row in rows:
        print(row)
