"""config/rehearsal.yaml is config/paper.yaml with URLs on the local mirror and sizes turned down.

Key by key, the rehearsal may differ from the paper config only in:
* a URL: the paper's ``https://<host>/<path>`` as ``http://127.0.0.1:<port>/<host>/<path>``;
* a size setting (a key named in SIZE_KEYS, or a thread count): a positive integer no larger
  than the paper's;
* the languages: a subset of the paper's list, in its order; every mapping keyed by language
  loses exactly the dropped languages, and ``models`` may drop snapshots the run does not use.
Anything else, a changed target list or learning rate, a new or missing setting, fails.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "config" / "paper.yaml"
REHEARSAL = REPO / "config" / "rehearsal.yaml"
MIRROR_URL = re.compile(r"^http://127\.0\.0\.1:(\d+)/(.+)$")
# Settings that only scale a run (how long, how much data, how big), never what it computes.
SIZE_KEYS = frozenset({
    "steps", "batch_size", "seq_len", "warmup_steps", "log_every", "checkpoint_every", "keep_every", "epochs",
    "max_length", "merges", "max_vocab_size", "max_sentences", "max_pairs", "threads",
})
# Mappings whose keys are entries to choose from rather than settings.
SUBSET_MAPPINGS = frozenset({"models"})


def differences(paper, rehearsal, dropped_languages: frozenset, where: str = "") -> list[str]:
    """Every way ``rehearsal`` differs from ``paper`` beyond URL and size changes."""
    key = where.rsplit(".", 1)[-1]
    if isinstance(paper, dict) and isinstance(rehearsal, dict):
        problems = [f"{where}.{name}: not in config/paper.yaml" for name in rehearsal.keys() - paper.keys()]
        for name in paper.keys() - rehearsal.keys():
            if name not in dropped_languages and key not in SUBSET_MAPPINGS:
                problems.append(f"{where}.{name}: missing")
        for name in paper.keys() & rehearsal.keys():
            problems += differences(paper[name], rehearsal[name], dropped_languages, f"{where}.{name}".lstrip("."))
        return problems
    if where == "languages":
        kept = [lang for lang in paper if lang in rehearsal]
        return [] if rehearsal and kept == rehearsal else [f"languages: {rehearsal} is not a subset of {paper} in order"]
    if isinstance(paper, list) and isinstance(rehearsal, list):
        if len(paper) != len(rehearsal):
            return [f"{where}: {rehearsal!r} differs from the paper's {paper!r}"]
        return [p for n, (a, b) in enumerate(zip(paper, rehearsal))
                for p in differences(a, b, dropped_languages, f"{where}[{n}]")]
    if key == "url" and isinstance(paper, str) and isinstance(rehearsal, str):
        served = MIRROR_URL.match(rehearsal)
        if paper.startswith("https://") and served and served.group(2) == paper.removeprefix("https://"):
            return []
        return [f"{where}: {rehearsal!r} is not {paper!r} on the mirror"]
    sized = key in SIZE_KEYS or where.startswith("threads.") or where.endswith(".threads")
    if sized and type(paper) is int and type(rehearsal) is int and 0 < rehearsal <= paper:
        return []
    if type(paper) is not type(rehearsal) or paper != rehearsal:
        return [f"{where}: {rehearsal!r} differs from the paper's {paper!r}"]
    return []


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def rehearsal_differences(paper: dict, rehearsal: dict) -> list[str]:
    dropped = frozenset(paper["languages"]) - frozenset(rehearsal.get("languages", []))
    return differences(paper, rehearsal, dropped)


def test_the_rehearsal_is_the_paper_config_with_urls_and_sizes_changed():
    assert rehearsal_differences(load(PAPER), load(REHEARSAL)) == []


def test_the_rehearsal_keeps_the_paper_targets_and_two_languages_one_non_latin():
    paper, rehearsal = load(PAPER), load(REHEARSAL)
    assert rehearsal["targets"] == paper["targets"]
    assert rehearsal["languages"] == ["fr", "ru"]
    assert rehearsal["source"]["model"] == {"hf": "google-bert/bert-base-cased"}  # cased, from the mirror's hub
    ports = {MIRROR_URL.match(url).group(1) for url in re.findall(r"http://127\.0\.0\.1:\d+/\S+", REHEARSAL.read_text())}
    assert len(ports) == 1  # one mirror serves every host
    assert "https://" not in yaml.safe_dump(rehearsal)


def test_the_rehearsal_satisfies_the_schema():
    from snakemake.utils import validate

    validate(load(REHEARSAL), str(REPO / "workflow" / "schemas" / "config.schema.yaml"))


@pytest.mark.parametrize("change, expected", [
    (lambda c: c["training"].update(peak_lr=0.001), "training.peak_lr"),  # not a size
    (lambda c: c["training"].update(steps=200000), "training.steps"),  # larger than the paper's
    (lambda c: c["targets"].update(ud=["ramen"]), "targets.ud"),
    (lambda c: c["text"].update(min_chars=1), "text.min_chars"),  # a filter, not a budget
    (lambda c: c["text"].update(max_sentences=0), "text.max_sentences"),
    (lambda c: c["xnli_release"].update(url="http://127.0.0.1:8719/elsewhere/XNLI-1.0.zip"), "xnli_release.url"),
    (lambda c: c["corpora"]["fr"][0].update(url="http://example.org/frwiki.xml.bz2"), "corpora.fr[0].url"),
    (lambda c: c["parallel"]["fr"]["fr"].update(member="UNPC.fr"), "parallel.fr.fr.member"),
    (lambda c: c["tasks"]["ud"]["test"].pop("ru"), "tasks.ud.test.ru"),  # ru is a rehearsal language
    (lambda c: c["bpe"].pop("lowercase"), "bpe.lowercase"),
    (lambda c: c.update(device="cpu"), "device"),
    (lambda c: c["variants"]["mbert"].update(seed=1), "variants.mbert.seed"),
    (lambda c: c.update(languages=["ru", "fr"]), "languages"),
])
def test_any_other_difference_fails_naming_the_setting(change, expected):
    rehearsal = load(REHEARSAL)
    change(rehearsal)
    problems = rehearsal_differences(load(PAPER), rehearsal)
    assert [problem for problem in problems if problem.startswith(expected)], problems


def test_the_test_cluster_overlay_keeps_every_gpu_rule_of_the_cluster_profile_on_its_cpu_node():
    """profiles/slurm-local-test replaces each GPU rule's resources (the test node has no GPU and no
    GPU partition): a GPU rule it leaves out is submitted to a partition that does not exist there."""
    cluster = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    overlay = yaml.safe_load((REPO / "profiles" / "slurm-local-test" / "config.yaml").read_text())
    cpu_partition = cluster["default-resources"]["slurm_partition"]
    gpu_rules = {rule for rule, resources in cluster["set-resources"].items()
                 if resources.get("slurm_partition", cpu_partition) != cpu_partition}
    assert gpu_rules, "the cluster profile names no GPU rule"
    assert sorted(gpu_rules - set(overlay["set-resources"])) == []
    assert all(overlay["set-resources"][rule] == {"gpu": 0} for rule in gpu_rules)
