from ramen.nmt.pipeline import train_plain
from ramen.glue import logged

with logged(snakemake.log[0]):
    train_plain(
        snakemake.input.data, snakemake.wildcards.src, snakemake.wildcards.tgt, snakemake.params.model,
        snakemake.params.training, snakemake.output.model, snakemake.params.checkpoints, snakemake.output.metrics,
        threads=snakemake.threads, device=snakemake.params.device,
    )
