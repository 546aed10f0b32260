from ramen.tasks.noisy_xnli import noisy_xnli, write_noisy_xnli
from ramen.char2subword.module import load_module
from ramen.data.nli_data import read_xnli_tsv
from ramen.glue import logged

with logged(snakemake.log[0]):
    settings = snakemake.params.settings
    examples = read_xnli_tsv(snakemake.input.test)[: settings["max_examples"]]
    modules = {stage: load_module(path)[0] for stage, path in zip(settings["stages"], snakemake.input.modules)}
    rows = noisy_xnli(snakemake.input.classifier, snakemake.input.foreign, modules, examples, settings,
                          batch_size=snakemake.params.eval_batch_size, threads=snakemake.threads)
    write_noisy_xnli(rows, snakemake.output[0], variant=snakemake.wildcards.variant, lang=snakemake.wildcards.lang,
                     rate=settings["rate"])
