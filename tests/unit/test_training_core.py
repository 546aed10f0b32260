"""The update every loop shares (ramen.training.optimisation.Updates): gradient accumulation gives the
updates of the whole batch, precision settings reach autocast and the fp16 loss scale is part of
a checkpoint; each loop (XNLI, UD, NMT, char2subword) trains the same with its batches split."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from ramen.errors import ConfigError  # noqa: E402
from ramen.training.optimisation import Updates, micro_batches  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))


def test_micro_batches_split_rows_in_order_and_never_yield_empty_parts():
    parts = micro_batches([5, 1, 4, 2, 3], 2)
    assert parts == [[5, 1], [4, 2, 3]]
    assert [part.tolist() for part in micro_batches(3, 5)] == [[0], [1], [2]]
    assert [list(part) for part in micro_batches(np.arange(4), 1)] == [[0, 1, 2, 3]]


def regression(accumulation: int, weigh_by_share: bool, steps: int = 3) -> torch.Tensor:
    """Weights after a few updates of a weighted least-squares fit (a weighted mean, as token-level
    losses are), its 10 rows in ``accumulation`` micro-batches."""
    generator = torch.Generator().manual_seed(0)
    inputs, targets = torch.randn(10, 4, generator=generator), torch.randn(10, generator=generator)
    weights = torch.rand(10, generator=generator) + 0.5
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    updates = Updates(torch.optim.AdamW(model.parameters(), lr=0.1), max_grad_norm=0.5, accumulation=accumulation)

    def loss_of(rows):
        rows = torch.as_tensor(rows)
        return (weights[rows] * (model(inputs[rows]).squeeze(-1) - targets[rows]) ** 2).sum() / weights[rows].sum()

    def share(rows):
        return float(weights[torch.as_tensor(rows)].sum() / weights.sum())

    for _ in range(steps):
        updates.batch(list(range(10)), loss_of, share if weigh_by_share else None)
    return torch.cat([param.detach().flatten() for param in model.parameters()])


def test_accumulated_micro_batches_make_the_updates_of_the_whole_batch():
    whole = regression(1, weigh_by_share=False)
    # Parts of unequal size, weighted by their share of the weighted mean: the same gradient.
    torch.testing.assert_close(regression(3, weigh_by_share=True), whole, atol=1e-6, rtol=1e-5)
    # Weighted by rows instead, the parts no longer add up to the weighted mean: the test can fail.
    assert not torch.allclose(regression(3, weigh_by_share=False), whole, atol=1e-6)


def test_bf16_runs_the_loss_under_autocast_and_fp32_does_not():
    model = torch.nn.Linear(4, 2)
    seen = {}
    for precision in ("bf16", "fp32"):
        updates = Updates(torch.optim.SGD(model.parameters(), lr=0.1), precision=precision)

        def loss_of(rows, precision=precision):
            out = model(torch.ones(len(rows), 4))
            seen[precision] = out.dtype
            return out.float().pow(2).mean()

        updates.batch(4, loss_of)
    assert seen == {"bf16": torch.bfloat16, "fp32": torch.float32}


def test_fp16_loss_scale_is_saved_and_restored():
    model = torch.nn.Linear(4, 2)
    updates = Updates(torch.optim.SGD(model.parameters(), lr=0.1), precision="fp16")
    assert updates.scaler.is_enabled()
    updates.batch(4, lambda rows: model(torch.ones(len(rows), 4)).float().pow(2).mean())
    state = updates.state_dict()
    assert "scaler" in state and state["scaler"]["scale"] > 0
    restored = Updates(torch.optim.SGD(model.parameters(), lr=0.1), precision="fp16")
    state["scaler"]["scale"] = 1234.0
    restored.load_state_dict(state)
    assert restored.scaler.get_scale() == 1234.0
    assert "scaler" not in Updates(torch.optim.SGD(model.parameters(), lr=0.1)).state_dict()


@pytest.mark.parametrize("make", [
    lambda: __import__("ramen.tasks.xnli", fromlist=["x"]).NliSettings(grad_accumulation=0),
    lambda: __import__("ramen.tasks.ud", fromlist=["x"]).UdSettings(precision="fp8"),
    lambda: __import__("ramen.nmt.train", fromlist=["x"]).NmtTrainSettings(grad_accumulation=0),
    lambda: __import__("ramen.char2subword.pretrain", fromlist=["x"]).PretrainSettings(precision="half"),
])
def test_bad_accumulation_or_precision_names_the_setting(make):
    with pytest.raises(ConfigError) as error:
        make()
    assert "grad_accumulation" in str(error.value) or "precision" in str(error.value)


# --- every loop: split batches train the same trajectory ---------------------------------------
# Losses, not weights, are compared: parameters with no true gradient (a key bias, the arc
# scorer's dependent bias) get float noise as gradient, which Adam scales up to whole steps in
# either run. The losses do not depend on those parameters.

def assert_same_losses(a, b) -> None:
    assert len(a) == len(b) >= 2
    np.testing.assert_allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=1e-4, atol=1e-6)


def test_xnli_finetuning_with_accumulation_equals_whole_batches(tmp_path):
    from test_xnli import bert_config, build_sides, make_pairs
    from transformers import BertForMaskedLM

    from ramen.tasks import xnli

    def no_dropout(vocab_size: int, **sizes):  # dropout draws differ between split and whole batches
        config = bert_config(vocab_size, **sizes)
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = 0.0
        return config

    dirs = build_sides(tmp_path, BertForMaskedLM, no_dropout)
    train = make_pairs(48, 1)
    histories = []
    for accumulation in (1, 3):
        settings = xnli.NliSettings(epochs=3, batch_size=12, learning_rate=1e-3, seed=5, threads=1, dropout=0.0,
                                    grad_accumulation=accumulation)
        histories.append(xnli.finetune(dirs["en"], train, {"en": (None, train[:16])}, settings,
                                       tmp_path / f"out{accumulation}", progress=False))
    assert_same_losses(*([row["train_loss"] for row in history] for history in histories))
    assert [row["accuracy"] for row in histories[0]] == [row["accuracy"] for row in histories[1]]


def test_ud_parser_training_with_accumulation_equals_whole_batches(tiny_source_dir, tmp_path):
    from test_ud import TREEBANK, write_treebank

    from ramen.data.conllu import read_conllu
    from ramen.tasks import ud

    sentences = list(read_conllu(write_treebank(tmp_path / "tiny.conllu", TREEBANK)))
    histories = []
    for accumulation in (1, 2):
        settings = ud.UdSettings(epochs=3, batch_size=4, learning_rate=1e-3, head_learning_rate=5e-3, dropout=0.0,
                                 arc_dim=16, relation_dim=8, threads=1, grad_accumulation=accumulation,
                                 finetune_encoder=False)  # a fixed encoder: no dropout draws
        histories.append(ud.train_parser(tiny_source_dir, sentences, (None, sentences), settings,
                                         tmp_path / f"parser{accumulation}", dev_lang="en", progress=False))
    # Sentences of different lengths: equal only because micro-batches weigh by their words.
    assert_same_losses(*([row["train_loss"] for row in history] for history in histories))


def test_nmt_training_with_accumulation_equals_whole_batches(tmp_path):
    from test_nmt import BOS, copy_data, tiny_config

    from ramen.nmt.model import TransformerNmt
    from ramen.nmt.train import NmtTrainSettings, ParallelData, train

    data = copy_data(60, np.random.default_rng(2))
    pairs = ParallelData(source=data, target=data)
    settings = NmtTrainSettings(steps=4, max_tokens=96, warmup_steps=2, log_every=1, eval_every=1,
                                checkpoint_every=4, seed=3)
    runs = []
    for accumulation in (1, 2):
        torch.manual_seed(0)
        model = TransformerNmt(tiny_config(vocab_size=13, dropout=0.0, bert_dim=None))
        runs.append(train(model, pairs, pairs, None, dataclasses.replace(settings, grad_accumulation=accumulation),
                          tmp_path / f"run{accumulation}", tmp_path / f"run{accumulation}.csv", BOS))
    for column in ("train_loss", "dev_loss"):
        assert_same_losses(*([row[column] for row in rows] for rows in runs))


def test_char2subword_approximation_with_accumulation_equals_whole_batches():
    from ramen.char2subword.approximate import ApproximationSettings, approximate, new_module

    words = ["cat", "dog", "house", "garden", "mouse", "tree", "river", "stone", "bread", "water"]
    table = torch.randn(len(words), 16, generator=torch.Generator().manual_seed(0))
    runs = []
    for accumulation in (1, 2):
        module = new_module(table, words, {"dim": 16, "layers": 1, "heads": 2, "max_chars": 12}, seed=0)
        settings = ApproximationSettings(steps=4, batch_size=6, learning_rate=0.01, warmup_steps=1, top_k=2,
                                         noise_share=0.0, log_every=1, grad_accumulation=accumulation)
        runs.append(approximate(module, table, words, np.arange(len(words)), settings, progress=False))
    for column in ("loss", "ce", "cos", "l2", "nbr"):
        assert_same_losses(*([row[column] for row in rows] for rows in runs))


def test_step_loop_checkpoints_tied_weights_once_and_warns_of_changed_settings(tmp_path, caplog):
    import json
    import logging

    from safetensors.torch import load_file

    from ramen.training.checkpoints import list_checkpoints
    from ramen.training.loops import StepLoop

    def loop(steps: int, lr: float) -> tuple[StepLoop, torch.nn.Module]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Embedding(6, 3), torch.nn.Linear(3, 6, bias=False))
        model[1].weight = model[0].weight  # tied, as a masked LM's output layer is to its input table
        updates = Updates(torch.optim.SGD(model.parameters(), lr=lr))
        return StepLoop(model, updates, steps=steps, seed=0, checkpoint_dir=tmp_path, checkpoint_every=1,
                        keep_last=1, keep_every=2, settings={"lr": lr}), model

    first, model = loop(3, 0.1)
    for step in first.steps_to_run():
        first.update(2, lambda rows: model(torch.as_tensor([step % 6])).sum())
        first.log({"step": step})
    assert [step for step, _ in list_checkpoints(tmp_path)] == [2, 3]  # keep_last and keep_every
    saved = load_file(str(tmp_path / "step-00000003" / "model.safetensors"))
    assert len(saved) == 1  # the tied table once
    assert json.loads((tmp_path / "step-00000003" / "state.json").read_text())["rows"] == [{"step": s} for s in (1, 2, 3)]

    with caplog.at_level(logging.WARNING, logger="ramen.training"):
        resumed, again = loop(4, 0.2)
    assert resumed.step == 3 and resumed.rows == [{"step": 1}, {"step": 2}, {"step": 3}]
    assert again[1].weight is again[0].weight  # still tied after loading
    torch.testing.assert_close(again[0].weight, model[0].weight, rtol=0, atol=0)
    assert any("lr: 0.1 -> 0.2" in record.getMessage() for record in caplog.records), caplog.text


TIED_CHECKPOINT = """
import sys
import torch
from torch import nn
from pathlib import Path
from ramen.training.checkpoints import save_state

