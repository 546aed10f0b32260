from ramen.reports.init import init_report_rows, plot_report, write_report_tsv
from ramen.glue import logged

with logged(snakemake.log[0]):
    params = snakemake.params
    variants = [{"variant": variant, "init": init, "embeddings": embeddings, "stats": stats}
                for variant, init, embeddings, stats in zip(params.variants, params.inits,
                                                            snakemake.input.embeddings, snakemake.input.stats)]
    rows = init_report_rows(variants, snakemake.input.source, snakemake.input.tokenizer, snakemake.input.dictionary,
                            csls_k=params.csls_k)
    write_report_tsv(rows, snakemake.output.table)
    plot_report(rows, snakemake.output.plot,
                f"Initialisation of the {snakemake.wildcards.lang} embeddings (before training)")
    for row in rows:
        print(row)
