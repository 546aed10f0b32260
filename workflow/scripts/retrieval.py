from ramen.tasks.retrieval import RetrievalSettings, evaluate_retrieval, read_pairs, write_results
from ramen.glue import logged, settings_from

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = settings_from(RetrievalSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.retrieval.settings")
    source, target = read_pairs(snakemake.input.source_text, snakemake.input.target_text)
    scores = evaluate_retrieval(snakemake.input.english, snakemake.input.foreign, source, target, settings)
    print(lang, scores)
    write_results(snakemake.output[0], [{"variant": variant, "lang": lang, "task": "retrieval", **scores}])
