"""The peer initialisers end to end on the tiny workflow: init, training (or 0 updates), XNLI, UD,
retrieval and the comparison table."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from safetensors.torch import load_file

from test_workflow import copy_of_spine, run

pytestmark = pytest.mark.integration

# Two methods trained and at update 0 keep the test short; the other two peers get their initial tables.
PAIRS = {"wechsel": "wechsel-u0", "scratch": "scratch-u0"}
INIT_ONLY = ["focus", "overlap"]


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    workdir = copy_of_spine(tmp_path_factory, "peers")  # the shared upstream steps are done
    config = yaml.safe_load((workdir / "config.yaml").read_text())
    variants = [*PAIRS, *PAIRS.values()]
    config["targets"] = {"xnli": variants, "ud": variants, "retrieval": variants}
    config["peer_report"] = {"variants": PAIRS}
    config["init_report"]["variants"] = INIT_ONLY
    # 600 French lines: FOCUS's min_count of 10 would leave few tokens a vector.
    config["peers"]["focus"]["fasttext"].update(min_count=2, bucket=200000, epoch=5)
    config["tasks"]["ud"]["settings"].update(epochs=1)
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    result = run(workdir)
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def _rows(path):
    with open(path, encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_comparison_table_has_every_method_before_and_after_training(peers):
    rows = {row["method"]: row for row in _rows(peers / "results/report/peers_fr.tsv")}
    assert sorted(rows) == sorted(PAIRS)  # the config file lists them sorted (yaml.safe_dump)
    for row in rows.values():
        for column in ("xnli_update0", "xnli_trained", "las_update0", "las_trained", "retrieval_trained"):
            assert 0.0 <= float(row[column]) <= 100.0, (row["method"], column)
    assert (peers / "results/report/peers_fr.png").stat().st_size > 0
    stats = {m: json.loads((peers / f"results/init/{m}_fr.json").read_text()) for m in [*PAIRS, *INIT_ONLY]}
    assert sorted(row["variant"] for row in _rows(peers / "results/report/init_fr.tsv")) == sorted([*PAIRS, *INIT_ONLY])
    # FOCUS copies the very tokens overlap copies and mixes others from them: never less coverage.
    assert 0 < stats["overlap"]["supported_share"] < 1
    assert stats["focus"]["supported_share"] >= stats["overlap"]["supported_share"]
    assert stats["wechsel"]["support_size_mean"] == 10.0  # top-10 neighbours, the paper's k
    assert stats["scratch"]["supported_share"] == 0.0


def test_update_zero_exports_the_initial_table(peers):
    initial = load_file(peers / "results/init/wechsel-u0_fr.safetensors")["embeddings"]
    exported = load_file(peers / "results/models/wechsel-u0_fr/fr/model.safetensors")
    table = next(t for name, t in exported.items() if name.endswith("word_embeddings.weight"))
    assert table.shape == initial.shape and (table - initial).abs().max() < 1e-6


def test_scratch_redraws_the_english_side(peers):
    def english_table(directory):
        tensors = load_file(directory / "model.safetensors")
        return next(t for name, t in tensors.items() if name.endswith("word_embeddings.weight"))

    source = english_table(peers / "results/models/source")
    assert not (english_table(peers / "results/models/scratch-u0_fr/en") - source).abs().max() < 1e-3
    assert (english_table(peers / "results/models/wechsel-u0_fr/en") - source).abs().max() < 1e-6
