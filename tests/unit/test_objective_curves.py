"""Checkpoint curves of objective runs: each kept checkpoint of a real (tiny) training run is
loaded into the objective's module and exported exactly as that training's own export."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from ramen.tasks.curves import exported_sides, run_checkpoints, run_sides
from ramen.vocab.encode import encode_corpus, encode_id_pairs, write_id_lines
from ramen.errors import RamenError
from ramen.objectives import objective_params
from ramen.training.trainer import TrainSettings
from ramen.pipeline.train import train_bilingual
from ramen.vocab.tokenizer import load_tokenizer

from conftest import french_lines

TRAINING = {"steps": 4, "batch_size": 4, "seq_len": 12, "peak_lr": 0.01, "warmup_steps": 0, "log_every": 1,
            "checkpoint_every": 2, "keep_every": 2, "train": ["encoder", "head", "foreign_embeddings"]}
# A non-zero rtd weight and generator depth within the tiny model's two layers.
OBJECTIVES = {"language_embeddings": True, "rtd": {"weight": 50.0, "generator_layers": 1}}


@pytest.fixture(scope="module")
def run_inputs(tmp_path_factory, tiny_source_dir):
    """Encoded text of both languages, encoded translation pairs and a random initial French table."""
    work = tmp_path_factory.mktemp("objective_run")
    tokenizer = load_tokenizer(tiny_source_dir)
    text = work / "text.txt"
    text.write_text("\n".join(french_lines(60)) + "\n", encoding="utf-8")
    for lang in ("en", "fr"):
        encode_corpus(tokenizer, text, work / "encoded" / lang)
        write_id_lines(tokenizer, text, work / f"ids.{lang}")
    encode_id_pairs(work / "ids.en", work / "ids.fr", work / "pairs", len(tokenizer), len(tokenizer))
    torch.manual_seed(1)
    save_file({"embeddings": torch.randn(len(tokenizer), 32), "bias": torch.zeros(len(tokenizer))},
              str(work / "init.safetensors"))
    return work


def train_run(name: str, work, source_dir, out, overrides=None):
    """Train ``name`` as the training rule does; return its objective params and exported sides."""
    objective = objective_params(name, OBJECTIVES, overrides)
    train_bilingual(source_dir, {"fr": {"init": str(work / "init.safetensors"), "tokenizer": source_dir}},
                    {lang: work / "encoded" / lang for lang in ("en", "fr")}, TrainSettings(**TRAINING),
                    {lang: out / "final" / lang for lang in ("en", "fr")}, out / "checkpoints", out / "metrics.csv",
                    objective=objective, pairs_dir=work / "pairs")
    return objective


def weights(directory) -> dict[str, torch.Tensor]:
    return load_file(f"{directory}/model.safetensors")


# rtd also with the gated relative position bias, whose runs train a converted (ramen-bert) model
GATED = {"relative_position": {"gated": True, "buckets": 8, "max_distance": 16}}


@pytest.mark.parametrize("name, overrides", [("mlm", None), ("tlm", None), ("rtd", None), ("rtd", GATED)])
def test_curve_exports_every_checkpoint_as_the_objective_training_does(tmp_path, run_inputs, tiny_source_dir,
                                                                       name, overrides):
    objective = train_run(name, run_inputs, tiny_source_dir, tmp_path, overrides)
    training = {**TRAINING, "objective": objective}
    init = run_inputs / "init.safetensors"
    exported = {step: {lang: weights(d) for lang, d in dirs.items()} for step, dirs in
                run_sides(tmp_path / "checkpoints", training, tiny_source_dir, init, tiny_source_dir, "fr")}
    assert sorted(exported) == [0, 2, 4]
    for lang in ("en", "fr"):
        final = weights(tmp_path / "final" / lang)
        assert final.keys() == exported[4][lang].keys()
        for key, tensor in final.items():
            torch.testing.assert_close(exported[4][lang][key], tensor, rtol=0, atol=0, msg=f"{lang} {key}")
    table = "bert.embeddings.word_embeddings.weight"
    torch.testing.assert_close(exported[0]["fr"][table], load_file(str(init))["embeddings"])
    assert not torch.equal(exported[2]["fr"][table], exported[4]["fr"][table])

    (step, checkpoint), = [(s, p) for s, p in run_checkpoints(tmp_path / "checkpoints", TRAINING, tiny_source_dir,
                                                              init, objective) if s == 4]
    state = load_file(str(checkpoint / "model.safetensors"))
    if name == "tlm":  # a trained language embedding, which the export folds into each table
        assert state["language_embeddings.weight"].abs().sum() > 0
    elif name == "rtd":  # the generator is trained and checkpointed but not exported
        assert any(key.startswith("generator.") for key in state)


def test_curves_refuse_checkpoints_of_another_run_or_objective(tmp_path, run_inputs, tiny_source_dir):
    objective = train_run("rtd", run_inputs, tiny_source_dir, tmp_path)
    init = run_inputs / "init.safetensors"
    with pytest.raises(RamenError, match="no checkpoints of this training run"):
        run_sides(tmp_path / "checkpoints", TRAINING, tiny_source_dir, init, tiny_source_dir, "fr")
    steps = run_checkpoints(tmp_path / "checkpoints", TRAINING, tiny_source_dir, init, objective)
    sides = exported_sides(tiny_source_dir, init, tiny_source_dir, "fr", steps,
                           objective=objective_params("tlm", OBJECTIVES))
    next(sides)  # step 0 is the initialisation itself
    with pytest.raises(RamenError, match="not a checkpoint of this 'tlm' training run"):
        next(sides)


def test_curves_read_the_modules_training_trains(tiny_source_dir):
    """Every objective, RAMEN's masked-LM included, checkpoints its module around the model (as
    ramen.pipeline.train.train_bilingual builds it); no objective is the default one."""
    from ramen.tasks.curves import trained_module
    from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
    from ramen.objectives.base import Objective
    from ramen.objectives.mlm import MaskedLM

    mlm = load_source_mlm(tiny_source_dir)
    table = mlm.get_input_embeddings().weight.detach().clone()
    model = BilingualMaskedLM(mlm, "en", {"fr": (table, torch.zeros(len(table)))})
    for spec in (None, {"name": "mlm"}, {"name": "mlm", "focal": {"enabled": True}}):
        module = trained_module(model, spec)
        assert isinstance(module, MaskedLM) and module.model is model
    assert isinstance(trained_module(model, {"name": "tlm"}), Objective)
