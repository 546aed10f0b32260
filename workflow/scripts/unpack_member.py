from ramen.data.download import extract_member
from ramen.data.input_checks import InputFile, check_inputs
from ramen.glue import logged

with logged(snakemake.log[0]):
    extract_member(snakemake.input[0], snakemake.params.member, snakemake.output[0])
    # The file arrives checked as the config uses it (e.g. an HTML page under a .bz2 name).
    check_inputs([InputFile(**check) for check in snakemake.params.checks])
