# Monolingual route (RAMEN eq. 3-4): word vectors of each language, identical-string
# Procrustes, subword vectors and alpha = sparsemax over their similarities.


rule pretokenize_words:
    input:
        text="results/text/{lang}/train.txt",
        tokenizer=lambda wildcards: tokenizer_dir(wildcards.lang),
    output:
        words="results/monolingual/{lang}/words.txt",
    log:
        "logs/pretokenize_words/{lang}.log",
    benchmark:
        "benchmarks/pretokenize_words/{lang}.tsv"
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
        "benchmarks/train_fasttext/{lang}.tsv"
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
        "benchmarks/monolingual_alpha/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/monolingual_alpha.py"
