import json

from ramen.pipeline.vocabulary import learn_foreign_vocabulary
from ramen.io import atomic_path
from ramen.glue import logged, source_model_dir

with logged(snakemake.log[0]):
    params = snakemake.params
    lowercase = None if params.lowercase == "auto" else bool(params.lowercase)
    # fastBPE for a masked-LM source, a byte-level BPE for a causal LM (read from the checkpoint).
    stats = learn_foreign_vocabulary(
        snakemake.input.text, source_model_dir(snakemake), snakemake.output.tokenizer,
        snakemake.output.codes, merges=params.merges, max_vocab_size=params.max_vocab_size,
        lowercase=lowercase, min_symbol_count=params.min_symbol_count,
    )
    print(json.dumps(stats, indent=2))
    with atomic_path(snakemake.output.stats) as tmp:
        tmp.write_text(json.dumps(stats, indent=2))
