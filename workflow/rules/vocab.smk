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


# A side's text in a vocabulary's ids: its own language's ({vocabulary} ""), or, for `vocabulary: extend`,
# every side of a language in that language's extended tokenizer (".extended-<lang>"; one model reads both).
rule encode_monolingual:
    input:
        text="results/text/{side}/train.txt",
        tokenizer=encode_tokenizer,
        source_model=source_model_input(),
    output:
        directory(r"results/encoded/{side}{vocabulary,(\.extended-[a-z]{2,3})?}"),
    params:
        source_model=config["source"]["model"],
    log:
        "logs/encode_monolingual/{side}{vocabulary}.log",
    benchmark:
        "results/benchmarks/encode_monolingual/{side}{vocabulary}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/encode_monolingual.py"


# The parallel text in ids for alignment: English in the source's, the foreign side in its {vocabulary}'s
# (with `vocabulary: extend` the extended tokenizer's, so that p(e|f) covers the new tokens).
rule encode_parallel:
    input:
        source=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{SOURCE_LANG}.txt",
        foreign=f"results/parallel/{SOURCE_LANG}-{{lang}}/train.{{lang}}.txt",
        tokenizer=lambda wildcards: vocabulary_tokenizer(wildcards.lang, wildcards.vocabulary),
        source_model=source_model_input(),
    output:
        source=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/ids.{SOURCE_LANG}",
        foreign=f"results/align/{SOURCE_LANG}-{{lang}}{{vocabulary}}/ids.{{lang}}",
    params:
        source_model=config["source"]["model"],
    log:
        "logs/encode_parallel/{lang}{vocabulary}.log",
    benchmark:
        "results/benchmarks/encode_parallel/{lang}{vocabulary}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/encode_parallel.py"


# vocabulary: extend: the source's own byte-level BPE plus foreign tokens (ramen.vocab.extend); rules
# encode_monolingual, encode_parallel and the rest read it where their {vocabulary} says so.
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

