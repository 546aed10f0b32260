from ramen.tasks.language_modeling import (LanguageModelSettings, evaluate_sides, write_bits_per_byte,
                                          write_continuations, write_speed)
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(LanguageModelSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.language_modeling.settings")
    source = snakemake.params.source_lang
    given = snakemake.input.keys()
    texts = {lang: [snakemake.input.text, *([snakemake.input.other_text] if "other_text" in given else [])]}
    if "source_text" in given:
        texts[source] = [snakemake.input.source_text,
                         *([snakemake.input.source_other_text] if "source_other_text" in given else [])]
    scores, continuations, speed = evaluate_sides(snakemake.input.english, snakemake.input.foreign, texts,
                                                  snakemake.params.prompts, settings, variant=variant,
                                                  source_lang=source)
    write_bits_per_byte(snakemake.output.scores, scores)
    write_continuations(snakemake.output.continuations, continuations)
    write_speed(snakemake.output.speed, speed)
