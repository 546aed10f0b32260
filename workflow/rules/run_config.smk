# The config a run uses: the given config file(s) and --config values, with the schema's
# defaults filled in (`snakemake results/config/effective.yaml --configfile F`); and the memory
# each training job plans per GPU (`snakemake results/config/memory_plan.tsv --configfile F`),
# computed while the job graph is built (common.smk, memory_plans).


localrules:
    effective_config,
    memory_plan,


rule effective_config:
    output:
        "results/config/effective.yaml",
    params:
        config=config,
    log:
        "logs/effective_config.log",
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/effective_config.py"


rule memory_plan:
    output:
        "results/config/memory_plan.tsv",
    params:
        rows=lambda wildcards: memory_plan_rows(),
    log:
        "logs/memory_plan.log",
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/memory_plan.py"
