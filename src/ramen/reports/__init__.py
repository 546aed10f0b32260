"""Tables and plots of the Snakemake report and the generated results pages: summaries, the
initialisation report (coverage, BLI), the peer comparison, the paper tables, the objective grid.
Rules: workflow/rules/report.smk, init_report.smk, paper_report.smk."""
