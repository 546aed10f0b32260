from ramen.data.input_checks import InputFile, check_inputs
from ramen.data.nli_data import xnli_release_language
from ramen.glue import logged

with logged(snakemake.log[0]):
    count = xnli_release_language(snakemake.input[0], snakemake.wildcards.lang, snakemake.output[0])
    print(f"{count} {snakemake.wildcards.lang} pairs")
    check_inputs([InputFile(**check) for check in snakemake.params.checks])
