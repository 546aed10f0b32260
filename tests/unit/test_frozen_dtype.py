"""training.frozen_dtype: weights no stage trains held in bf16 or NF4 (ramen.modeling.frozen).

An extended decoder trains its new rows and LoRA adapters over a bf16 or NF4 base on the CPU
(under bf16 autocast); no source row moves, holds a gradient or an optimiser moment; a run killed
with SIGKILL resumes to exactly the uninterrupted run's losses and weights; the export dequantises
and merges into a plain model whose logits are the adapter model's; what cannot work is refused
while the job graph is built, naming training.frozen_dtype; the default leaves run ids as they were.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ramen.errors import ConfigError
from ramen.training.settings import LoraSettings, TrainSettings, check_training_sections

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tiny_decoder
from tiny_decoder import build_byte_tokenizer_dir, tiny_llama  # noqa: E402

NEW_ROWS = 24
SOURCE_ROW_NAMES = ("model.lm.model.embed_tokens.weight", "model.lm.lm_head.weight")


def extended_objective(tokenizer_dir: str, settings: TrainSettings):
    """CLM over an untied tiny Llama with ``NEW_ROWS`` new rows, adapters added when the settings train them."""
    import numpy as np

    from ramen.modeling.causal import BilingualCausalLM, ForeignTables, special_token_ids
    from ramen.objectives.base import BatchShape, ObjectiveSettings
    from ramen.objectives.causal import CausalLanguageModeling
    from ramen.vocab.encode import TokenStream
    from ramen.vocab.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    first = len(tokenizer)
    source = tiny_llama(first, tie=False, seed=0, hidden=32)
    generator = torch.Generator().manual_seed(1)
    tables = ForeignTables(*(torch.cat([part.weight.detach(), torch.randn(NEW_ROWS, 32, generator=generator) * 0.02])
                             for part in (source.get_input_embeddings(), source.get_output_embeddings())))
    model = BilingualCausalLM.extended(source, tables, first, ("en", "fr"))
    if settings.uses_lora:
        model.add_adapters(**dataclasses.asdict(settings.lora), seed=settings.seed)
    rng = np.random.default_rng(0)
    streams = {lang: TokenStream(ids=rng.integers(5, size, 2000).astype(np.uint16), offsets=np.arange(0, 2001, 10),
                                 vocab_size=size) for lang, size in (("en", first), ("fr", first + NEW_ROWS))}
    specials = special_token_ids(tokenizer)
    objective = CausalLanguageModeling.build(model, streams, {"en": specials, "fr": specials},
                                             BatchShape.of(settings), ObjectiveSettings())
    return objective, tokenizer


def settings_for(frozen_dtype: str, **values) -> TrainSettings:
    return TrainSettings(**{"steps": 6, "batch_size": 2, "seq_len": 16, "peak_lr": 1e-2, "init_lr": 1e-4,
                            "warmup_steps": 2, "weight_decay": 0.01, "log_every": 1, "checkpoint_every": 1,
                            "keep_last": 2, "threads": 1, "train": ["lora", "foreign_embeddings"],
                            "lora": LoraSettings(rank=4, alpha=8.0), "frozen_dtype": frozen_dtype, **values})


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> str:
    return str(build_byte_tokenizer_dir(tmp_path_factory.mktemp("frozen_tokenizer")))


class KeptAdamW(torch.optim.AdamW):
    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        KeptAdamW.made.append(self)


def held_like(start: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """``start`` as ramen.modeling.frozen holds it where it holds ``param`` (dequantised)."""
    from ramen.modeling.frozen import is_nf4

    if is_nf4(param):
        from ramen.modeling.frozen import to_nf4

        assert param.block_size == 64
        return to_nf4(start.to(torch.bfloat16), param.scaler_block_size).get_original_weight()
    return start.to(param.dtype)


@pytest.mark.parametrize("frozen_dtype", ["fp32", "bf16", "nf4"])
def test_an_extension_moves_only_its_new_rows_and_adapters(frozen_dtype, tokenizer_dir, tmp_path, monkeypatch):
    from ramen.modeling.frozen import dense, is_nf4
    from ramen.training.trainer import train

    monkeypatch.setattr(torch.optim, "AdamW", KeptAdamW)
    KeptAdamW.made.clear()
    settings = settings_for(frozen_dtype)
    objective, _ = extended_objective(tokenizer_dir, settings)
    start = {name: param.detach().clone() for name, param in objective.named_parameters()}
    train(objective, settings, tmp_path / "checkpoints", tmp_path / "metrics.csv", progress=False)
    optimizer, = KeptAdamW.made
    with_moments = {id(param) for param in optimizer.state}
    moved = set()
    for name, param in objective.named_parameters():
        if not torch.equal(dense(param.detach()), held_like(start[name], param)):
            moved.add(name)
        if ".lora_" not in name and name != "model.new_embeddings" and name != "model.new_output":
            assert param.grad is None and id(param) not in with_moments, name
            expected = {"fp32": torch.float32, "bf16": torch.bfloat16, "nf4": torch.bfloat16}[frozen_dtype]
            assert param.dtype == expected, name
    adapters = {name for name in start if ".lora_" in name}
    # lora_B starts at zero and moves; lora_A moves once B is nonzero.
    assert moved == adapters | {"model.new_embeddings", "model.new_output"}
    assert set(SOURCE_ROW_NAMES).isdisjoint(moved)
    quantised = [name for name, param in objective.named_parameters() if is_nf4(param)]
    if frozen_dtype == "nf4":  # every block's linear weight, under its adapter
        assert len(quantised) == 2 * 7 and all(name.endswith("base_layer.weight") for name in quantised)
    else:
        assert not quantised


KILL_SCRIPT = '''
import sys, time
sys.path.insert(0, {tests!r})
sys.path.insert(0, {unit!r})
import torch
from test_frozen_dtype import extended_objective, settings_for
from ramen.training import trainer as training


def run(tokenizer_dir, frozen_dtype, out, step_delay=0.0):
    torch.set_num_threads(1)
    if step_delay:  # slows the run down so that it can be killed mid-way; results do not change
        schedule = training.TrainSettings.learning_rate
        training.TrainSettings.learning_rate = lambda self, step: (time.sleep(step_delay), schedule(self, step))[1]
    settings = settings_for(frozen_dtype, steps=10)
    objective, tokenizer = extended_objective(tokenizer_dir, settings)
    training.train(objective, settings, out + "/checkpoints", out + "/metrics.csv", progress=False)
    objective.model.export_language("fr", tokenizer, out + "/model")
    return objective


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]))
'''


@pytest.mark.slow
@pytest.mark.parametrize("frozen_dtype", ["bf16", "nf4"])
def test_killed_and_resumed_equals_uninterrupted_and_the_export_computes_the_adapter_models_logits(
        frozen_dtype, tokenizer_dir, tmp_path):
    import importlib.util

    from transformers import AutoModelForCausalLM

    from test_decoder_training import kill_at_checkpoint

    from ramen.modeling.causal import CausalBatch

    script = tmp_path / "kill_script.py"
    script.write_text(KILL_SCRIPT.format(tests=str(Path(__file__).parents[1]), unit=str(Path(__file__).parent)))
    kill_at_checkpoint(script, [tokenizer_dir, frozen_dtype], tmp_path / "killed", 4, "model")
    spec = importlib.util.spec_from_file_location("frozen_kill_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.run(tokenizer_dir, frozen_dtype, str(tmp_path / "killed"))
    objective = module.run(tokenizer_dir, frozen_dtype, str(tmp_path / "straight"))

    def rows(path):
        lines = (path / "metrics.csv").read_text().splitlines()
        header = lines[0].split(",")
        keep = [header.index(column) for column in ("step", "lr", "loss_en", "loss_fr")]
        return [[line.split(",")[index] for index in keep] for line in lines[1:]]

    assert rows(tmp_path / "killed") == rows(tmp_path / "straight")
    assert len(rows(tmp_path / "straight")) == 10
    killed, straight = (load_file(str(tmp_path / name / "model" / "model.safetensors")) for name in ("killed", "straight"))
    assert killed.keys() == straight.keys() and all(torch.equal(killed[key], straight[key]) for key in straight)

    # The export: dequantised, adapters merged, a plain fp32 model of the extended vocabulary.
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "straight" / "model").eval()
    assert exported.config.vocab_size == objective.model.vocabulary_size("fr")
    assert all(param.dtype == torch.float32 for param in exported.parameters())
    model = objective.model.eval()
    ids = torch.randint(0, exported.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))
    batch = CausalBatch(ids, torch.ones_like(ids), ids)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ours = model.logits("fr", model.hidden_states({"fr": batch})["fr"]).float()
    with torch.no_grad():
        theirs = exported(input_ids=ids).logits
    # The trainer computes in bf16 (autocast), the export in fp32.
    torch.testing.assert_close(ours, theirs, atol=0.05, rtol=0.05)
    assert (ours - theirs).abs().mean() < 0.01


@pytest.mark.parametrize(("values", "message"), [
    ({"frozen_dtype": "int8"}, "unknown frozen dtype"),
    ({"frozen_dtype": "bf16", "precision": "fp32"}, "run the forward in bf16"),
    ({"frozen_dtype": "bf16", "sharding": "fsdp", "gpus": 2}, "not sharded"),
    ({"frozen_dtype": "nf4", "train": ["foreign_embeddings"]}, "no stage trains LoRA"),
    ({"frozen_dtype": "nf4", "train": ["lora", "encoder"]}, "cannot train"),
    ({"frozen_dtype": "nf4", "stages": [{"until": 2, "train": ["lora"]}, {"train": ["lora", "top:1"]}]},
     "cannot train"),
    ({"frozen_dtype": "nf4", "train": ["lora"], "gpus": 2}, "not replicated"),
])
def test_what_cannot_work_is_refused_while_the_graph_is_built(values, message):
    shared = {"steps": 4, "batch_size": 4, "train": ["lora", "foreign_embeddings"]}
    with pytest.raises(ConfigError, match=message) as error:
        check_training_sections(shared, {"ext": values})
    assert "variants.ext.training.frozen_dtype" in str(error.value)


def test_the_default_keeps_run_ids_and_another_dtype_changes_them():
    base = TrainSettings(steps=4, batch_size=4, train=["lora", "foreign_embeddings"])
    assert "frozen_dtype" not in base.trajectory()
    assert dataclasses.replace(base, frozen_dtype="nf4").trajectory()["frozen_dtype"] == "nf4"
    assert dataclasses.replace(base, frozen_dtype="bf16").compute_precision == "bf16"
