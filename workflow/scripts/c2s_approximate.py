from ramen.char2subword.pipeline import run_approximation
from ramen.glue import logged

with logged(snakemake.log[0]):
    import torch

    torch.set_num_threads(snakemake.threads)
    run_approximation(
        snakemake.input.model, snakemake.input.data, snakemake.output.module, snakemake.output.metrics,
        sizes=snakemake.params.sizes, settings=snakemake.params.settings,
        start_module=snakemake.input.get("start"), stage="final" if snakemake.input.get("start") else "approx",
        checkpoint_dir=snakemake.params.checkpoints,
        checkpoint_every=snakemake.params.checkpoint_every,
    )
