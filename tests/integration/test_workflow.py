"""Runs the whole workflow on a tiny slice of the demo data in a temporary directory."""

from __future__ import annotations

import csv
import fcntl
import gzip
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
DEMO = REPO / "resources" / "demo"

pytestmark = pytest.mark.integration


def head_lines(source: Path, target: Path, count: int) -> None:
    opener = gzip.open if source.suffix == ".gz" else open
    with opener(source, "rt", encoding="utf-8") as handle:
        lines = list(itertools.islice(handle, count))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(lines), encoding="utf-8")


def tiny_config() -> dict:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["corpora"] = {
        "en": [{"path": "data/wiki.xml.bz2", "format": "wikipedia"}, {"path": "data/en.txt", "format": "text"}],
        "fr": [{"path": "data/fr.txt", "format": "text"}],
    }
    config["parallel"] = {"fr": {"en": "data/en.txt", "fr": "data/fr.txt"}}
    config["bpe"]["merges"] = 300
    config["head_warmup"].update(steps=3, batch_size=4, seq_len=32, warmup_steps=1, log_every=1)
    config["training"].update(steps=4, batch_size=4, seq_len=32, warmup_steps=2, log_every=1, checkpoint_every=2,
                              keep_every=2)
    xnli = config["tasks"]["xnli"]
    xnli["train"] = [{"path": "data/nli.train.tsv", "format": "xnli"}]
    xnli["dev"] = {"fr": "data/xnli.dev.fr.tsv"}
    xnli["test"] = {"fr": "data/xnli.test.fr.tsv"}
    xnli["settings"].update(epochs=1, batch_size=8, max_length=64)
    config["init_report"]["dictionaries"] = {"fr": "data/dictionary.tsv"}
    ud = config["tasks"]["ud"]
    ud["train"] = {"en": "data/ud.train.en.conllu"}
    ud["dev"] = {"fr": "data/ud.dev.fr.conllu"}
    ud["test"] = {"fr": "data/ud.test.fr.conllu"}
    ud["supervised"] = {"fr": {"train": "data/ud.train.fr.conllu", "dev": "data/ud.dev.fr.conllu",
                               "test": "data/ud.test.fr.conllu"}}
    ud["settings"].update(epochs=2, max_train_sentences=40, max_dev_sentences=20)
    config["tasks"]["retrieval"]["pairs"] = {"fr": {"en": "data/tatoeba.en", "fr": "data/tatoeba.fr"}}
    config["tasks"]["sib200"].update(train={"en": "data/sib200.train.en.tsv"}, dev={"en": "data/sib200.dev.en.tsv"},
                                     test={"en": "data/sib200.test.en.tsv", "fr": "data/sib200.test.fr.tsv"})
    nmt = config["tasks"]["nmt"]
    nmt["dev"] = {"en": "data/nmt.dev.en.txt", "fr": "data/nmt.dev.fr.txt"}
    nmt["test"] = {"en": "data/nmt.test.en.txt", "fr": "data/nmt.test.fr.txt"}
    nmt["settings"].update(bpe_merges=300, model={"layers": 1, "dim": 32, "ffn_dim": 64, "heads": 2, "dropout": 0.1},
                           search={"beam": 2, "length_penalty": 1.0})
    for stage in ("plain", "fused"):
        nmt["settings"][stage].update(steps=3, max_tokens=256, warmup_steps=1, log_every=1, eval_every=3,
                                      checkpoint_every=2)
    c2s = config["char2subword"]
    c2s["module"].update(dim=16, layers=1, heads=2)
    c2s["approximation"].update(steps=4, batch_size=16, warmup_steps=1, log_every=2)
    c2s["reapproximation"] = {"steps": 2}
    c2s["pretraining"].update(steps=2, batch_size=4, seq_len=16, warmup_steps=1, log_every=1)
    c2s["evaluation"]["rows"] = 50
    c2s["table2"] = [["ce"], ["ce", "cos", "l2", "nbr"]]
    c2s["noisy_xnli"]["max_examples"] = None
    return config


