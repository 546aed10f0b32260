import json

from ramen.nmt.pipeline import prepare_data
from ramen.glue import logged

with logged(snakemake.log[0]):
    source, foreign = snakemake.params.source_lang, snakemake.wildcards.lang
    files = {
        split: {source: snakemake.input[f"{split}_source"], foreign: snakemake.input[f"{split}_foreign"]}
        for split in ("train", "dev", "test")
    }
    stats = prepare_data(files, source, foreign, snakemake.params.merges, snakemake.output[0])
    print(json.dumps(stats, indent=2))
