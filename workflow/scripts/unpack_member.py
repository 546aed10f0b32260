from ramen.download import extract_member
from ramen.workflow import logged

with logged(snakemake.log[0]):
    extract_member(snakemake.input[0], snakemake.params.member, snakemake.output[0])