def head_sentences(source: Path, target: Path, count: int) -> None:
    """The first ``count`` sentences of a (gzipped) CoNLL-U file."""
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        blocks = handle.read().split("\n\n")[:count]
    target.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")


def run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """Snakemake in workdir with its config.yaml, unless the arguments name another config file."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if "--configfile" not in args:
        # After the targets (it takes several values), before a "--" that ends the options.
        end = args.index("--") if "--" in args else len(args)
        args = (*args[:end], "--configfile", str(workdir / "config.yaml"), *args[end:])
    return subprocess.run(
        [str(SNAKEMAKE), "--snakefile", str(REPO / "workflow" / "Snakefile"), "--directory", str(workdir), "--cores", "2", *args],
        capture_output=True, text=True, env=env,
    )


def make_workdir(workdir: Path) -> Path:
    """A workflow directory with a tiny slice of the demo data and its config."""
    data = workdir / "data"
    head_lines(DEMO / "parallel" / "multi30k.train.en.gz", data / "en.txt", 600)
    head_lines(DEMO / "parallel" / "multi30k.train.fr.gz", data / "fr.txt", 600)
    (data / "wiki.xml.bz2").write_bytes((DEMO / "en" / "enwiki-sample.xml.bz2").read_bytes())
    head_lines(DEMO / "nli" / "xnli.dev.en.tsv", data / "nli.train.tsv", 97)
    head_lines(DEMO / "nli" / "xnli.dev.fr.tsv", data / "xnli.dev.fr.tsv", 41)
    head_lines(DEMO / "nli" / "xnli.test.fr.tsv", data / "xnli.test.fr.tsv", 61)
    head_lines(DEMO / "bli" / "freedict.eng-fra.tsv", data / "dictionary.tsv", 2000)
    head_sentences(DEMO / "ud" / "en_ewt-ud-train.first2000.conllu.gz", data / "ud.train.en.conllu", 60)
    head_sentences(DEMO / "ud" / "fr_sequoia-ud-train.conllu.gz", data / "ud.train.fr.conllu", 40)
    head_sentences(DEMO / "ud" / "fr_gsd-ud-dev.first400.conllu.gz", data / "ud.dev.fr.conllu", 20)
    head_sentences(DEMO / "ud" / "fr_gsd-ud-test.conllu.gz", data / "ud.test.fr.conllu", 30)
    head_lines(DEMO / "parallel" / "tatoeba.fra-eng.en", data / "tatoeba.en", 50)
    head_lines(DEMO / "parallel" / "tatoeba.fra-eng.fr", data / "tatoeba.fr", 50)
    for split, lang, code, count in (("train", "en", "eng", 60), ("dev", "en", "eng", 20), ("test", "en", "eng", 30),
                                     ("test", "fr", "fra", 30)):  # the header line, then the first rows
        head_lines(DEMO / "sib200" / f"{code}_Latn.{split}.tsv", data / f"sib200.{split}.{lang}.tsv", count + 1)
    for lang in ("en", "fr"):
        head_lines(DEMO / "parallel" / f"multi30k.val.{lang}.gz", data / f"nmt.dev.{lang}.txt", 20)
        head_lines(DEMO / "parallel" / f"multi30k.test_2016.{lang}.gz", data / f"nmt.test.{lang}.txt", 12)
    (workdir / "config.yaml").write_text(yaml.safe_dump(tiny_config()))
    return workdir


# One variant's XNLI result needs every rule of the spine: text, vocabulary, alignment, head warm-up,
# initialisation, bilingual training, fine-tuning and evaluation.
SPINE_TARGET = "results/xnli/ramen_fr.tsv"
CLUSTER_OVERLAY = REPO / "profiles" / "slurm-local-test"


def overlay_threads() -> list[str]:
    """The SLURM test cluster's thread counts (thread counts change floating-point sums)."""
    overlay = yaml.safe_load((CLUSTER_OVERLAY / "config.yaml").read_text())
    return [f"{rule}={threads}" for rule, threads in overlay["set-threads"].items()]


