# The paper's Tables 1-4 beside our results, and Figure 2-style checkpoint curves.


include: "inputs/paper_report.smk"


localrules:
    paper_tables,
    plot_curves,
    plot_xnli_curves,
    plot_ud_curves,


rule paper_tables:
    input:
        # Shipped with the workflow, so found from any working directory.
        paper=os.path.join(workflow.basedir, "resources/paper/tables.tsv"),
        results=lambda wildcards: paper_report_results(),
    output:
        markdown=report(
            "results/report/paper_tables.md",
            caption="../report/paper_tables.rst",
            category="Paper comparison",
        ),
        comparison=report(
            "results/report/paper_comparison.tsv",
            caption="../report/paper_tables.rst",
            category="Paper comparison",
        ),
    params:
        # Update-0 variants of the peer comparison have no paper counterpart: no init to match on.
        variant_inits={name: "" if name in config["peer_report"]["variants"].values() else settings["init"]
                       for name, settings in VARIANTS.items()},
        setting=f"source model {config['source']['model']}, {config['training']['steps']} bilingual "
        f"training updates; see the config for data and task settings",
    log:
        "logs/paper_tables/paper_tables.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/paper_tables.py"


rule plot_curves:
    input:
        expand(
            "results/curves/{variant}_{lang}.tsv",
            variant=target_variants("curves"),
            lang=LANGUAGES,
        ),
    output:
        report(
            "results/report/curves.png",
            caption="../report/curves.rst",
            category="Paper comparison",
        ),
    log:
        "logs/plot_curves/plot.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/plot_curves.py"


rule plot_xnli_curves:
    input:
        expand(
            "results/curves/xnli/{variant}_{lang}.tsv",
            variant=target_variants("xnli_curves"),
            lang=LANGUAGES,
        ),
    output:
        report(
            "results/report/xnli_curves.png",
            caption="../report/xnli_curves.rst",
            category="Paper comparison",
        ),
    params:
        column="accuracy",
        ylabel="zero-shot XNLI test accuracy (%)",
    log:
        "logs/plot_xnli_curves/plot.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/plot_task_curves.py"


rule plot_ud_curves:
    input:
        expand(
            "results/curves/ud/{variant}_{lang}.tsv",
            variant=target_variants("ud_curves"),
            lang=LANGUAGES,
        ),
    output:
        report(
            "results/report/ud_curves.png",
            caption="../report/ud_curves.rst",
            category="Paper comparison",
        ),
    params:
        column="las",
        ylabel="zero-shot LAS (%)",
    log:
        "logs/plot_ud_curves/plot.log",
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/plot_task_curves.py"
