from ramen.align import align_with_eflomal
from ramen.errors import ConfigError
from ramen.workflow import logged

with logged(snakemake.log[0]):
    if snakemake.params.aligner != "eflomal":
        raise ConfigError("alignment.aligner", f"unsupported aligner '{snakemake.params.aligner}'")
    align_with_eflomal(
        snakemake.input.foreign, snakemake.input.source, snakemake.output.forward, snakemake.output.backward,
        seed=snakemake.params.seed, iterations_scale=snakemake.params.iterations_scale,
        threads=snakemake.threads,
    )
