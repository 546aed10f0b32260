"""The rehearsal of config/paper.yaml (docs/rehearsal.md): its real code paths on a local mirror.

From an empty directory, through the one-node SLURM cluster of tools/slurm/start.sh:

    HF_ENDPOINT=http://127.0.0.1:8719 snakemake all --profile profiles/slurm \\
        --profile profiles/slurm-local-test --profile tests/rehearsal/profile \\
        --configfile config/rehearsal.yaml

with tests/rehearsal/mirror.py serving every URL of the config and the Hugging Face models. On a
machine without a GPU ``--config device=cpu`` follows (the profile overlay already keeps GPU rules
on the CPU node; tests/rehearsal/profile submits each stage as one group job). Then every table
of the paper's targets is checked, the report is written, a second invocation has nothing to do,
and the jobs' SLURM records and measured sizes are held against what profiles/slurm gives each
rule at paper scale.
"""

from __future__ import annotations

import contextlib
import csv
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from test_slurm import OVERLAY, PROFILE, slurm_cluster, slurm_records, slurm_submissions, snakemake  # noqa: F401
from test_workflow import REPO, planned_jobs

sys.path.insert(0, str(REPO / "tests" / "rehearsal"))
import mirror  # noqa: E402
from resources import group_submissions, job_blocks, measured, number, paper_plan  # noqa: E402

pytestmark = pytest.mark.integration

