# Raw corpora -> cleaned, deduplicated sentence files with evaluation sentences removed.


include: "inputs/text.smk"


rule extract_wikipedia:
    input:
        wikipedia_dump,
        checks=input_checks_passed,
    output:
        directory("results/text/wikiextractor/{name}"),
    log:
        "logs/extract_wikipedia/{name}.log",
    benchmark:
        "results/benchmarks/extract_wikipedia/{name}.tsv"
    threads: config["threads"]["text"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/extract_wikipedia.py"


rule prepare_monolingual:
    input:
        sources=monolingual_inputs,
        evaluation=own_evaluation_files,
        checks=input_checks_passed,
    output:
        text="results/text/{lang}/train.txt",
        stats="results/text/{lang}/train.stats.json",
        excluded="results/text/{lang}/train.excluded.npy",
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
        "results/benchmarks/prepare_monolingual/{lang}.tsv"
    threads: config["threads"]["text"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/prepare_monolingual.py"


rule prepare_parallel:
    input:
        unpack(parallel_files),
        evaluation=pair_evaluation_files,
        checks=input_checks_passed,
    output:
        source=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{SOURCE_LANG}.txt",
        foreign=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{{lang}}.txt",
        stats=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.stats.json",
        excluded=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.excluded.npy",
    params:
        min_chars=config["text"]["min_chars"],
        max_chars=config["text"]["max_chars"],
        max_pairs=config["text"]["max_pairs"],
        seed=config["text"]["seed"],
    log:
        "logs/prepare_parallel/{lang}.log",
    benchmark:
        "results/benchmarks/prepare_parallel/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/prepare_parallel.py"


# The English text is prepared and encoded once for every target language. A language's models
# must not train on the English sides of its own evaluation pairs (retrieval, NMT): the sentences
# of the shared encoding holding them are listed here and left out when its batches are drawn
# (ramen.vocab.exclusions). Adding a language adds its own small index, nothing else.
rule source_exclusions:
    input:
        text=f"results/text/{SOURCE_LANG}/train.txt",
        excluded=f"results/text/{SOURCE_LANG}/train.excluded.npy",
        encoded=f"results/encoded/{SOURCE_LANG}",
        evaluation=lambda wildcards: ancient(decontamination_files(SOURCE_LANG, [wildcards.lang])),
    output:
        sentences=f"results/exclusions/{{lang}}/{SOURCE_LANG}.sentences.npy",
        excluded=f"results/exclusions/{{lang}}/{SOURCE_LANG}.excluded.npy",
        stats=f"results/exclusions/{{lang}}/{SOURCE_LANG}.stats.json",
    log:
        "logs/source_exclusions/{lang}.log",
    benchmark:
        "results/benchmarks/source_exclusions/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/source_exclusions.py"


# Before a language's evaluation file is scored: none of its sentences is in that language's
# training text (prepared before the file may have changed).
rule check_decontamination:
    # Compares an evaluation file's sentence digests with those its training texts were cleaned of
    # (small .npy files) and reads a text only for sentences added since: seconds, not worth a
    # cluster job per evaluation file.
    localrule: True
    input:
        evaluation=lambda wildcards: [
            local_input(spec) for spec in evaluation_units()[(wildcards.task, wildcards.split, wildcards.owner)].values()
        ],
        texts=lambda wildcards: decontamination_texts(wildcards, "text"),
        excluded=lambda wildcards: decontamination_texts(wildcards, "excluded"),
    output:
        "results/decontamination/{lang}/{task}.{split}.{owner}.json",
    params:
        texts=lambda wildcards: decontamination_texts(wildcards, "by_file"),
    log:
        "logs/check_decontamination/{lang}/{task}.{split}.{owner}.log",
    benchmark:
        "results/benchmarks/check_decontamination/{lang}/{task}.{split}.{owner}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/check_decontamination.py"
