# Word alignment of the subword-tokenised parallel text and p(e|f) (RAMEN eq. 2).


rule align:
    input:
        source=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
    output:
        forward=f"results/align/{SOURCE_LANG}-{{lang}}/links.forward",
        backward=f"results/align/{SOURCE_LANG}-{{lang}}/links.reverse",
    params:
        aligner=config["alignment"]["aligner"],
        iterations_scale=config["alignment"]["iterations_scale"],
        seed=config["alignment"]["seed"],
    log:
        "logs/align/{lang}.log",
    benchmark:
        "results/benchmarks/align/{lang}.tsv"
    threads: config["threads"]["align"]
    priority: 10  # on the critical path of the transferred variants
    conda:
        "../envs/fast_align.yaml" if config["alignment"]["aligner"] == "fast_align" else "../envs/ramen.yaml"
    script:
        "../scripts/align.py"


rule translation_probabilities:
    input:
        source=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
        forward=f"results/align/{SOURCE_LANG}-{{lang}}/links.forward",
        backward=f"results/align/{SOURCE_LANG}-{{lang}}/links.reverse",
        tokenizer="results/vocab/{lang}/tokenizer",
        source_model=source_model_input(),
    output:
        alpha=f"results/align/{SOURCE_LANG}-{{lang}}/alpha.npz",
        stats=f"results/align/{SOURCE_LANG}-{{lang}}/alpha.stats.json",
    params:
        source_model=config["source"]["model"],
        symmetrisation=config["alignment"]["symmetrisation"],
        min_prob=config["alignment"]["min_prob"],
    log:
        "logs/translation_probabilities/{lang}.log",
    benchmark:
        "results/benchmarks/translation_probabilities/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/translation_probabilities.py"


# vocabulary: extend: the same alignment with the foreign side in the extended tokenizer's ids (the
# English side in the source's), so that p(e|f) covers the new tokens (ramen.initializers.extension).
use rule encode_parallel as encode_parallel_extended with:
    input:
        source=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{SOURCE_LANG}.txt",
        foreign=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{{lang}}.txt",
        tokenizer="results/vocab/{lang}/extended",
        source_model=source_model_input(),
    output:
        source=f"results/align/extended/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/extended/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
    log:
        "logs/encode_parallel_extended/{lang}.log",
    benchmark:
        "results/benchmarks/encode_parallel_extended/{lang}.tsv"


use rule align as align_extended with:
    input:
        source=f"results/align/extended/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/extended/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
    output:
        forward=f"results/align/extended/{SOURCE_LANG}-{{lang}}/links.forward",
        backward=f"results/align/extended/{SOURCE_LANG}-{{lang}}/links.reverse",
    log:
        "logs/align_extended/{lang}.log",
    benchmark:
        "results/benchmarks/align_extended/{lang}.tsv"


use rule translation_probabilities as translation_probabilities_extended with:
    input:
        source=f"results/align/extended/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/extended/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
        forward=f"results/align/extended/{SOURCE_LANG}-{{lang}}/links.forward",
        backward=f"results/align/extended/{SOURCE_LANG}-{{lang}}/links.reverse",
        tokenizer="results/vocab/{lang}/extended",
        source_model=source_model_input(),
    output:
        alpha=f"results/align/extended/{SOURCE_LANG}-{{lang}}/alpha.npz",
        stats=f"results/align/extended/{SOURCE_LANG}-{{lang}}/alpha.stats.json",
    log:
        "logs/translation_probabilities_extended/{lang}.log",
    benchmark:
        "results/benchmarks/translation_probabilities_extended/{lang}.tsv"
