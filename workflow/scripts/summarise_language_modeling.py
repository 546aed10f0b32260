from ramen.reports.language_modeling import (gather_continuations, initialiser_rows, plot_summary, summary_rows,
                                             write_initialiser_table, write_summary)
from ramen.glue import logged

with logged(snakemake.log[0]):
    rows = summary_rows(snakemake.params.variants, snakemake.params.source_lang,
                        bits_per_byte=snakemake.input.bits_per_byte, texts=snakemake.params.texts,
                        other_texts=snakemake.params.other_texts, sib200=snakemake.input.sib200,
                        retrieval=snakemake.input.retrieval, xnli=snakemake.input.xnli,
                        speed=snakemake.input.speed)
    write_summary(rows, snakemake.output.table)
    plot_summary(rows, snakemake.params.source_lang, snakemake.output.plot)
    gather_continuations(snakemake.input.continuations, snakemake.output.continuations)
    write_initialiser_table(initialiser_rows(rows), snakemake.output.initialisers)
    for row in rows:
        print(row)
