from ramen.pipeline.launch import launch
from ramen.glue import logged, source_model_dir

with logged(snakemake.log[0]):
    params = snakemake.params
    # head_warmup.gpus > 1 runs the stage under torchrun, one process per GPU (ramen.pipeline.launch).
    launch(
        "warmup_head",
        {
            "source_dir": source_model_dir(snakemake),
            "english_data_dir": snakemake.input.data,
            "out_dir": snakemake.output.model,
            "checkpoint_dir": params.checkpoints,
            "metrics_out": snakemake.output.metrics,
            "device": params.device,
        },
        params.settings,
        setting="head_warmup",
        threads=snakemake.threads,
    )
