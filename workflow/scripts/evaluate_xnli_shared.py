from ramen.data.nli_data import read_xnli_tsv
from ramen.tasks.xnli import select_and_test, write_predictions_tsv, write_results_tsv
from ramen.glue import logged

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    tests = [(lang, snakemake.input.foreign, read_xnli_tsv(snakemake.input.test))]
    if "source_test" in snakemake.input.keys():
        tests.append((snakemake.params.source_lang, None, read_xnli_tsv(snakemake.input.source_test)))
    rows, predictions = select_and_test(snakemake.input.classifiers, snakemake.input.foreign,
                                        read_xnli_tsv(snakemake.input.dev), tests, variant=variant, lang=lang,
                                        batch_size=snakemake.params.eval_batch_size, threads=snakemake.threads)
    write_predictions_tsv(snakemake.output.predictions, predictions)
    write_results_tsv(snakemake.output.scores, rows)
