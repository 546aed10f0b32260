from ramen.reports.peers import peer_rows, plot_peers, write_peer_table
from ramen.glue import logged

with logged(snakemake.log[0]):
    inputs, lang = snakemake.input, snakemake.wildcards.lang
    rows = peer_rows(snakemake.params.pairs, lang, inputs.init_table, xnli=inputs.xnli, ud=inputs.ud,
                     retrieval=inputs.retrieval)
    write_peer_table(rows, snakemake.output.table)
    plot_peers(rows, snakemake.output.plot, f"Initialisers compared on {lang}: update 0 and after bilingual training")
    for row in rows:
        print(row)
