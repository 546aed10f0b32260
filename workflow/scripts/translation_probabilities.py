import json

from ramen.alignment.parallel import count_links, save_alpha, translation_probabilities
from ramen.io import atomic_path
from ramen.vocab.tokenizer import load_tokenizer
from ramen.glue import logged, source_model_dir

with logged(snakemake.log[0]):
    params = snakemake.params
    source = load_tokenizer(source_model_dir(snakemake))
    foreign = load_tokenizer(snakemake.input.tokenizer)
    counts = count_links(
        snakemake.input.foreign, snakemake.input.source, (snakemake.input.forward, snakemake.input.backward),
        len(foreign), len(source), symmetrisation=params.symmetrisation,
    )
    alpha = translation_probabilities(counts, min_prob=params.min_prob)
    save_alpha(snakemake.output.alpha, alpha)
    support = alpha.getnnz(axis=1)
    stats = {"foreign_vocab": alpha.shape[0], "source_vocab": alpha.shape[1],
             "rows_with_support": int((support > 0).sum()), "nonzeros": int(alpha.nnz),
             "mean_support": float(support[support > 0].mean()) if (support > 0).any() else 0.0}
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
