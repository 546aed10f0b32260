# Monolingual route (RAMEN eq. 3-4): word vectors of each language, identical-string
# Procrustes, subword vectors and alpha = sparsemax over their similarities.


# A configured .vec file read in full, row by row (ramen.data.vector_check): tens of seconds at
# the paper's sizes, too long for the graph-time check, which reads the first rows. The
# language's first jobs (rules extract_wikipedia, prepare_monolingual, prepare_parallel) wait
# for it, so a bad row stops the run before any expensive job of the language.
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


rule monolingual_alpha:
    input:
        source_vectors=word_vectors(SOURCE_LANG),
        foreign_vectors=lambda wildcards: word_vectors(wildcards.lang),
        source_words=f"results/monolingual/{SOURCE_LANG}/words.txt",
        foreign_words="results/monolingual/{lang}/words.txt",
        source_tokenizer=tokenizer_dir(SOURCE_LANG),
        tokenizer="results/vocab/{lang}/tokenizer",
    output:
        alpha=f"results/monolingual/{SOURCE_LANG}-{{lang}}/alpha.npz",
        stats=f"results/monolingual/{SOURCE_LANG}-{{lang}}/alpha.stats.json",
    params:
        settings={k: v for k, v in config["monolingual"].items() if k not in ("vectors", "fasttext")},
    log:
        "logs/monolingual_alpha/{lang}.log",
    benchmark:
        "results/benchmarks/monolingual_alpha/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/monolingual_alpha.py"
