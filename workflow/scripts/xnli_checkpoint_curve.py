import tempfile

from ramen.tasks.curves import checkpoint_curve, run_sides
from ramen.data.nli_data import read_nli, read_xnli_tsv
from ramen.tasks.xnli import NliSettings, finetune_and_test, write_results_tsv
from ramen.glue import logged, settings_from

# Zero-shot XNLI at initialisation (step 0) and at every checkpoint the training run kept.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    source_lang = snakemake.params.source_lang
    settings = settings_from(NliSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.xnli.settings")
    train = [example for source in snakemake.params.train_sources for example in read_nli(source)]
    dev, test = read_xnli_tsv(snakemake.input.dev), read_xnli_tsv(snakemake.input.test)
    sides = run_sides(snakemake.params.checkpoints, snakemake.params.training, snakemake.input.source,
                      snakemake.input.init, snakemake.input.tokenizer, lang, source_lang)

    def zero_shot(dirs):
        with tempfile.TemporaryDirectory(prefix="ramen-xnli-curve-") as workdir:
            return finetune_and_test(dirs[source_lang], dirs[lang], train, dev, test, settings, lang, workdir)

    rows = checkpoint_curve(zero_shot, sides)
    for row in rows:
        print(row)
    write_results_tsv(snakemake.output[0],
                      [{"variant": variant, "lang": lang, "split": "test", "task": "xnli", **row} for row in rows])
