from ramen.tasks.curves import checkpoint_curve, run_sides
from ramen.tasks.retrieval import RetrievalSettings, evaluate_retrieval, read_pairs, write_results
from ramen.glue import logged, settings_from

# Retrieval at initialisation (step 0) and at every checkpoint the training run kept.
with logged(snakemake.log[0]):
    variant, lang = snakemake.wildcards.variant, snakemake.wildcards.lang
    source_lang = snakemake.params.source_lang
    settings = settings_from(RetrievalSettings, {**snakemake.params.settings, "threads": snakemake.threads},
                             "tasks.retrieval.settings")
    source, target = read_pairs(snakemake.input.source_text, snakemake.input.target_text)
    sides = run_sides(snakemake.params.checkpoints, snakemake.params.training, snakemake.input.source,
                      snakemake.input.init, snakemake.input.tokenizer, lang, source_lang)
    rows = checkpoint_curve(
        lambda dirs: evaluate_retrieval(dirs[source_lang], dirs[lang], source, target, settings), sides)
    for row in rows:
        print(row)
    write_results(snakemake.output[0], [{"variant": variant, "lang": lang, "task": "retrieval", **row} for row in rows])
