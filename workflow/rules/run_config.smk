# The config a run uses: the given config file(s) and --config values, with the schema's
# defaults filled in (`snakemake results/config/effective.yaml --configfile F`).


localrules:
    effective_config,


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
