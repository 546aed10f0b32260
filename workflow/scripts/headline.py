from ramen.io import write_tsv
from ramen.reports.summary import read_table
from ramen.reports.results_pages import HEADLINE_COLUMNS, headline_rows
from ramen.glue import logged

with logged(snakemake.log[0]):
    rows = headline_rows(read_table(snakemake.input[0]))
    write_tsv(snakemake.output[0], rows, HEADLINE_COLUMNS)
    for row in rows:
        print(row)
