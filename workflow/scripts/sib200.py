from ramen.tasks.sib200 import Sib200Settings, test_zero_shot, write_results
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(Sib200Settings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.sib200.settings")
    tests = {lang: snakemake.input.test}
    if "source_test" in snakemake.input.keys():
        tests[snakemake.params.source_lang] = snakemake.input.source_test
    rows = test_zero_shot(snakemake.input.classifier, snakemake.input.foreign, tests, settings, variant=variant,
                          source_lang=snakemake.params.source_lang)
    write_results(snakemake.output[0], rows)
