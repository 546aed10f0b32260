# Bits per byte of held-out text and greedy continuations of fixed prompts, for causal-LM variants:
# the target language read by the foreign side, the source language by the English side (retention);
# `other_text` adds a second held-out set per language from another domain (e.g. FLORES). Generation
# speed (greedy decoding of the held-out text's first lines) goes to its own file: timings differ
# from run to run, the scores do not.


include: "inputs/language_modeling.smk"


rule language_modeling:
    input:
        unpack(language_modeling_inputs),
    output:
        scores="results/language_modeling/{variant}_{lang}.tsv",
        continuations="results/language_modeling/{variant}_{lang}.continuations.tsv",
        speed="results/language_modeling/{variant}_{lang}.speed.tsv",
    params:
        settings=lambda wildcards: config["tasks"]["language_modeling"]["settings"],
        prompts=lambda wildcards: config["tasks"]["language_modeling"]["prompts"],
        source_lang=SOURCE_LANG,
    log:
        "logs/language_modeling/{variant}_{lang}.log",
    benchmark:
        "results/benchmarks/language_modeling/{variant}_{lang}.tsv"
    threads: config["threads"]["evaluate"]
    resources:
        gpu=1,
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/language_modeling.py"


# The run's causal-LM variants in one table and one plot (the report's "Decoder transfer"): bits per
# byte of foreign and English text, tokens per line, and their SIB-200, retrieval and XNLI scores
# where the targets ask for them, then generation speed (bytes per second, and its ratio to the
# source model's); beside them, every variant's continuations of the fixed prompts, and the extension
# initialisers side by side at update 0 and trained, as ratios to the source ("which initialiser?").
localrules:
    summarise_language_modeling,


rule summarise_language_modeling:
    input:
        unpack(language_modeling_summary_inputs),
    output:
        table=report(
            "results/report/language_modeling.tsv",
            caption="../report/language_modeling.rst",
            category="Decoder transfer",
        ),
        plot=report(
            "results/report/language_modeling.png",
            caption="../report/language_modeling_plot.rst",
            category="Decoder transfer",
        ),
        continuations=report(
            "results/report/continuations.tsv",
            caption="../report/continuations.rst",
            category="Decoder transfer",
        ),
        initialisers=report(
            "results/report/extension_initialisers.tsv",
            caption="../report/extension_initialisers.rst",
            category="Decoder transfer",
        ),
    params:
        variants=lambda wildcards: language_modeling_summary_variants(),
        texts=lambda wildcards: held_out_text_names("text"),
        other_texts=lambda wildcards: held_out_text_names("other_text"),
        source_lang=SOURCE_LANG,
    log:
        "logs/summarise_language_modeling/summary.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/summarise_language_modeling.py"
