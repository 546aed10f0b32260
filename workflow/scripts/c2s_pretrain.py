from ramen.char2subword.pipeline import run_pretraining
from ramen.glue import logged

with logged(snakemake.log[0]):
    import torch

    torch.set_num_threads(snakemake.threads)
    run_pretraining(snakemake.input.module, snakemake.input.model, snakemake.input.data, snakemake.output.module,
                    snakemake.output.metrics, settings=snakemake.params.settings,
                    checkpoint_dir=snakemake.params.checkpoints, checkpoint_every=snakemake.params.checkpoint_every)
