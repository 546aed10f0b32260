from ramen.alignment.aligners import align_with_eflomal, align_with_fast_align
from ramen.errors import ConfigError
from ramen.glue import logged

with logged(snakemake.log[0]):
    aligner = snakemake.params.aligner
    files = (snakemake.input.foreign, snakemake.input.source, snakemake.output.forward, snakemake.output.backward)
    if aligner == "eflomal":
        align_with_eflomal(*files, seed=snakemake.params.seed, iterations_scale=snakemake.params.iterations_scale,
                           threads=snakemake.threads)
    elif aligner == "fast_align":
        align_with_fast_align(*files, threads=snakemake.threads)
    else:
        raise ConfigError("alignment.aligner", f"unsupported aligner '{aligner}'", "choose eflomal or fast_align")
