from ramen.tasks.ud import select_and_parse
from ramen.glue import logged

with logged(snakemake.log[0]):
    scores = select_and_parse(snakemake.input.parsers, snakemake.input.foreign, snakemake.input.dev,
                              snakemake.input.test, snakemake.output, variant=snakemake.wildcards.variant,
                              lang=snakemake.wildcards.lang, threads=snakemake.threads)
    print(snakemake.wildcards.lang, scores)