torch.manual_seed(0)
model = nn.ModuleList([nn.Embedding(7, 4), nn.Linear(4, 7), nn.Linear(4, 7), nn.Linear(4, 7)])
for head in model[1:]:
    head.weight = model[0].weight  # one table under four names
save_state(Path(sys.argv[1]), 1, modules={"model": model})
"""


def test_a_checkpoint_of_tied_weights_is_the_same_bytes_in_every_process(tmp_path):
    """Two runs of the same training give the same checkpoint files, tied weights included (the
    aliases are not written to the header, whose metadata order would change per process)."""
    import subprocess

    from torch import nn

    from ramen.training.checkpoints import read_module

    files = []
    for run in range(3):
        subprocess.run([sys.executable, "-c", TIED_CHECKPOINT, str(tmp_path / f"run{run}")], check=True)
        files.append((tmp_path / f"run{run}" / "step-00000001" / "model.safetensors").read_bytes())
    assert files[0] == files[1] == files[2]

    model = nn.ModuleList([nn.Embedding(7, 4), nn.Linear(4, 7), nn.Linear(4, 7), nn.Linear(4, 7)])
    for head in model[1:]:
        head.weight = model[0].weight
    read_module(tmp_path / "run0" / "step-00000001", "model", model)
    torch.manual_seed(0)
    expected = nn.Embedding(7, 4).weight
    torch.testing.assert_close(model[3].weight, expected, rtol=0, atol=0)
    assert model[3].weight is model[0].weight


def test_settings_of_models_that_do_not_fit_a_replica_are_checked_by_their_key():
    from ramen.training.settings import TrainSettings, check_training_sections

    base = {"steps": 10, "batch_size": 8}
    with pytest.raises(ConfigError) as error:
        check_training_sections({**base, "train": ["lora", "head"]}, {}, "head_warmup")
    assert error.value.setting == "head_warmup.train"
    with pytest.raises(ConfigError) as error:
        check_training_sections(base, {"big": {"nodes": 3, "gpus": 2}})
    assert error.value.setting == "variants.big.training.nodes"  # 8 rows do not split over 6 processes
    with pytest.raises(ConfigError) as error:
        check_training_sections({**base, "sharding": "zero3"}, {})
    assert error.value.setting == "training.sharding"
    with pytest.raises(ConfigError, match="fp16") as error:  # refused while the job graph is built
        check_training_sections({**base, "sharding": "fsdp"}, {"half": {"precision": "fp16"}})
    assert error.value.setting == "variants.half.training.precision"
    check_training_sections({**base, "train": ["lora", "foreign_embeddings"], "nodes": 2, "gpus": 2,
                             "sharding": "fsdp"}, {})
    settings = TrainSettings(steps=1, batch_size=8, train=("lora", "head"))
    assert settings.uses_lora and settings.trajectory()["lora"]["rank"] == 16
    # At their defaults the new settings leave a run's id as it was.
    assert not {"sharding", "lora"} & set(TrainSettings(steps=1, batch_size=8).trajectory())
