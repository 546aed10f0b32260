from ramen.pipeline.launch import launch
from ramen.glue import logged

with logged(snakemake.log[0]):
    source, lang = snakemake.params.source_lang, snakemake.wildcards.lang
    settings = dict(snakemake.params.settings)
    objective = settings.pop("objective")  # ramen.objectives: {"name": ..., its settings}
    from_scratch = settings.pop("from_scratch", False)  # init: scratch
    # training.gpus > 1 runs the stage under torchrun, one process per GPU (ramen.pipeline.launch).
    launch(
        "train_bilingual",
        {
            "source_dir": snakemake.input.source,
            "foreign": {lang: {"init": snakemake.input.init, "tokenizer": snakemake.input.tokenizer}},
            "data_dirs": {source: snakemake.input.source_data, lang: snakemake.input.foreign_data},
            # The English sentences this language's models never draw: its own evaluation pairs' English sides.
            "exclusions": {source: snakemake.input.source_exclusions} if snakemake.input.source_exclusions else {},
            "out_dirs": {source: snakemake.output.source, lang: snakemake.output.foreign},
            "checkpoint_dir": snakemake.params.checkpoints,
            "metrics_out": snakemake.output.metrics,
            "source_lang": source,
            "device": snakemake.params.device,
            "objective": objective,
            "pairs_dir": snakemake.input.pairs or None,
            "from_scratch": from_scratch,
            "vocabulary": snakemake.params.vocabulary,  # replace, or extend: one model for both sides
        },
        settings,
        setting="training",
        threads=snakemake.threads,
    )
