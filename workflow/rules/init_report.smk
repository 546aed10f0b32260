# The initialisation report: coverage, alpha support and bilingual lexicon induction of each
# variant's initial foreign embeddings, before any training (a held-out dictionary per language).


include: "inputs/init_report.smk"


localrules:
    init_report,
    peer_report,


rule init_report:
    input:
        embeddings=expand("results/init/{variant}_{{lang}}.safetensors", variant=init_report_variants()),
        stats=expand("results/init/{variant}_{{lang}}.json", variant=init_report_variants()),
        source="results/models/source",
        tokenizer="results/vocab/{lang}/tokenizer",
        dictionary=lambda wildcards: config["init_report"]["dictionaries"][wildcards.lang],
    output:
        table=report(
            "results/report/init_{lang}.tsv",
            caption="../report/init_report.rst",
            category="Initialisation",
        ),
        plot=report(
            "results/report/init_{lang}.png",
            caption="../report/init_report.rst",
            category="Initialisation",
        ),
    params:
        variants=init_report_variants(),
        inits=[variant_settings(v)["init"] for v in init_report_variants()],
        csls_k=config["init_report"]["csls_k"],
    log:
        "logs/init_report/{lang}.log",
    benchmark:
        "results/benchmarks/init_report/{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/init_report.py"


# One table and one plot of every initialiser: init report, XNLI and UD at update 0 and trained, retrieval.
rule peer_report:
    input:
        init_table="results/report/init_{lang}.tsv",
        xnli=peer_results("xnli"),
        ud=peer_results("ud"),
        retrieval=peer_results("retrieval"),
    output:
        table=report(
            "results/report/peers_{lang}.tsv",
            caption="../report/peers.rst",
            category="Initialisation",
        ),
        plot=report(
            "results/report/peers_{lang}.png",
            caption="../report/peers.rst",
            category="Initialisation",
        ),
    params:
        pairs=config["peer_report"]["variants"],
    log:
        "logs/peer_report/{lang}.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/peer_report.py"
