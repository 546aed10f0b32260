import json

from ramen.alignment.parallel import save_alpha
from ramen.io import atomic_path
from ramen.alignment.monolingual import monolingual_alpha, settings_from_config
from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab
from ramen.glue import logged

with logged(snakemake.log[0]):
    inputs = snakemake.input
    source, foreign = load_tokenizer(inputs.source_tokenizer), load_tokenizer(inputs.tokenizer)
    alpha, stats = monolingual_alpha(
        inputs.source_vectors, inputs.foreign_vectors, inputs.source_words, inputs.foreign_words, source, foreign,
        settings_from_config(snakemake.params.settings),
        source_vocab=ordered_vocab(source), foreign_vocab=ordered_vocab(foreign),
    )
    save_alpha(snakemake.output.alpha, alpha)
    support = alpha.getnnz(axis=1)
    stats.update(foreign_vocab=alpha.shape[0], source_vocab=alpha.shape[1],
                 rows_with_support=int((support > 0).sum()), nonzeros=int(alpha.nnz),
                 mean_support=float(support[support > 0].mean()) if (support > 0).any() else 0.0)
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
