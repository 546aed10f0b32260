from ramen.nmt.pipeline import train_fused
from ramen.glue import logged

with logged(snakemake.log[0]):
    train_fused(
        snakemake.input.data, snakemake.wildcards.src, snakemake.wildcards.tgt, snakemake.input.plain,
        snakemake.input.bert, {"train": snakemake.input.train_text, "dev": snakemake.input.dev_text},
        snakemake.wildcards.arm, snakemake.params.p_net, snakemake.params.training, snakemake.output.model,
        snakemake.params.checkpoints, snakemake.output.metrics, threads=snakemake.threads,
        device=snakemake.params.device,
    )