def spine_run(tmp_path_factory) -> Path:
    """The tiny workflow with SPINE_TARGET built at the cluster's thread counts, run once per test
    session: the first test process to ask runs it, the others wait for it. Read-only: copy it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    shared = tmp_path_factory.getbasetemp().parent if worker else tmp_path_factory.getbasetemp()
    spine = shared / "spine"
    with open(shared / "spine.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not spine.is_dir():
            shutil.rmtree(shared / "spine.partial", ignore_errors=True)  # left by a run that failed
            building = make_workdir(shared / "spine.partial")
            result = run(building, SPINE_TARGET, "--set-threads", *overlay_threads())
            assert result.returncode == 0, result.stderr[-5000:]
            (building / "spine.log").write_text(result.stdout + result.stderr)
            building.rename(spine)
    return spine


def copy_of_spine(tmp_path_factory, name: str) -> Path:
    """A workflow directory holding the spine's files; copies keep the mtimes, so nothing reruns."""
    return Path(shutil.copytree(spine_run(tmp_path_factory), tmp_path_factory.mktemp(name) / "run", symlinks=True))


@pytest.fixture(scope="module")
def workflow(tmp_path_factory):
    workdir = copy_of_spine(tmp_path_factory, "workflow")
    result = run(workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def read_tsv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_every_variant_has_a_well_formed_result_table(workflow):
    for variant in ("ramen", "rnd", "source"):
        rows = read_tsv(workflow / "results" / "xnli" / f"{variant}_fr.tsv")
        test = [row for row in rows if row["split"] == "test" and row["lang"] == "fr"]
        assert len(test) == 1
        assert int(test[0]["n"]) == 60
        assert 0.0 <= float(test[0]["accuracy"]) <= 1.0
        assert any(row["split"] == "dev" and row["selected"] == "true" for row in rows)
    summary = read_tsv(workflow / "results" / "report" / "xnli_summary.tsv")
    assert {row["variant"] for row in summary if row["split"] == "test"} == {"ramen", "rnd", "source"}


def test_every_variant_is_parsed_zero_shot_and_compared_with_the_paper(workflow):
    for variant in ("ramen", "rnd", "source"):
        rows = read_tsv(workflow / "results" / "ud" / f"{variant}_fr.tsv")
        test = [row for row in rows if row["split"] == "test"]
        assert len(test) == 1 and test[0]["mode"] == "zero-shot" and int(test[0]["sentences"]) == 30
        assert 0.0 <= float(test[0]["las"]) <= float(test[0]["uas"]) <= 1.0
        assert [row["epoch"] for row in rows if row["split"] == "dev"] == ["1", "2"]
    comparison = read_tsv(workflow / "results" / "report" / "paper_comparison.tsv")
    placed = {(row["table"], row["task"], row["variant"]): row["paper"] for row in comparison}
    assert placed[("1", "xnli", "ramen")] == "75.1" and placed[("2", "ud", "ramen")] == "77.0"
    assert placed[("3", "ud", "rnd")] == "71.0" and placed[("2", "ud", "source")] == ""
    assert "## Table 2" in (workflow / "results" / "report" / "paper_tables.md").read_text()
    # The report's front page: XNLI and LAS per variant beside the paper's row of the same kind.
    headline = {row["variant"]: row for row in read_tsv(workflow / "results" / "report" / "headline.tsv")}
    assert set(headline) == {"ramen", "rnd", "source"}
    assert (headline["ramen"]["xnli_paper"], headline["ramen"]["las_paper"]) == ("75.1", "77.0")
    assert (headline["rnd"]["xnli_paper"], headline["rnd"]["las_paper"]) == ("66.9", "71.0")
    assert headline["source"]["xnli_paper"] == "" and headline["source"]["las"] != ""


def test_xnli_predictions_are_the_scored_pairs(workflow):
    for variant in ("ramen", "rnd", "source"):
        test = next(row for row in read_tsv(workflow / "results" / "xnli" / f"{variant}_fr.tsv")
                    if row["split"] == "test" and row["lang"] == "fr")
        pairs = read_tsv(workflow / "results" / "xnli" / f"{variant}_fr.predictions.tsv")
        gold = read_tsv(workflow / "data" / "xnli.test.fr.tsv")
        assert [(p["premise"], p["hypothesis"], p["gold"]) for p in pairs] == [
            (" ".join(g["premise"].split()), " ".join(g["hypothesis"].split()), g["label"]) for g in gold]
        accuracy = sum(p["gold"] == p["predicted"] for p in pairs) / len(pairs)
        assert accuracy == pytest.approx(float(test["accuracy"]), abs=1e-6)


def test_parsing_predictions_score_as_the_tables_say_with_the_official_scorer(workflow):
    from udtools import udeval

    for table, gold in (("results/ud/ramen_fr", "data/ud.test.fr.conllu"),
                        ("results/ud/supervised/ramen_fr", "data/ud.test.fr.conllu")):
        if not (workflow / f"{table}.tsv").exists():
            assert run(workflow, f"{table}.tsv").returncode == 0
        test = next(row for row in read_tsv(workflow / f"{table}.tsv") if row["split"] == "test")
        scores = udeval.evaluate(udeval.load_conllu_file(str(workflow / gold)),
                                 udeval.load_conllu_file(str(workflow / f"{table}.conllu")))
        assert scores["LAS"].f1 == pytest.approx(float(test["las_all"]), abs=1e-6)
        assert scores["UAS"].f1 == pytest.approx(float(test["uas_all"]), abs=1e-6)
        predicted = (workflow / f"{table}.conllu").read_text(encoding="utf-8").splitlines()
        original = (workflow / gold).read_text(encoding="utf-8").splitlines()
        assert len(predicted) == len(original)
        for ours, theirs in zip(predicted, original):  # only HEAD and DEPREL differ
            ours, theirs = ours.split("\t"), theirs.split("\t")
            assert ours[:6] + ours[8:] == theirs[:6] + theirs[8:]


def test_exported_sides_load_as_standard_hugging_face_models(workflow):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    for side in ("en", "fr"):
        directory = workflow / "results" / "models" / "ramen_fr" / side
        model = AutoModelForMaskedLM.from_pretrained(directory)
        tokenizer = AutoTokenizer.from_pretrained(directory)
        assert model.config.vocab_size == len(tokenizer)
        encoded = tokenizer("Deux hommes marchent.", return_tensors="pt")
        logits = model(**encoded).logits
        assert logits.shape[-1] == len(tokenizer)
    english = AutoModelForMaskedLM.from_pretrained(workflow / "results" / "models" / "ramen_fr" / "en")
    french = AutoModelForMaskedLM.from_pretrained(workflow / "results" / "models" / "ramen_fr" / "fr")
    shared = [name for name, _ in english.named_parameters() if "word_embeddings" not in name and "predictions.bias" not in name]
    french_params = dict(french.named_parameters())
    for name in shared:
        assert np.array_equal(dict(english.named_parameters())[name].detach().numpy(),
                              french_params[name].detach().numpy()), name


def test_init_report_measures_every_initialised_variant(workflow):
    rows = {row["variant"]: row for row in read_tsv(workflow / "results" / "report" / "init_fr.tsv")}
    assert set(rows) == {"ramen", "rnd"}
    assert rows["ramen"]["init"] == "parallel" and float(rows["ramen"]["coverage"]) > float(rows["rnd"]["coverage"])
    assert int(rows["rnd"]["bli_queries"]) > 0 and 0.0 <= float(rows["rnd"]["p@1"]) <= float(rows["rnd"]["p@5"]) <= 1.0
    assert (workflow / "results" / "report" / "init_fr.png").stat().st_size > 0


def test_alignment_probabilities_are_normalised(workflow):
    from ramen.alignment.parallel import load_alpha

    alpha = load_alpha(workflow / "results" / "align" / "en-fr" / "alpha.npz")
    sums = np.asarray(alpha.sum(axis=1)).ravel()
    supported = sums > 0
    assert supported.mean() > 0.2
    assert np.allclose(sums[supported], 1.0)


def test_logs_and_training_curves_exist(workflow):
    logs = list((workflow / "logs").rglob("*.log"))
    assert len(logs) >= 15
    metrics = list(csv.DictReader(open(workflow / "results" / "training" / "ramen_fr.metrics.csv")))
    assert [int(row["step"]) for row in metrics] == [1, 2, 3, 4]
    assert all(np.isfinite(float(row["loss_fr"])) for row in metrics)
    assert (workflow / "results" / "report" / "mlm_loss.png").read_bytes()[:4] == b"\x89PNG"


def test_report_is_generated(workflow):
    result = run(workflow, "--report", "results/report.html")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (workflow / "results" / "report.html").stat().st_size > 10_000
    # The front page (workflow/report/workflow.rst) shows the headline table: its header and cells.
    html = (workflow / "results" / "report.html").read_text(encoding="utf-8")
    assert "xnli_paper</th>" in html and "RAMEN base + BERT (parallel init)</td>" in html


def planned_jobs(output: str) -> dict[str, int]:
    jobs = {}
    table = output.split("Job stats:")[1] if "Job stats:" in output else ""
    for line in table.splitlines():
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match and match.group(1) != "total":
            jobs[match.group(1)] = int(match.group(2))
    return jobs


def test_nothing_to_do_after_a_complete_run(workflow):
    result = run(workflow, "-n")
    assert result.returncode == 0, result.stderr[-3000:]
    assert planned_jobs(result.stdout + result.stderr) == {}


def test_changing_a_training_setting_reruns_only_training_and_downstream(workflow):
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["training"]["peak_lr"] = config["training"]["peak_lr"] * 2
    changed = workflow / "changed.yaml"
    changed.write_text(yaml.safe_dump(config))
    result = run(workflow, "-n", "--configfile", str(changed))
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = planned_jobs(result.stdout + result.stderr)
    assert jobs.get("train_bilingual") == 2
    assert jobs.get("finetune_xnli") == 2  # the source baseline is not retrained
    assert jobs.get("ud_zero_shot") == 2
    assert set(jobs) <= {"train_bilingual", "finetune_xnli", "evaluate_xnli", "summarise_xnli", "plot_mlm_loss",
                         "ud_zero_shot", "paper_tables", "headline", "all"}


def test_an_objective_variant_trains_on_pairs_and_reruns_only_for_its_own_settings(workflow):
    target = "results/models/ramen-da_fr/fr"
    result = run(workflow, target)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = (workflow / "results" / "training" / "ramen-da_fr.metrics.csv").read_text().splitlines()
    assert {"loss_en", "loss_fr", "loss_pair_en", "loss_pair_fr"} <= set(metrics[0].split(","))
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    gated = {"gated": True, "buckets": 32, "max_distance": 128}
    for setting, value, expected in (("decomposed_share", True, {"train_bilingual": 1}),
                                     ("rtd", {"weight": 1.0}, {}),  # tlm-da does not read rtd settings
                                     ("relative_position", {**gated, "gated": False, "buckets": 16}, {}),  # off
                                     ("relative_position", gated, {"train_bilingual": 1})):
        changed = workflow / f"objective_{setting}.yaml"
        changed.write_text(yaml.safe_dump({**config, "objectives": {**config["objectives"], setting: value}}))
        result = run(workflow, target, "-n", "--configfile", str(changed))  # --configfile takes several values
        assert result.returncode == 0, result.stderr[-3000:]
        assert planned_jobs(result.stdout + result.stderr) == expected


def test_checkpoint_curves_read_an_objective_run(workflow):
    # Decomposed attention with focal loss: its checkpoints hold cross-lingual blocks and switch steps.
    target = "results/curves/ramen-da_fr.tsv"
    result = run(workflow, target)
    assert result.returncode == 0, result.stderr[-3000:]
    assert [row["step"] for row in read_tsv(workflow / target)] == ["0", "2", "4"]


def test_changing_the_vocabulary_size_reruns_bpe_and_alignment(workflow):
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["bpe"]["merges"] = 250
    changed = workflow / "changed_bpe.yaml"
    changed.write_text(yaml.safe_dump(config))
    jobs = planned_jobs((lambda r: r.stdout + r.stderr)(run(workflow, "-n", "--configfile", str(changed))))
    assert jobs.get("learn_bpe") == 1 and jobs.get("align") == 1
    assert "warmup_head" not in jobs and "prepare_monolingual" not in jobs


def planned_job_languages(output: str) -> dict[str, set[str]]:
    """For each rule in a dry run, the `lang` (or a text's `side`) wildcard values of its planned jobs ("" for none)."""
    languages: dict[str, set[str]] = {}
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", output):
        match = re.match(r"(?:local)?rule (\w+):", block)
        if not match:
            continue
        lang = re.search(r"^\s*wildcards:.*\b(?:lang|side)=([\w-]+)", block, re.MULTILINE)
        languages.setdefault(match.group(1), set()).add(lang.group(1) if lang else "")
    return languages


# Hand-written Russian inputs for a second target language.
RUSSIAN = [
    "Мальчик играет с собакой в парке.", "Женщина читает книгу у окна.", "Двое мужчин идут по улице.",
    "Девочка ест красное яблоко.", "Кошка спит на диване.", "Мы пьём чай на кухне.",
    "Старик сидит на скамейке.", "Дети бегут к реке.", "Музыкант играет на гитаре.", "Поезд прибывает вечером.",
]
ENGLISH = [
    "A boy plays with a dog in the park.", "A woman reads a book by the window.", "Two men walk down the street.",
    "A girl eats a red apple.", "A cat sleeps on the sofa.", "We drink tea in the kitchen.",
    "An old man sits on a bench.", "Children run to the river.", "A musician plays the guitar.",
    "The train arrives in the evening.",
]


def russian_conllu(sentences: list[str]) -> str:
    blocks = []
    for number, sentence in enumerate(sentences, start=1):
        words = sentence.rstrip(".").split()
        rows = [f"{i}\t{w}\t{w.lower()}\tX\t_\t_\t{0 if i == 1 else 1}\t{'root' if i == 1 else 'dep'}\t_\t_"
                for i, w in enumerate(words, start=1)]
        rows.append(f"{len(words) + 1}\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_")
        blocks.append(f"# sent_id = ru-{number}\n# text = {sentence}\n" + "\n".join(rows))
    return "\n\n".join(blocks) + "\n\n"


def add_russian(workflow: Path) -> dict:
    """The workflow's config with Russian added as a second target language, its files written."""
    data = workflow / "data" / "ru"
    data.mkdir(parents=True, exist_ok=True)
    (data / "ru.txt").write_text("".join(f"{s} {n}\n" for n in range(30) for s in RUSSIAN), encoding="utf-8")
    (data / "en.txt").write_text("".join(f"{s} {n}\n" for n in range(30) for s in ENGLISH), encoding="utf-8")
    (data / "parallel.ru").write_text("".join(f"{s} {n}\n" for n in range(30) for s in RUSSIAN), encoding="utf-8")
    labels = ["entailment", "neutral", "contradiction"]
    for split, rows in (("dev", RUSSIAN[:5]), ("test", RUSSIAN[5:])):
        lines = ["premise\thypothesis\tlabel\tgenre"]
        lines += [f"{a}\t{b}\t{labels[i % 3]}\tfiction" for i, (a, b) in enumerate(zip(rows, rows[1:] + rows[:1]))]
        (data / f"xnli.{split}.ru.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (data / "ud.dev.ru.conllu").write_text(russian_conllu(RUSSIAN[:4]), encoding="utf-8")
    (data / "ud.test.ru.conllu").write_text(russian_conllu(RUSSIAN[4:]), encoding="utf-8")
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["languages"] = ["fr", "ru"]
    config["corpora"]["ru"] = [{"path": "data/ru/ru.txt", "format": "text"}]
    config["parallel"]["ru"] = {"en": "data/ru/en.txt", "ru": "data/ru/parallel.ru"}
    config["tasks"]["xnli"]["dev"]["ru"] = "data/ru/xnli.dev.ru.tsv"
    config["tasks"]["xnli"]["test"]["ru"] = "data/ru/xnli.test.ru.tsv"
    config["tasks"]["ud"]["dev"]["ru"] = "data/ru/ud.dev.ru.conllu"
    config["tasks"]["ud"]["test"]["ru"] = "data/ru/ud.test.ru.conllu"
    return config


def test_adding_a_language_schedules_only_its_own_jobs(workflow):
    with_russian = workflow / "with_russian.yaml"
    with_russian.write_text(yaml.safe_dump(add_russian(workflow)))
    result = run(workflow, "-n", "--configfile", str(with_russian))
    assert result.returncode == 0, result.stderr[-3000:]
    languages = planned_job_languages(result.stdout + result.stderr)
    assert languages.get("train_bilingual") == {"ru"} and languages.get("evaluate_xnli") == {"ru"}
    summaries = {"summarise_xnli", "plot_mlm_loss", "paper_tables", "headline", "all"}
    for rule, langs in languages.items():
        assert langs <= {"ru"} or (rule in summaries and langs == {""}), (rule, langs)


def test_an_edited_test_file_reruns_only_its_evaluations(workflow):
    test_file = workflow / "data" / "xnli.test.fr.tsv"
    original, stat = test_file.read_bytes(), test_file.stat()
    try:
        lines = original.decode("utf-8").splitlines(keepends=True)
        test_file.write_text("".join(lines[:-5]), encoding="utf-8")  # fewer pairs
        result = run(workflow, "-n")
        assert result.returncode == 0, result.stderr[-3000:]
        jobs = planned_jobs(result.stdout + result.stderr)
        # ramen and rnd, and the source model, whose one shared fine-tuning is not rerun
        assert jobs.pop("evaluate_xnli") == 2 and jobs.pop("evaluate_xnli_shared") == 1
        assert jobs.pop("check_decontamination") == 1
        assert set(jobs) <= {"summarise_xnli", "paper_tables", "headline", "all"}, jobs
    finally:
        test_file.write_bytes(original)
        os.utime(test_file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert planned_jobs((lambda r: r.stdout + r.stderr)(run(workflow, "-n"))) == {}


def test_invalid_config_names_the_setting(workflow):
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["training"]["stepz"] = 3
    bad = workflow / "bad.yaml"
    bad.write_text(yaml.safe_dump(config))
    result = run(workflow, "-n", "--configfile", str(bad))
    assert result.returncode != 0
    assert "stepz" in result.stdout + result.stderr


def test_inputs_named_by_url_are_downloaded_and_prepared_like_local_files(workflow, tmp_path):
    import functools
    import threading
    import zipfile
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    served = tmp_path / "served"
    served.mkdir()
    (served / "fr.txt").write_bytes((workflow / "data" / "fr.txt").read_bytes())
    with zipfile.ZipFile(served / "pair.zip", "w") as bundle:
        bundle.write(workflow / "data" / "en.txt", "corpus/en.txt")
        bundle.write(workflow / "data" / "fr.txt", "corpus/fr.txt")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(served))
    handler.log_message = lambda *args: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        config = yaml.safe_load((workflow / "config.yaml").read_text())
        config["corpora"]["fr"] = [{"url": f"{base}/fr.txt", "format": "text"}]
        config["parallel"]["fr"] = {lang: {"url": f"{base}/pair.zip", "member": f"corpus/{lang}.txt"} for lang in ("en", "fr")}
        remote = workflow / "remote.yaml"
        remote.write_text(yaml.safe_dump(config))
        before = {name: (workflow / name).read_bytes() for name in ("results/text/fr/train.txt", "results/parallel/en-fr/train.fr.txt")}
        result = run(workflow, *before, "--configfile", str(remote))  # targets first: --configfile takes several
        assert result.returncode == 0, result.stderr[-5000:]
    finally:
        server.shutdown()
    downloads = workflow / "results" / "downloads" / "127.0.0.1"
    assert (downloads / "fr.txt").read_bytes() == (served / "fr.txt").read_bytes()
    assert (downloads / "pair.zip.d" / "corpus" / "en.txt").read_bytes() == (workflow / "data" / "en.txt").read_bytes()
    for name, content in before.items():
        assert (workflow / name).read_bytes() == content, name  # same text as from the local files
def test_nmt_tables_have_plain_fused_and_ablation_rows(workflow):
    result = run(workflow, "nmt_all")
    assert result.returncode == 0, result.stderr[-5000:]
    rows = read_tsv(workflow / "results" / "nmt" / "source_en-fr.tsv")
    assert [row["model"] for row in rows] == ["plain", "fused", "no-dropnet", "no-bert-enc", "no-bert-dec"]
    for row in rows:
        assert 0.0 <= float(row["bleu"]) <= 100.0 and int(row["sentences"]) == 12
        assert float(row["decode_s"]) > 0 and int(row["train_steps"]) == 3
    assert (workflow / "results" / "nmt" / "translations" / "source_en-fr" / "fused.fr").read_text().count("\n") == 12
    summary = read_tsv(workflow / "results" / "report" / "nmt_summary.tsv")
    assert len(summary) == 5 and summary[0]["bleu_vs_plain"] == "0.0"
    config = yaml.safe_load((workflow / "config.yaml").read_text())
    config["tasks"]["nmt"]["settings"]["p_net"] = 0.5
    changed = workflow / "changed_nmt.yaml"
    changed.write_text(yaml.safe_dump(config))
    jobs = planned_jobs((lambda r: r.stdout + r.stderr)(run(workflow, "nmt_all", "-n", "--configfile", str(changed))))
    assert jobs.get("nmt_train_fused") == 4 and "nmt_train_plain" not in jobs and "nmt_data" not in jobs


def test_char2subword_tables_and_initialiser_on_request(workflow):
    result = run(workflow, "char2subword_all", "results/init/ramen-c2s_fr.safetensors")
    assert result.returncode == 0, result.stderr[-3000:]
    stages = [row["stage"] for row in read_tsv(workflow / "results" / "char2subword" / "ramen_fr" / "precision.tsv")]
    assert stages[0] == "untrained" and "approx (ce)" in stages and stages[-1].endswith("-> pre-training -> approx")
    rows = read_tsv(workflow / "results" / "char2subword" / "xnli" / "ramen_fr.tsv")
    assert {row["mode"] for row in rows} == {"table", "full", "hybrid"}
    assert all(int(row["n"]) == 60 and 0 <= float(row["accuracy_noisy"]) <= 1 for row in rows)
    stats = json.loads((workflow / "results" / "init" / "ramen-c2s_fr.json").read_text())
    assert stats["method"] == "char2subword" and stats["supported_share"] == 1.0
