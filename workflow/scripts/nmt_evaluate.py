from ramen.nmt.pipeline import evaluate
from ramen.glue import logged

with logged(snakemake.log[0]):
    arms = snakemake.params.arms
    models = {"plain": snakemake.input.plain, **dict(zip(arms, snakemake.input.fused))}
    metrics = {"plain": snakemake.input.plain_metrics, **dict(zip(arms, snakemake.input.fused_metrics))}
    evaluate(
        snakemake.wildcards.variant, snakemake.input.data, snakemake.wildcards.src, snakemake.wildcards.tgt,
        models, metrics, snakemake.input.bert, snakemake.input.source, snakemake.input.reference,
        snakemake.params.search, snakemake.params.batch_size, snakemake.output.table,
        snakemake.output.translations, threads=snakemake.threads, device=snakemake.params.device,
    )
