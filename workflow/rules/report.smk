# Tables and plots collected by `snakemake --report`.


localrules:
    summarise_xnli,
    headline,
    plot_mlm_loss,


rule summarise_xnli:
    input:
        expand(
            "results/xnli/{variant}_{lang}.tsv",
            variant=target_variants("xnli"),
            lang=LANGUAGES,
        ),
    output:
        report(
            "results/report/xnli_summary.tsv",
            caption="../report/xnli_summary.rst",
            category="Zero-shot XNLI",
        ),
    log:
        "logs/summarise_xnli/summary.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/summarise_xnli.py"


# XNLI and LAS per variant and language beside the paper: the report's front page shows it.
rule headline:
    input:
        rules.paper_tables.output.comparison,
    output:
        report(
            "results/report/headline.tsv",
            caption="../report/headline.rst",
            category="Paper comparison",
        ),
    log:
        "logs/headline/headline.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/headline.py"


rule plot_mlm_loss:
    input:
        ["results/training/source.metrics.csv"]
        + expand(
            "results/training/{variant}_{lang}.metrics.csv",
            variant=trained_variants(),
            lang=LANGUAGES,
        ),
    output:
        report(
            "results/report/mlm_loss.png",
            caption="../report/mlm_loss.rst",
            category="Training",
        ),
    log:
        "logs/plot_mlm_loss/plot.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/plot_mlm_loss.py"
