from ramen.tasks.language_modeling import LanguageModelSettings, evaluate_sides, write_bits_per_byte, write_continuations
from ramen.workflow import logged, settings_from

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(LanguageModelSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.language_modeling.settings")
    texts = {lang: snakemake.input.text}
    if "source_text" in snakemake.input.keys():
        texts[snakemake.params.source_lang] = snakemake.input.source_text
    scores, continuations = evaluate_sides(snakemake.input.english, snakemake.input.foreign, texts,
                                           snakemake.params.prompts, settings, variant=variant,
                                           source_lang=snakemake.params.source_lang)
    write_bits_per_byte(snakemake.output.scores, scores)
    write_continuations(snakemake.output.continuations, continuations)
