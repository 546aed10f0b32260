from ramen.data.nli_data import read_xnli_tsv
from ramen.tasks.xnli import (
    evaluate_zero_shot,
    prediction_rows,
    read_classifier_info,
    results_row,
    write_predictions_tsv,
    write_results_tsv,
)
from ramen.glue import logged

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    info = read_classifier_info(snakemake.input.classifier)
    rows = list(info["dev_history"])
    predictions = []
    evaluations = [(lang, snakemake.input.foreign, snakemake.input.test)]
    if "source_test" in snakemake.input.keys():
        evaluations.append((snakemake.params.source_lang, None, snakemake.input.source_test))
    for eval_lang, embedding_dir, path in evaluations:
        examples = read_xnli_tsv(path)
        report = evaluate_zero_shot(snakemake.input.classifier, embedding_dir, examples,
                                    batch_size=snakemake.params.eval_batch_size, threads=snakemake.threads,
                                    keep_predictions=True)
        predictions += prediction_rows(eval_lang, examples, report.pop("predicted"))
        print(eval_lang, report)
        rows.append(results_row(report, variant=variant, lang=eval_lang, split="test",
                                epoch=info.get("selected_epoch")))
    write_predictions_tsv(snakemake.output.predictions, predictions)
    write_results_tsv(snakemake.output.scores, rows)
