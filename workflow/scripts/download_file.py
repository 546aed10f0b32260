from ramen.data.download import download
from ramen.data.input_checks import InputFile, check_inputs
from ramen.glue import logged

with logged(snakemake.log[0]):
    download(snakemake.params.url, snakemake.output[0], sha256=snakemake.params.sha256,
             setting=snakemake.params.setting)
    # The file arrives checked as the config uses it (e.g. an HTML page under a .bz2 name).
    check_inputs([InputFile(**check) for check in snakemake.params.checks])
