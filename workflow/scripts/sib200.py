from ramen.tasks.sib200 import Sib200Settings, finetune_and_test, write_results
from ramen.workflow import logged, settings_from

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(Sib200Settings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.sib200.settings")
    tests = {lang: snakemake.input.test}
    if "source_test" in snakemake.input.keys():
        tests[snakemake.params.source_lang] = snakemake.input.source_test
    rows = finetune_and_test(snakemake.input.english, snakemake.input.foreign, snakemake.input.train,
                             snakemake.input.dev, tests, snakemake.output.classifier, settings, variant=variant,
                             source_lang=snakemake.params.source_lang, checkpoint_dir=snakemake.params.checkpoints,
                             checkpoint_every=snakemake.params.checkpoint_every)
    write_results(snakemake.output.scores, rows)
