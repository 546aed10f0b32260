"""The paper profile's per-rule resources beside what a rehearsal's jobs measured.

    python tests/rehearsal/resources.py REHEARSAL_WORKDIR > table.md

Plans config/paper.yaml with profiles/slurm (a dry run in a temporary directory) and prints, per
rule the rehearsal ran, the paper-scale partition, CPUs, memory and time limit, and the largest
peak memory (max_rss) and wall time of the rehearsal's jobs of that rule (Snakemake's benchmark
files under REHEARSAL_WORKDIR/results/benchmarks). tests/integration/test_rehearsal.py checks the same.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def job_blocks(output: str) -> dict[int, dict]:
    """Snakemake job id -> its rule, whether it runs locally, its group (None: submitted on its
    own), threads and resources, from a run's or a dry run's log."""
    jobs, current, group = {}, None, None
    for line in output.splitlines():
        if re.search(r"\] Group job (\S+) \(jobs", line):
            group = re.search(r"Group job (\S+) ", line).group(1)
            continue
        header = re.match(r"^(\s*)(local)?rule (\w+):$", line)
        if header:
            if not header.group(1):  # a job of its own, not a member of the group above
                group = None
            current = {"rule": header.group(3), "local": bool(header.group(2)), "threads": 1, "resources": {},
                       "group": group}
            continue
        if current is None:
            continue
        field = re.match(r"^\s+(jobid|threads|resources): (.+)$", line)
        if field and field.group(1) == "jobid":
            jobs[int(field.group(2))] = current
        elif field and field.group(1) == "threads":
            current["threads"] = int(field.group(2))
        elif field:
            current["resources"] = dict(pair.split("=", 1) for pair in field.group(2).split(", "))
    return jobs


def group_submissions(output: str) -> tuple[dict[str, list[list[int]]], dict[str, list[str]]]:
    """The group jobs of a run: per group name, the Snakemake job ids of each group job Snakemake
    listed, and the SLURM job ids it submitted for that name. (Snakemake lists the group jobs it
    is about to submit, then submits them, not necessarily in that order; the SLURM log path
    names the group.)"""
    listings: dict[str, list[list[int]]] = {}
    submitted: dict[str, list[str]] = {}
    members = None
    for line in output.splitlines():
        started = re.search(r"\] Group job (\S+) \(jobs", line)
        if started:
            members = []
            listings.setdefault(started.group(1), []).append(members)
            continue
        if re.match(r"^(local)?rule \w+:$", line):
            members = None  # a job of its own: the group's listing has ended
        elif members is not None and re.match(r"^ {8}jobid: (\d+)$", line):  # a member's field
            members.append(int(line.split(":")[1]))
            continue
        done = re.match(r"^Job [0-9a-f-]{36} has been submitted with SLURM jobid (\d+) \(log: .*/group_([^_/]+)_", line)
        if done:
            submitted.setdefault(done.group(2), []).append(done.group(1))
    return listings, submitted


def paper_plan(workdir: Path) -> dict[str, dict]:
    """Rule -> the first planned job of it, for config/paper.yaml with profiles/slurm."""
    # A dry run caps threads at --cores (1 by default); a cluster run does not.
    result = subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory", str(workdir), "all",
         "-n", "--profile", str(REPO / "profiles" / "slurm"), "--cores", "64",
         "--configfile", str(REPO / "config" / "paper.yaml")],
        capture_output=True, text=True, cwd=workdir)
    if result.returncode != 0:
        raise RuntimeError(f"dry run of config/paper.yaml failed:\n{(result.stdout + result.stderr)[-3000:]}")
    planned: dict[str, dict] = {}
    for block in job_blocks(result.stdout + result.stderr).values():
        planned.setdefault(block["rule"], block)
    planned.pop("all", None)
    return planned


def local_rules(workdir: Path) -> set[str]:
    """Rules a finished run ran on the submit host, from its first Snakemake log (a dry run does
    not mark the rules of a `localrules:` list)."""
    first_log = min((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    return {block["rule"] for block in job_blocks(first_log.read_text()).values() if block["local"]}


def measured(workdir: Path, rule: str) -> list[dict]:
    """The benchmark rows (s, max_rss in MB, ...) of every job of ``rule`` in a finished run."""
    rows = []
    for path in sorted((workdir / "results" / "benchmarks" / rule).rglob("*.tsv")):
        with open(path, newline="") as handle:
            rows += list(csv.DictReader(handle, delimiter="\t"))[-1:]
    return rows


def number(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0  # "-": a job too short for a memory sample


def table(rehearsal: Path, planned: dict[str, dict]) -> str:
    lines = ["| rule | partition | CPUs | mem_mb | runtime (min) | jobs | max_rss (MB) | longest (s) |",
             "|---|---|---|---|---|---|---|---|"]
    local = local_rules(rehearsal)
    for rule in sorted(planned):
        block, rows = planned[rule], measured(rehearsal, rule)
        res = block["resources"]
        where = ("local", "-", "-", "-") if rule in local else (
            res["slurm_partition"], res["cpus_per_task"], res["mem_mb"], res["runtime"])
        lines.append(f"| {rule} | " + " | ".join(where) + f" | {len(rows)} | "
                     f"{max((number(r['max_rss']) for r in rows), default=0):.0f} | "
                     f"{max((number(r['s']) for r in rows), default=0):.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    with tempfile.TemporaryDirectory() as tmp:
        print(table(Path(sys.argv[1]), paper_plan(Path(tmp))), end="")


if __name__ == "__main__":
    main()
