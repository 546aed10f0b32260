from pathlib import Path

from ramen.data.conllu import read_conllu, write_predictions
from ramen.tasks.ud import UdSettings, evaluate_saved, results_row, train_parser, write_results
from ramen.workflow import logged

# Table 4: train, select and test on the target's own treebank with the target side of the model.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = UdSettings.from_dict({**snakemake.params.settings, "threads": snakemake.threads})
    history = train_parser(snakemake.input.foreign, list(read_conllu(snakemake.input.train)),
                           (None, list(read_conllu(snakemake.input.dev))), settings, snakemake.output.parser,
                           variant=variant, dev_lang=lang, mode="supervised", dev_name=Path(snakemake.input.dev).name)
    scores = evaluate_saved(snakemake.output.parser, None, list(read_conllu(snakemake.input.test)),
                            threads=snakemake.threads, keep_predictions=True)
    # The test treebank with HEAD and DEPREL predicted: scored by the CoNLL 2018 script like the TSV.
    write_predictions(snakemake.input.test, snakemake.output.predictions, scores.pop("heads"),
                      scores.pop("deprels"))
    print(lang, scores)
    selected = next((row["epoch"] for row in history if row["selected"]), settings.epochs)
    rows = history + [results_row(scores, variant=variant, lang=lang, split="test", mode="supervised",
                                  treebank=Path(snakemake.input.test).name, epoch=selected)]
    write_results(snakemake.output.scores, rows)
