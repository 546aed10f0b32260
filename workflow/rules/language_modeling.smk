# Bits per byte of held-out text and greedy continuations of fixed prompts, for causal-LM variants:
# the target language read by the foreign side, the source language by the English side (retention);
# `other_text` adds a second held-out set per language from another domain (e.g. FLORES).


include: "inputs/language_modeling.smk"


rule language_modeling:
    input:
        unpack(language_modeling_inputs),
    output:
        scores="results/language_modeling/{variant}_{lang}.tsv",
        continuations="results/language_modeling/{variant}_{lang}.continuations.tsv",
    params:
        settings=lambda wildcards: config["tasks"]["language_modeling"]["settings"],
        prompts=lambda wildcards: config["tasks"]["language_modeling"]["prompts"],
        source_lang=SOURCE_LANG,
    log:
        "logs/language_modeling/{variant}_{lang}.log",
    benchmark:
        "benchmarks/language_modeling/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/language_modeling.py"
