"""config/rehearsal.yaml is config/paper.yaml, and config/rehearsal-decoder.yaml is
config/paper-decoder.yaml, with URLs on the local mirror and sizes turned down.

Key by key, the rehearsal may differ from the paper config only in:
* a URL: the paper's ``https://<host>/<path>`` as ``http://127.0.0.1:<port>/<host>/<path>``;
* a size setting (a key named in SIZE_KEYS, or a thread count): a positive integer no larger
  than the paper's, or any positive integer where the paper sets no limit (null);
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
PAPER_DECODER = REPO / "config" / "paper-decoder.yaml"
REHEARSAL_DECODER = REPO / "config" / "rehearsal-decoder.yaml"
PAIRS = {"encoder": (PAPER, REHEARSAL), "decoder": (PAPER_DECODER, REHEARSAL_DECODER)}
MIRROR_URL = re.compile(r"^http://127\.0\.0\.1:(\d+)/(.+)$")
# Settings that only scale a run (how long, how much data, how big), never what it computes.
SIZE_KEYS = frozenset({
    "steps", "batch_size", "seq_len", "warmup_steps", "log_every", "checkpoint_every", "keep_every", "epochs",
    "max_length", "merges", "max_vocab_size", "extension_tokens", "max_sentences", "max_pairs", "threads",
    "until",  # a training stage's last update, scaled with the steps
    "contexts_per_token", "context_tokens",  # the distillation initialiser's examples
    "speed_prompts", "speed_repeats",  # generation speed's prompts and passes
    "epoch", "bucket",  # fastText's passes and hash buckets
    "max_lines", "stride", "max_new_tokens",  # lines scored, tokens per further window, tokens generated
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
    if sized and type(rehearsal) is int and 0 < rehearsal and (paper is None or type(paper) is int and rehearsal <= paper):
        return []
    if type(paper) is not type(rehearsal) or paper != rehearsal:
        return [f"{where}: {rehearsal!r} differs from the paper's {paper!r}"]
    return []


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def rehearsal_differences(paper: dict, rehearsal: dict) -> list[str]:
    dropped = frozenset(paper["languages"]) - frozenset(rehearsal.get("languages", []))
    return differences(paper, rehearsal, dropped)


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_the_rehearsal_is_the_paper_config_with_urls_and_sizes_changed(kind):
    paper, rehearsal = PAIRS[kind]
    assert rehearsal_differences(load(paper), load(rehearsal)) == []


def test_the_rehearsal_keeps_the_paper_targets_and_two_languages_one_non_latin():
    paper, rehearsal = load(PAPER), load(REHEARSAL)
    assert rehearsal["targets"] == paper["targets"]
    assert rehearsal["languages"] == ["fr", "ru"]
    assert rehearsal["source"]["model"] == {"hf": "google-bert/bert-base-cased"}  # cased, from the mirror's hub
    ports = {MIRROR_URL.match(url).group(1) for url in re.findall(r"http://127\.0\.0\.1:\d+/\S+", REHEARSAL.read_text())}
    assert len(ports) == 1  # one mirror serves every host
    assert "https://" not in yaml.safe_dump(rehearsal)


def test_the_decoder_rehearsal_keeps_the_paper_targets_and_the_source_id_on_one_mirror():
    paper, rehearsal = load(PAPER_DECODER), load(REHEARSAL_DECODER)
    assert rehearsal["targets"] == paper["targets"]
    assert rehearsal["languages"] == ["fr"]  # the cost of a second language: config/rehearsal-decoder.yaml
    assert rehearsal["source"]["model"] == {"hf": "Qwen/Qwen2.5-0.5B"}  # an untied tiny Llama on the mirror's hub
    text = REHEARSAL_DECODER.read_text()
    ports = {MIRROR_URL.match(url).group(1) for url in re.findall(r"http://127\.0\.0\.1:\d+/\S+", text)}
    assert ports == {MIRROR_URL.match(url).group(1) for url in re.findall(r"http://127\.0\.0\.1:\d+/\S+",
                                                                           REHEARSAL.read_text())}
    assert "https://" not in yaml.safe_dump(rehearsal)


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_the_rehearsal_satisfies_the_schema(kind):
    from snakemake.utils import validate

    validate(load(PAIRS[kind][1]), str(REPO / "workflow" / "schemas" / "config.schema.yaml"))


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


def language_modeling(config: dict) -> dict:
    return config["tasks"]["language_modeling"]


@pytest.mark.parametrize("change, expected", [
    (lambda c: c["training"].update(peak_lr=0.001), "training.peak_lr"),
    (lambda c: c["training"]["stages"][1].update(until=7000), "training.stages[1].until"),  # past the paper's
    (lambda c: c["training"]["stages"][0].update(train=["encoder"]), "training.stages[0].train"),
    (lambda c: c["training"]["stages"].pop(1), "training.stages"),
    (lambda c: c["training"].update(precision="fp32"), "training.precision"),
    (lambda c: c["variants"]["ramen-u0"]["training"].update(steps=1), "variants.ramen-u0.training.steps"),
    (lambda c: c["variants"]["mean"].update(init="random"), "variants.mean.init"),
    (lambda c: c["source"]["model"].update(hf="HuggingFaceTB/SmolLM2-135M"), "source.model.hf"),
    (lambda c: c["targets"].update(bits_per_byte=["ramen", "source"]), "targets.bits_per_byte"),
    (lambda c: language_modeling(c)["settings"].update(max_lines=0), "tasks.language_modeling.settings.max_lines"),
    (lambda c: language_modeling(c)["settings"].update(context_token="<|endoftext|>"),
     "tasks.language_modeling.settings.context_token"),  # not in the paper's config
    (lambda c: language_modeling(c)["text"]["fr"].update(member="flores200_dataset/dev/fra_Latn.dev"),
     "tasks.language_modeling.text.fr.member"),
    (lambda c: language_modeling(c)["other_text"]["en"].update(
        url="http://127.0.0.1:8719/raw.githubusercontent.com/elsewhere/tatoeba.eng"),
     "tasks.language_modeling.other_text.en.url"),
    (lambda c: language_modeling(c)["prompts"].update(fr=["Bonjour"]), "tasks.language_modeling.prompts.fr"),
    (lambda c: language_modeling(c)["other_text"].pop("fr"), "tasks.language_modeling.other_text.fr"),
    (lambda c: c["peers"]["focus"]["fasttext"].update(min_count=1), "peers.focus.fasttext.min_count"),
    (lambda c: c["tasks"]["sib200"]["test"].pop("en"), "tasks.sib200.test.en"),  # the retention check
    (lambda c: c.update(languages=["fr", "de"]), "languages"),
])
def test_any_other_difference_of_the_decoder_rehearsal_fails_naming_the_setting(change, expected):
    rehearsal = load(REHEARSAL_DECODER)
    change(rehearsal)
    problems = rehearsal_differences(load(PAPER_DECODER), rehearsal)
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
    # No GPU asked for: neither a count (--gpus) nor a per-node request (a training's gres=gpu:G).
    assert all(overlay["set-resources"][rule].get("gpu") == 0 and set(overlay["set-resources"][rule]) <= {"gpu", "gres"}
               and not overlay["set-resources"][rule].get("gres") for rule in gpu_rules)
