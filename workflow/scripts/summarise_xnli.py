from ramen.reports.summary import summarise_xnli, write_summary
from ramen.glue import logged

with logged(snakemake.log[0]):
    rows = summarise_xnli(snakemake.input)
    write_summary(rows, snakemake.output[0])
    for row in rows:
        print(row)
