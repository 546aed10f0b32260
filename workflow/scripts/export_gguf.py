import json

from ramen.glue import logged, source_model_dir
from ramen.modeling.gguf_export import write_gguf

with logged(snakemake.log[0]):
    summary = write_gguf(snakemake.input.model, snakemake.output.gguf, dtype=snakemake.params.dtype,
                         source=source_model_dir(snakemake), pre=snakemake.params.pre,
                         name=f"{snakemake.wildcards.variant}_{snakemake.wildcards.lang}-{snakemake.wildcards.side}")
    print(json.dumps(summary, indent=2))
