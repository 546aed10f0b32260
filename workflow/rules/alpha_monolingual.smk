# Monolingual route (RAMEN eq. 3-4): word vectors of each language, identical-string
# Procrustes, subword vectors and alpha = sparsemax over their similarities.


# A configured .vec file read in full, row by row (ramen.data.vector_check): about 290 MB/s here,
# 10-25 s for a fastText Wikipedia file and not possible before a download arrives, too long for
# the graph-time check, which reads the first rows. Rule input_checks gathers every language's;
# the text rules (whatever their language) and the fine-tuning of a model that reads no text
# wait for it, so a bad row stops the run before any training or fastText job.
rule check_vectors:
    input:
        lambda wildcards: word_vectors(wildcards.lang),
    output:
        "results/checks/vectors/{lang}.json",
    params:
        setting=lambda wildcards: f"monolingual.vectors.{wildcards.lang}",
    log:
        "logs/check_vectors/{lang}.log",
    benchmark:
        "results/benchmarks/check_vectors/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/check_vectors.py"


rule input_checks:
    input:
        lambda wildcards: full_input_checks(),
    output:
        "results/checks/inputs.json",
    log:
        "logs/input_checks.log",
    localrule: True
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/input_checks.py"


rule pretokenize_words:
    input:
        text="results/text/{lang}/train.txt",
        tokenizer=lambda wildcards: tokenizer_dir(wildcards.lang),
    output:
        words="results/monolingual/{lang}/words.txt",
    log:
        "logs/pretokenize_words/{lang}.log",
    benchmark:
        "results/benchmarks/pretokenize_words/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/pretokenize_words.py"


rule train_fasttext:
    input:
        words="results/monolingual/{lang}/words.txt",
    output:
        vectors="results/monolingual/{lang}/fasttext.vec",
        # the whole model, character n-grams included: WECHSEL embeds subword strings with it
        model="results/monolingual/{lang}/fasttext.bin",
    params:
        settings=config["monolingual"]["fasttext"],
    log:
        "logs/train_fasttext/{lang}.log",
    benchmark:
        "results/benchmarks/train_fasttext/{lang}.tsv"
    threads: config["monolingual"]["fasttext"]["threads"]
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/train_fasttext.py"


# alpha over a language's own vocabulary or, {vocabulary} ".extended", over the extended tokenizer's
# foreign tokens (the new ones are kept).
rule monolingual_alpha:
    input:
        source_vectors=word_vectors(SOURCE_LANG),
        foreign_vectors=lambda wildcards: word_vectors(wildcards.lang),
        source_words=f"results/monolingual/{SOURCE_LANG}/words.txt",
        foreign_words="results/monolingual/{lang}/words.txt",
        source_tokenizer=tokenizer_dir(SOURCE_LANG),
        tokenizer=lambda wildcards: vocabulary_tokenizer(wildcards.lang, wildcards.vocabulary),
    output:
        alpha=f"results/monolingual/{SOURCE_LANG}-{{lang}}{{vocabulary}}/alpha.npz",
        stats=f"results/monolingual/{SOURCE_LANG}-{{lang}}{{vocabulary}}/alpha.stats.json",
    params:
        settings={k: v for k, v in config["monolingual"].items() if k not in ("vectors", "fasttext")},
    log:
        "logs/monolingual_alpha/{lang}{vocabulary}.log",
    benchmark:
        "results/benchmarks/monolingual_alpha/{lang}{vocabulary}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/monolingual_alpha.py"

