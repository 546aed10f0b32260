# Word alignment of the subword-tokenised parallel text and p(e|f) (RAMEN eq. 2), over a language's own
# vocabulary or, {vocabulary} ".extended", the source's extended tokenizer (ramen.initializers.extension).


rule align:
    input:
        source=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/ids.{{lang}}",
    output:
        forward=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/links.forward",
        backward=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/links.reverse",
    params:
        aligner=config["alignment"]["aligner"],
        iterations_scale=config["alignment"]["iterations_scale"],
        seed=config["alignment"]["seed"],
    log:
        "logs/align/{lang}{vocabulary}.log",
    benchmark:
        "results/benchmarks/align/{lang}{vocabulary}.tsv"
    threads: config["threads"]["align"]
    priority: 10  # on the critical path of the transferred variants
    conda:
        "../envs/fast_align.yaml" if config["alignment"]["aligner"] == "fast_align" else "../envs/ramen.yaml"
    script:
        "../scripts/align.py"


rule translation_probabilities:
    input:
        source=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/ids.{{lang}}",
        forward=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/links.forward",
        backward=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/links.reverse",
        tokenizer=lambda wildcards: vocabulary_tokenizer(wildcards.lang, wildcards.vocabulary),
        source_model=source_model_input(),
    output:
        alpha=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/alpha.npz",
        stats=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/alpha.stats.json",
    params:
        source_model=config["source"]["model"],
        symmetrisation=config["alignment"]["symmetrisation"],
        min_prob=config["alignment"]["min_prob"],
    log:
        "logs/translation_probabilities/{lang}{vocabulary}.log",
    benchmark:
        "results/benchmarks/translation_probabilities/{lang}{vocabulary}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/translation_probabilities.py"

