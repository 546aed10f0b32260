from ramen.objective_report import ablation_table, write_ablation
from ramen.workflow import logged

with logged(snakemake.log[0]):
    rows = ablation_table(snakemake.params.variants, snakemake.input.xnli, snakemake.input.ud)
    write_ablation(rows, snakemake.output[0])
    for row in rows:
        print(row)