REHEARSAL = REPO / "config" / "rehearsal.yaml"
GROUPS = REPO / "tests" / "rehearsal" / "profile"  # the rehearsal's group jobs
PAPER = REPO / "config" / "paper.yaml"
MIRROR_PORT = 8719  # the port config/rehearsal.yaml names


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def serve_mirror(base: Path, rehearsal_config: Path):
    """The mirror, built under ``base`` and served by its own command line; (config file, HF
    endpoint, mirror root).

    The config is ``rehearsal_config`` itself, or, when its port is taken, a copy that differs
    only in the port."""
    root = base / "root"
    built = subprocess.run([sys.executable, str(REPO / "tests" / "rehearsal" / "mirror.py"), "build", str(root)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    port = MIRROR_PORT if port_is_free(MIRROR_PORT) else free_port()
    port_file = base / "port"
    for _ in range(3):  # the other rehearsal's mirror may take the port between the check and the bind
        server = subprocess.Popen([sys.executable, str(REPO / "tests" / "rehearsal" / "mirror.py"), "serve",
                                   str(root), "--port", str(port), "--port-file", str(port_file)],
                                  stdout=subprocess.DEVNULL, stderr=open(base / "server.log", "w"))
        deadline = time.monotonic() + 60
        while not port_file.exists() and server.poll() is None:
            assert time.monotonic() < deadline, (base / "server.log").read_text()
            time.sleep(0.2)
        if port_file.exists():
            break
        port = free_port()
    assert port_file.exists(), (base / "server.log").read_text()
    try:
        config = rehearsal_config
        if port != MIRROR_PORT:
            config = base / rehearsal_config.name
            config.write_text(rehearsal_config.read_text().replace(f"127.0.0.1:{MIRROR_PORT}/", f"127.0.0.1:{port}/"))
        yield config, f"http://127.0.0.1:{port}", root
    finally:
        server.terminate()  # SIGTERM: a pytest-xdist worker's children ignore SIGINT
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with serve_mirror(tmp_path_factory.mktemp("mirror"), REHEARSAL) as mirror_config:
        yield mirror_config


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def rehearsal_args(config: Path, *profiles: Path) -> list[str]:
    """``profiles``: more profiles after the rehearsal's group profile."""
    args = ["--profile", str(PROFILE), "--profile", str(OVERLAY), "--profile", str(GROUPS),
            *(word for profile in profiles for word in ("--profile", str(profile))), "--configfile", str(config)]
    # --config last: it takes every following word. Without a GPU the paper's device: cuda cannot run.
    return args if cuda_available() else [*args, "--config", "device=cpu"]


def hub_env(endpoint: str, home: Path) -> dict[str, str]:
    return {"HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "0", "HF_HOME": str(home),
            "HF_HUB_DISABLE_TELEMETRY": "1"}


@pytest.fixture(scope="module")
def rehearsal(slurm_cluster, served, tmp_path_factory):  # noqa: F811 (the cluster fixture)
    config, endpoint, _ = served
    workdir = tmp_path_factory.mktemp("rehearsal")
    started = time.monotonic()
    output = snakemake(workdir, "all", *rehearsal_args(config), env=hub_env(endpoint, workdir / "hf-home"))
    print(f"rehearsal: snakemake all took {time.monotonic() - started:.0f} s")
    (workdir / "snakemake-all.log").write_text(output)
    return workdir, output, config


def read_tsv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def unit_interval(*values: str) -> bool:
    return all(0.0 <= float(value) <= 1.0 for value in values)


def targets(config: dict, task: str) -> list[str]:
    return list(config["targets"].get(task, []))


def test_every_table_of_the_paper_targets_is_well_formed(rehearsal):
    workdir, _, config_path = rehearsal
    config = yaml.safe_load(config_path.read_text())
    results = workdir / "results"
    sizes = mirror.SIZES
    for lang in config["languages"]:
        for variant in targets(config, "xnli"):
            rows = read_tsv(results / "xnli" / f"{variant}_{lang}.tsv")
            test = [row for row in rows if row["split"] == "test"]
            assert len(test) == 1 and test[0]["lang"] == lang and int(test[0]["n"]) == sizes["xnli"]["test"], rows
            assert unit_interval(test[0]["accuracy"])
            assert int(test[0]["correct"]) == round(float(test[0]["accuracy"]) * int(test[0]["n"]))
            assert [row["selected"] for row in rows if row["split"] == "dev"].count("true") == 1, rows
        for task, directory, mode in (("ud", "ud", "zero-shot"), ("ud_supervised", "ud/supervised", "supervised")):
            for variant in targets(config, task):
                rows = read_tsv(results / directory / f"{variant}_{lang}.tsv")
                test = [row for row in rows if row["split"] == "test"]
                assert len(test) == 1 and test[0]["mode"] == mode, rows
                assert test[0]["treebank"].endswith("-ud-test.conllu") and int(test[0]["sentences"]) == sizes["ud"]["test"]
                assert unit_interval(test[0]["las"], test[0]["uas"]) and float(test[0]["las"]) <= float(test[0]["uas"])
        for variant in targets(config, "retrieval"):
            (row,) = read_tsv(results / "retrieval" / f"{variant}_{lang}.tsv")
            assert int(row["pairs"]) == sizes["tatoeba"] and unit_interval(row["source_to_target"], row["target_to_source"])
        for variant in targets(config, "sib200"):
            rows = {row["lang"]: row for row in read_tsv(results / "sib200" / f"{variant}_{lang}.tsv")}
            assert set(rows) == {lang, config["source"]["lang"]}, rows  # the target and the retention check
            assert all(int(row["examples"]) == sizes["sib200"]["test"] and unit_interval(row["accuracy"])
                       for row in rows.values())
        # Figure 2: the initialisation (update 0) and every kept checkpoint.
        steps = ["0"] + [str(s) for s in range(config["training"]["keep_every"], config["training"]["steps"] + 1,
                                               config["training"]["keep_every"])]
        for task, directory, column in (("curves", "curves", "source_to_target"),
                                        ("xnli_curves", "curves/xnli", "accuracy"), ("ud_curves", "curves/ud", "las")):
            for variant in targets(config, task):
                rows = read_tsv(results / directory / f"{variant}_{lang}.tsv")
                assert sorted({row["step"] for row in rows}, key=int) == steps, (task, rows)
                assert all(unit_interval(row[column]) for row in rows if row[column])
    # SIB-200's English classifiers: one per transferred variant and language, and the untransferred
    # source's fine-tuned once for every language.
    classifiers = {path.name for path in (results / "sib200" / "classifiers").iterdir()}
    assert classifiers == {f"{variant}_{lang}" for variant in targets(config, "sib200") if variant != "source"
                           for lang in config["languages"]} | {"source"}, classifiers
    summary = read_tsv(results / "report" / "xnli_summary.tsv")
    assert {(row["variant"], row["lang"]) for row in summary if row["split"] == "test"} == {
        (variant, lang) for variant in targets(config, "xnli") for lang in config["languages"]}
    comparison = read_tsv(results / "report" / "paper_comparison.tsv")
    placed = {(row["table"], row["variant"], row["lang"]): row["paper"] for row in comparison}
    assert placed[("1", "ramen", "ru")] and placed[("1", "ramen-mono", "ru")] and placed[("2", "mbert", "fr")]
    assert placed[("4", "mbert", "ru")] and placed[("3", "rnd", "fr")]
    tables = (results / "report" / "paper_tables.md").read_text()
    assert all(f"## Table {n}" in tables for n in (1, 2, 3, 4))
    for plot in ("mlm_loss", "curves", "xnli_curves", "ud_curves"):
        assert (results / "report" / f"{plot}.png").read_bytes()[:4] == b"\x89PNG", plot


def test_inputs_came_from_the_mirror_in_their_real_formats(rehearsal):
    workdir, _, _ = rehearsal
    downloads = workdir / "results" / "downloads"
    mirrored = downloads / "127.0.0.1"
    for lang in ("en", "fr", "ru"):
        assert (mirrored / "dumps.wikimedia.org" / f"{lang}wiki" / "latest"
                / f"{lang}wiki-latest-pages-articles.xml.bz2").read_bytes()[:3] == b"BZh"
        vectors = mirrored / "dl.fbaipublicfiles.com" / "fasttext" / "vectors-wiki" / f"wiki.{lang}.vec"
        count, dim = map(int, vectors.open(encoding="utf-8").readline().split())
        assert count > 0 and dim > 0
    treebanks = mirrored / "lindat.mff.cuni.cz/repository/xmlui/bitstream/handle/11234/1-2988/ud-treebanks-v2.4.tgz.d"
    assert (treebanks / "ud-treebanks-v2.4/UD_Russian-SynTagRus/ru_syntagrus-ud-train.conllu").stat().st_size > 0
    assert (mirrored / "object.pouta.csc.fi/OPUS-UNPC/v1.0/moses/en-ru.txt.zip.d/UNPC.en-ru.ru").stat().st_size > 0
    assert read_tsv(downloads / "xnli-1.0" / "xnli.test.ru.tsv")[0].keys() >= {"premise", "hypothesis", "label"}
    for model in (mirror.SOURCE_MODEL_ID, mirror.MULTILINGUAL_MODEL_ID):
        assert (downloads / "huggingface.co" / model / "model.safetensors").is_file()
    # The source model is cased (as bert-base-cased), so the foreign vocabularies keep case.
    for lang in ("fr", "ru"):
        assert '"lowercase": false' in (workdir / "results" / "vocab" / lang / "stats.json").read_text()


def test_the_report_is_written(rehearsal, served):
    workdir, _, config = rehearsal
    report = workdir / "results" / "report.html"
    snakemake(workdir, "--report", str(report), "all", "--configfile", str(config),
              *([] if cuda_available() else ["--config", "device=cpu"]), env=hub_env(served[1], workdir / "hf-home"))
    assert report.stat().st_size > 10_000


def test_a_second_invocation_has_nothing_to_do(rehearsal, served):
    workdir, _, config = rehearsal
    output = snakemake(workdir, "all", "-n", *rehearsal_args(config), env=hub_env(served[1], workdir / "hf-home"))
    assert planned_jobs(output) == {}, output[-3000:]


# --- resources: what the jobs asked for, and what profiles/slurm gives them at paper scale ----------


def test_every_cluster_job_asked_sbatch_for_its_rule_resources(rehearsal):
    _, output, _ = rehearsal
    check_cluster_jobs_asked_sbatch_for_their_rule_resources(output)


def check_cluster_jobs_asked_sbatch_for_their_rule_resources(output: str) -> None:
    """Every cluster job of a Snakemake log went through sbatch and completed. Jobs submitted on
    their own ask for exactly their rule's resources. The rehearsal profile gives a group job one
    CPU, so its members run one after another: the group asks for its members' partition, the most
    CPUs and memory of one member and the sum of their times."""
    jobs = job_blocks(output)
    submitted = slurm_submissions(output)
    listings, group_ids = group_submissions(output)
    grouped = [job for lists in listings.values() for members in lists for job in members]
    assert len(grouped) == len(set(grouped)) and not set(grouped) & set(submitted)
    assert {job for job, block in jobs.items() if not block["local"] and block["rule"] != "all"} == \
        set(submitted) | set(grouped)
    assert submitted and listings, "the rehearsal has both kinds of submission"
    records = slurm_records()
    for job, (slurm_id, _) in submitted.items():
        block, record = jobs[job], records[slurm_id]
        resources = block["resources"]
        assert (record["JobState"], record["ExitCode"]) == ("COMPLETED", "0:0"), (block["rule"], record)
        assert record["Partition"] == resources["slurm_partition"], (block["rule"], record)
        assert int(record["TimeLimit"]) == int(resources["runtime"]), (block["rule"], record)
        assert int(record["ProcCnt"]) == int(resources["cpus_per_task"]) == block["threads"], (block["rule"], record)
        assert f"mem={resources['mem_mb']}M" in record["Tres"], (block["rule"], record)

    def planned(members: list[int]) -> tuple:
        blocks = [jobs[job] for job in members]
        assert {block["group"] for block in blocks} == {block["group"] for block in blocks[:1]}
        (partition,) = {block["resources"]["slurm_partition"] for block in blocks}
        return (partition, max(block["threads"] for block in blocks),
                max(int(block["resources"]["mem_mb"]) for block in blocks),
                sum(int(block["resources"]["runtime"]) for block in blocks))

    for group, lists in listings.items():
        ids = group_ids.get(group, [])
        assert len(ids) == len(lists), (group, ids)
        for slurm_id in ids:
            assert (records[slurm_id]["JobState"], records[slurm_id]["ExitCode"]) == ("COMPLETED", "0:0"), \
                (group, records[slurm_id])
        asked = sorted((records[i]["Partition"], int(records[i]["ProcCnt"]),
                        int(re.search(r"mem=(\d+)M", records[i]["Tres"]).group(1)), int(records[i]["TimeLimit"]))
                       for i in ids)
        assert asked == sorted(planned(members) for members in lists), group


def rules_reading_the_device() -> set[str]:
    """Rules whose scripts get the config's device (train on it)."""
    rules = set()
    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", path.read_text(), re.MULTILINE | re.DOTALL):
            if 'config["device"]' in body:
                rules.add(name)
    return rules


def test_the_paper_profile_sizes_and_routes_every_rule_the_rehearsal_ran(rehearsal, tmp_path):
    workdir, output, _ = rehearsal
    ran = {block["rule"] for block in job_blocks(output).values()} - {"all"}
    local = {block["rule"] for block in job_blocks(output).values() if block["local"]}
    planned = paper_plan(tmp_path)  # the paper's DAG with the paper's profile, from an empty directory
    assert ran == set(planned), "the rehearsal and the paper run different rules"
    profile = yaml.safe_load((PROFILE / "config.yaml").read_text())
    cpu_partition = profile["default-resources"]["slurm_partition"]
    device_rules = rules_reading_the_device()
    assert device_rules and yaml.safe_load(PAPER.read_text())["device"] == "cuda"
    for rule in sorted(ran):
        block = planned[rule]
        if rule in local:  # runs on the submit host (a dry run lists it as a cluster job)
            continue
        jobs = measured(workdir, rule)
        assert jobs, f"{rule}: no benchmark of the rehearsal's jobs"
        resources = block["resources"]
        gpus = int(resources.get("gpu", 0))
        # cuda: every rule that trains on the device gets a GPU, and GPU jobs run in the GPU partition.
        assert gpus > 0 or rule not in device_rules, rule
        assert (resources["slurm_partition"] != cpu_partition) == (gpus > 0), (rule, resources)
        assert int(resources["cpus_per_task"]) == block["threads"], (rule, resources)
        # Each job of the rehearsal measured below the paper-scale limits (max_rss in MB).
        for job in jobs:
            assert number(job["max_rss"]) < int(resources["mem_mb"]), (rule, job)
            assert number(job["s"]) < 60 * int(resources["runtime"]), (rule, job)
