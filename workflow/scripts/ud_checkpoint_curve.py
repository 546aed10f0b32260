import tempfile

from ramen.data.conllu import read_conllu
from ramen.tasks.curves import checkpoint_curve, run_sides
from ramen.tasks.ud import UdSettings, results_row, train_and_test, write_results
from ramen.glue import logged, settings_from

# Zero-shot parsing at initialisation (step 0) and at every checkpoint the training run kept.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    source_lang = snakemake.params.source_lang
    settings = settings_from(UdSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.ud.settings")
    train = list(read_conllu(snakemake.input.train))
    dev, test = list(read_conllu(snakemake.input.dev)), list(read_conllu(snakemake.input.test))
    sides = run_sides(snakemake.params.checkpoints, snakemake.params.training, snakemake.input.source,
                      snakemake.input.init, snakemake.input.tokenizer, lang, source_lang)

    def zero_shot(dirs):
        with tempfile.TemporaryDirectory(prefix="ramen-ud-curve-") as workdir:
            return train_and_test(dirs[source_lang], dirs[lang], train, dev, test, settings, workdir)

    rows = checkpoint_curve(zero_shot, sides)
    for row in rows:
        print(row)
    write_results(snakemake.output[0], [
        results_row(row, variant=variant, lang=lang, split="test", mode="zero-shot", epoch=row["epoch"],
                    step=row["step"]) for row in rows])
