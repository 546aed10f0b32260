# ramen: transfer a pretrained English masked LM to foreign languages (RAMEN),
# then evaluate the transfer zero-shot. See README.md.
import os
import signal

from snakemake.utils import min_version, validate

min_version("9.0")

# SLURM's warning before a time limit (--signal=USR1@N, profiles/slurm) goes to every process of
# the job step that runs a rule. Ignored here, it cannot kill the Snakemake that waits for the
# trainer, and the processes it starts inherit that until the trainer installs its handler.
if "SLURM_JOB_ID" in os.environ:
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)


configfile: "config.yaml"


validate(config, "schemas/config.schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/download.smk"
include: "rules/text.smk"
include: "rules/vocab.smk"
include: "rules/align.smk"
include: "rules/monolingual.smk"
include: "rules/init.smk"
include: "rules/objectives.smk"
include: "rules/train.smk"
include: "rules/evaluate.smk"
include: "rules/ud.smk"
include: "rules/retrieval.smk"
include: "rules/paper_report.smk"
include: "rules/report.smk"
include: "rules/init_report.smk"
include: "rules/nmt.smk"
include: "rules/char2subword.smk"


wildcard_constraints:
    lang=r"[a-z]{2,3}",
    variant=r"[A-Za-z0-9-]+",


rule all:
    default_target: True
    input:
        all_targets(),
