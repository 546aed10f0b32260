# Raw corpora -> cleaned, deduplicated sentence files with evaluation sentences removed.


rule extract_wikipedia:
    input:
        wikipedia_dump,
    output:
        directory("results/text/wikiextractor/{name}"),
    log:
        "logs/extract_wikipedia/{name}.log",
    benchmark:
        "benchmarks/extract_wikipedia/{name}.tsv"
    threads: config["threads"].get("text", 1)
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/extract_wikipedia.py"


rule prepare_monolingual:
    input:
        sources=monolingual_inputs,
        evaluation=evaluation_files(),
    output:
        text="results/text/{lang}/train.txt",
        stats="results/text/{lang}/train.stats.json",
    params:
        sources=lambda wildcards: monolingual_sources(wildcards.lang),
        min_chars=config["text"]["min_chars"],
        max_chars=config["text"]["max_chars"],
        max_sentences=config["text"]["max_sentences"],
        max_bytes=text_byte_budget,
        min_script_ratio=config["text"]["min_script_ratio"],
        seed=config["text"]["seed"],
    log:
        "logs/prepare_monolingual/{lang}.log",
    benchmark:
        "benchmarks/prepare_monolingual/{lang}.tsv"
    threads: config["threads"].get("text", 1)
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/prepare_monolingual.py"


rule prepare_parallel:
    input:
        unpack(parallel_files),
        evaluation=evaluation_files(),
    output:
        source=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{SOURCE_LANG}.txt",
        foreign=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{{lang}}.txt",
        stats=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.stats.json",
    params:
        min_chars=config["text"]["min_chars"],
        max_chars=config["text"]["max_chars"],
        max_pairs=config["text"]["max_pairs"],
        seed=config["text"]["seed"],
    log:
        "logs/prepare_parallel/{lang}.log",
    benchmark:
        "benchmarks/prepare_parallel/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/prepare_parallel.py"
