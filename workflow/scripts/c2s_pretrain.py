from pathlib import Path

from ramen.char2subword.pipeline import run_pretraining
from ramen.workflow import logged

with logged(snakemake.log[0]):
    import torch

    torch.set_num_threads(snakemake.threads)
    run_pretraining(snakemake.input.module, snakemake.input.model, snakemake.input.data, snakemake.output.module,
                    snakemake.output.metrics, settings=snakemake.params.settings,
                    checkpoint_dir=f"{snakemake.config['checkpoint_dir']}/char2subword/{snakemake.wildcards.table}/"
                                   f"{Path(snakemake.output.module).name}",
                    checkpoint_every=snakemake.config["task_checkpoint_every"])
