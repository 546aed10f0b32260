# Foreign BPE vocabulary (fastBPE) and subword-tokenised corpora.


include: "inputs/vocab.smk"


rule learn_bpe:
    input:
        text="results/text/{lang}/train.txt",
        source_model=source_model_input(),
    output:
        codes="results/vocab/{lang}/codes",
        tokenizer=directory("results/vocab/{lang}/tokenizer"),
        stats="results/vocab/{lang}/stats.json",
    params:
        source_model=config["source"]["model"],
        merges=config["bpe"]["merges"],
        max_vocab_size=config["bpe"]["max_vocab_size"],
        lowercase=config["bpe"]["lowercase"],
        min_symbol_count=config["bpe"]["min_symbol_count"],
    log:
        "logs/learn_bpe/{lang}.log",
    benchmark:
        "results/benchmarks/learn_bpe/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/learn_bpe.py"


rule encode_monolingual:
    input:
        text="results/text/{lang}/train.txt",
        tokenizer=encode_tokenizer,
        source_model=source_model_input(),
    output:
        directory("results/encoded/{lang}"),
    params:
        source_model=config["source"]["model"],
    log:
        "logs/encode_monolingual/{lang}.log",
    benchmark:
        "results/benchmarks/encode_monolingual/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/encode_monolingual.py"


rule encode_parallel:
    input:
        source=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{SOURCE_LANG}.txt",
        foreign=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{{lang}}.txt",
        tokenizer="results/vocab/{lang}/tokenizer",
        source_model=source_model_input(),
    output:
        source=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}/ids.{{lang}}",
    params:
        source_model=config["source"]["model"],
    log:
        "logs/encode_parallel/{lang}.log",
    benchmark:
        "results/benchmarks/encode_parallel/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/encode_parallel.py"


# vocabulary: extend: the source's own byte-level BPE plus foreign tokens (ramen.vocab.extend), and
# every side's text encoded with it (one model reads both languages).
rule extend_vocabulary:
    input:
        text="results/text/{lang}/train.txt",
        # English words that no new merge may touch (bpe.extension_keep_source_lines)
        source_text=f"results/text/{SOURCE_LANG}/train.txt",
        # the source as every later stage reads it (a GGUF file converted): the tokenizer it extends
        source="results/models/source",
    output:
        tokenizer=directory("results/vocab/{lang}/extended"),
        stats="results/vocab/{lang}/extended.stats.json",
    params:
        new_tokens=config["bpe"]["extension_tokens"],
        min_frequency=config["bpe"]["extension_min_count"],
        keep_lines=config["bpe"]["extension_keep_source_lines"],
    log:
        "logs/extend_vocabulary/{lang}.log",
    benchmark:
        "results/benchmarks/extend_vocabulary/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/extend_vocabulary.py"


use rule encode_monolingual as encode_extended with:
    input:
        text="results/text/{side}/train.txt",
        tokenizer="results/vocab/{lang}/extended",
        source_model=source_model_input(),
    output:
        directory("results/encoded/extended/{lang}/{side}"),
    log:
        "logs/encode_extended/{lang}_{side}.log",
    benchmark:
        "results/benchmarks/encode_extended/{lang}_{side}.tsv"
