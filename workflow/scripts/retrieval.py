from ramen.tasks.retrieval import RetrievalSettings, evaluate_retrieval, read_pairs, write_results
from ramen.workflow import logged

with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    settings = RetrievalSettings.from_dict({**snakemake.params.settings, "threads": snakemake.threads})
    source, target = read_pairs(snakemake.input.source_text, snakemake.input.target_text)
    scores = evaluate_retrieval(snakemake.input.english, snakemake.input.foreign, source, target, settings)
    print(lang, scores)
    write_results(snakemake.output[0], [{"variant": variant, "lang": lang, "task": "retrieval", **scores}])
