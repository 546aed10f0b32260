# External inputs named by URL in the config: downloads, archive members, model snapshots,
# and the per-language XNLI files cut from the XNLI 1.0 release. Each runs on the machine
# Snakemake runs on (cluster login nodes have network access, compute nodes often not).
from ramen.data.inputs import xnli_release_members


include: "inputs/download.smk"


rule download_file:
    output:
        f"{DOWNLOAD_DIR}/{{download}}",
    wildcard_constraints:
        download=fetch_constraint(FETCH.files),
    params:
        url=lambda wildcards: FETCH.files[f"{DOWNLOAD_DIR}/{wildcards.download}"]["url"],
        sha256=lambda wildcards: FETCH.files[f"{DOWNLOAD_DIR}/{wildcards.download}"]["sha256"],
        setting=lambda wildcards: FETCH.settings[f"{DOWNLOAD_DIR}/{wildcards.download}"],
        checks=lambda wildcards: input_checks_for(f"{DOWNLOAD_DIR}/{wildcards.download}"),
    log:
        "logs/download_file/{download}.log",
    benchmark:
        "results/benchmarks/download_file/{download}.tsv"
    localrule: True
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/download_file.py"


rule unpack_member:
    input:
        lambda wildcards: FETCH.members[f"{DOWNLOAD_DIR}/{wildcards.member_path}"]["archive"],
    output:
        f"{DOWNLOAD_DIR}/{{member_path}}",
    wildcard_constraints:
        member_path=fetch_constraint(FETCH.members),
    params:
        member=lambda wildcards: FETCH.members[f"{DOWNLOAD_DIR}/{wildcards.member_path}"]["member"],
        checks=lambda wildcards: input_checks_for(f"{DOWNLOAD_DIR}/{wildcards.member_path}"),
    log:
        "logs/unpack_member/{member_path}.log",
    benchmark:
        "results/benchmarks/unpack_member/{member_path}.tsv"
    localrule: True
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/unpack_member.py"


rule download_model:
    output:
        directory(f"{DOWNLOAD_DIR}/{{model_path}}"),
    wildcard_constraints:
        model_path=fetch_constraint(FETCH.models),
    params:
        repo_id=lambda wildcards: FETCH.models[f"{DOWNLOAD_DIR}/{wildcards.model_path}"]["hf"],
        revision=lambda wildcards: FETCH.models[f"{DOWNLOAD_DIR}/{wildcards.model_path}"]["revision"],
    log:
        "logs/download_model/{model_path}.log",
    benchmark:
        "results/benchmarks/download_model/{model_path}.tsv"
    localrule: True
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/download_model.py"


rule xnli_language:
    # Copying one language's rows out of the XNLI release: seconds, on the submit host like the
    # downloads it follows.
    localrule: True
    input:
        lambda wildcards: xnli_release_split(wildcards.split),
    output:
        f"{DOWNLOAD_DIR}/xnli-1.0/xnli.{{split}}.{{lang}}.tsv",
    wildcard_constraints:
        split="dev|test",
    params:
        checks=lambda wildcards: input_checks_for(f"{DOWNLOAD_DIR}/xnli-1.0/xnli.{wildcards.split}.{wildcards.lang}.tsv"),
    log:
        "logs/xnli_language/{split}.{lang}.log",
    benchmark:
        "results/benchmarks/xnli_language/{split}.{lang}.tsv"
    threads: 1
    conda:
        "../envs/ramen.yaml"
    script:
        "../scripts/xnli_language.py"


# `snakemake downloads`: fetch every external input of the config (e.g. on a login node
# before running the rest offline).
rule downloads:
    input:
        FETCH.outputs(),
