"""A decoder source through the stages: foreign initialisation (tied and untied output layers, special
tokens by string), staged bilingual causal training on the one training loop, SIGKILL and resume,
export as standard causal LMs."""

from __future__ import annotations

import csv
import importlib.util
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ramen.errors import ConfigError
from ramen.training.checkpoints import list_checkpoints
from ramen.pipeline.initialise import initialise_foreign
from ramen.pipeline.train import train_bilingual, warmup_head

sys.path.insert(0, str(Path(__file__).parent))
from test_causal import SENTENCES, byte_level_tokenizer, tiny_causal_lm  # noqa: E402

FRENCH = ["le chat est sur la table", "un chien court dans le parc", "il fait beau aujourd'hui",
          "la maison est grande", "les enfants jouent dehors"] * 20
STAGES = [{"until": 4, "train": ["foreign_embeddings"]},
          {"until": 8, "train": ["foreign_embeddings", "head", "top:1"]},
          {"train": ["encoder", "head", "source_embeddings", "foreign_embeddings"]}]


@pytest.fixture(scope="module", params=["llama-untied", "llama-tied"])
def decoder_inputs(request, tmp_path_factory):
    """A tiny decoder source directory, a French byte-level tokenizer and both encoded corpora."""
    from ramen.vocab.encode import encode_corpus

    root = tmp_path_factory.mktemp(request.param)
    source_tokenizer = byte_level_tokenizer(300)
    model = tiny_causal_lm(request.param, len(source_tokenizer))
    model.save_pretrained(root / "source")
    source_tokenizer.save_pretrained(root / "source")
    # The French vocabulary shares the special strings but numbers them differently.
    foreign_tokenizer = byte_level_tokenizer(270, bos="<s>")
    foreign_tokenizer.save_pretrained(root / "fr_tokenizer")
    (root / "en.txt").write_text("\n".join(SENTENCES * 5) + "\n")
    (root / "fr.txt").write_text("\n".join(FRENCH) + "\n")
    encode_corpus(source_tokenizer, root / "en.txt", root / "encoded_en")
    encode_corpus(foreign_tokenizer, root / "fr.txt", root / "encoded_fr")
    return {"root": root, "layout": request.param, "source": root / "source", "tokenizer": root / "fr_tokenizer",
            "en": root / "encoded_en", "fr": root / "encoded_fr"}


def initialise(inputs, method="mean") -> Path:
    out = inputs["root"] / f"init_{method}.safetensors"
    initialise_foreign(method, inputs["source"], inputs["tokenizer"], {}, 0, out,
                              inputs["root"] / f"init_{method}.json")
    return out


def test_initialisation_follows_the_output_layer_and_maps_special_tokens_by_string(decoder_inputs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = AutoModelForCausalLM.from_pretrained(decoder_inputs["source"])
    source_tokenizer = AutoTokenizer.from_pretrained(decoder_inputs["source"])
    foreign_tokenizer = AutoTokenizer.from_pretrained(decoder_inputs["tokenizer"])
    tensors = load_file(str(initialise(decoder_inputs)))
    untied = decoder_inputs["layout"] == "llama-untied"
    assert ("output" in tensors) == untied
    assert "bias" not in tensors  # Llama's output layer has none
    table, rows = source.get_input_embeddings().weight, source.get_output_embeddings().weight
    for token in ("<s>", "<|endoftext|>", "<pad>"):
        f, e = foreign_tokenizer.convert_tokens_to_ids(token), source_tokenizer.convert_tokens_to_ids(token)
        assert torch.equal(tensors["embeddings"][f], table[e].detach())
        if untied:
            assert torch.equal(tensors["output"][f], rows[e].detach())
    ordinary = foreign_tokenizer.convert_tokens_to_ids("Ġchat") if "Ġchat" in foreign_tokenizer.get_vocab() else 100
    assert torch.allclose(tensors["embeddings"][ordinary], table.detach().mean(0), atol=1e-6)
    if untied:
        assert torch.allclose(tensors["output"][ordinary], rows.detach().mean(0), atol=1e-6)


TRAIN_SCRIPT = '''
import sys, time
from pathlib import Path
import torch
from ramen.training import trainer as training
from ramen.pipeline.train import train_bilingual

STAGES = {stages!r}


def run(source, tokenizer, init, en, fr, out, step_delay=0.0, steps=12):
    torch.set_num_threads(1)
    if step_delay:  # slows the run down so that it can be killed mid-way; results do not change
        schedule = training.TrainSettings.learning_rate
        training.TrainSettings.learning_rate = lambda self, step: (time.sleep(step_delay), schedule(self, step))[1]
    settings = training.TrainSettings(steps=steps, batch_size=4, seq_len=16, peak_lr=1e-2, init_lr=1e-4,
                                      warmup_steps=2, log_every=1, checkpoint_every=1, keep_last=2, keep_every=4,
                                      stages=STAGES)
    out = Path(out)
    train_bilingual(source, {{"fr": {{"init": init, "tokenizer": tokenizer}}}}, {{"en": en, "fr": fr}},
                    settings, {{"en": str(out / "en"), "fr": str(out / "fr")}}, out / "checkpoints",
                    out / "metrics.csv", objective={{"name": "clm"}})


if __name__ == "__main__":
    run(*sys.argv[1:7], float(sys.argv[7]))
'''


def load_script(path: Path):
    spec = importlib.util.spec_from_file_location(f"decoder_script_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rows_of(path: Path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def checkpoint_tensors(checkpoints: Path, step: int) -> dict[str, torch.Tensor]:
    run_dir = next(path.parent for path in checkpoints.rglob(f"step-{step:08d}"))
    return load_file(str(run_dir / f"step-{step:08d}" / "model.safetensors"))


def kill_at_checkpoint(script: Path, args: list[str], out: Path, step: int, finished: str) -> None:
    """Run ``script args out 0.3`` (0.3 s a step) and SIGKILL it once a checkpoint of ``step`` or later
    is written under ``out``, before it writes ``out / finished``."""
    process = subprocess.Popen([sys.executable, str(script), *args, str(out), "0.3"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 180
        while not any(reached >= step for path in out.rglob("step-*") for reached, _ in
                      list_checkpoints(path.parent)):
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, f"no checkpoint at step {step}"
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    assert not (out / finished).exists(), "the run was not killed mid-way"


@pytest.mark.slow
def test_staged_training_killed_and_resumed_equals_uninterrupted(decoder_inputs, tmp_path):
    from transformers import AutoModelForCausalLM

    init = initialise(decoder_inputs)
    script = tmp_path / "train_script.py"
    script.write_text(TRAIN_SCRIPT.format(stages=STAGES))
    args = [str(decoder_inputs[key]) for key in ("source", "tokenizer")] + [str(init)] + [
        str(decoder_inputs[key]) for key in ("en", "fr")]
    killed = tmp_path / "killed"
    kill_at_checkpoint(script, args, killed, 5, "fr")

    module = load_script(script)
    module.run(*args, str(killed))
    module.run(*args, str(tmp_path / "straight"))
    straight_rows = rows_of(tmp_path / "straight" / "metrics.csv")
    assert [int(row["step"]) for row in straight_rows] == list(range(1, 13))
    columns = ("step", "lr", "loss_en", "loss_fr")  # not the timing columns
    assert [[row[c] for c in columns] for row in rows_of(killed / "metrics.csv")] == [
        [row[c] for c in columns] for row in straight_rows]
    final = {}
    for name in ("killed", "straight"):
        final[name] = {key: value for key, value in AutoModelForCausalLM.from_pretrained(
            tmp_path / name / "fr").state_dict().items()}
    for key, value in final["straight"].items():
        assert torch.equal(value, final["killed"][key]), key

    # The stages: up to update 4 only the French table moved; up to 8 also the top block (and the
    # untied output rows); from 9 on everything.
    checkpoints = tmp_path / "straight" / "checkpoints"
    start = {"lm." + key if not key.startswith("foreign") else key: value
             for key, value in AutoModelForCausalLM.from_pretrained(decoder_inputs["source"]).state_dict().items()}
    at4, at8 = checkpoint_tensors(checkpoints, 4), checkpoint_tensors(checkpoints, 8)
    model_keys = [key for key in at4 if key.startswith("model.lm.")]
    moved = {step: {key for key in model_keys if not torch.equal(tensors[key], start[key[len("model."):]])}
             for step, tensors in ((4, at4), (8, at8))}
    assert moved[4] == set()
    assert moved[8] and all(".layers.1." in key or "lm_head" in key for key in moved[8])
    assert any(".layers.1." in key for key in moved[8])
    assert not torch.equal(at4["model.foreign_embeddings.fr.weight"], load_file(str(init))["embeddings"])
    english = AutoModelForCausalLM.from_pretrained(tmp_path / "straight" / "en").state_dict()
    assert not torch.equal(english["model.layers.0.mlp.up_proj.weight"], start["lm.model.layers.0.mlp.up_proj.weight"])


def test_a_masked_lm_objective_is_refused_for_a_decoder(decoder_inputs, tmp_path):
    from ramen.training.trainer import TrainSettings

    with pytest.raises(ConfigError, match="objective .mlm. trains a masked LM but the source .* is a causal LM"):
        train_bilingual(decoder_inputs["source"], {}, {}, TrainSettings(steps=1, batch_size=2), {},
                        tmp_path, tmp_path / "m.csv", objective={"name": "mlm"})


def test_the_head_warm_up_of_a_decoder_saves_the_source_unchanged(decoder_inputs, tmp_path):
    """A causal LM predicts its own tokens: the warm-up stage trains nothing and saves it as is."""
    from transformers import AutoModelForCausalLM

    from ramen.training.trainer import TrainSettings

    warmup_head(decoder_inputs["source"], decoder_inputs["en"], TrainSettings(steps=5, batch_size=2),
                tmp_path / "source", tmp_path / "ckpt", tmp_path / "warmup.csv")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "source").state_dict()
    original = AutoModelForCausalLM.from_pretrained(decoder_inputs["source"]).state_dict()
    assert saved.keys() == original.keys()
    assert all(torch.equal(saved[key], original[key]) for key in saved)
    assert (tmp_path / "warmup.csv").read_text() == "step,lr\n"
    assert not (tmp_path / "ckpt").exists()


def test_a_decoder_source_gets_a_byte_level_vocabulary(decoder_inputs, tmp_path):
    from transformers import AutoTokenizer

    from ramen.pipeline.vocabulary import learn_foreign_vocabulary

    stats = learn_foreign_vocabulary(decoder_inputs["root"] / "fr.txt", decoder_inputs["source"], tmp_path / "tok",
                                     tmp_path / "codes", merges=40, max_vocab_size=None, lowercase=None,
                                     min_symbol_count=1)
    assert stats["kind"] == "byte-level"
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    for text in ("Où est l'hôpital ? 東京 🙂", "le chat est sur la table"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text  # every string encodes and decodes
    source = AutoTokenizer.from_pretrained(decoder_inputs["source"])
    assert {tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token} == {
        source.bos_token, source.eos_token, source.pad_token}
    assert len(tokenizer) <= 256 + 40 + len(source.all_special_tokens)
    assert (tmp_path / "codes").exists()


# Each layout once, and each way of training once: the untied head with stages, the case where a
# frozen group's gradients and the second output layer both meet DDP.
@pytest.mark.slow
@pytest.mark.parametrize(("decoder_inputs", "stages"), [
    ("llama-tied", ()),
    ("llama-untied", ({"until": 1, "train": ["foreign_embeddings"]},
                      {"train": ["encoder", "head", "source_embeddings", "foreign_embeddings"]})),
], indirect=["decoder_inputs"], ids=["llama-tied-all", "llama-untied-staged"])
def test_two_processes_train_a_decoder_as_one_does(decoder_inputs, tmp_path, stages):
    """torchrun with two CPU processes (gloo) splits every batch of windows between them and ends
    where one process does, up to the order in which gradients are summed; with stages too (under
    DDP every gradient is exchanged and a stage's frozen ones are dropped before the update)."""
    import numpy as np
    from transformers import AutoModelForCausalLM

    from ramen.pipeline.launch import launch

    init = initialise(decoder_inputs)

    def arguments(out: Path) -> dict:
        return {"source_dir": str(decoder_inputs["source"]),
                "foreign": {"fr": {"init": str(init), "tokenizer": str(decoder_inputs["tokenizer"])}},
                "data_dirs": {"en": str(decoder_inputs["en"]), "fr": str(decoder_inputs["fr"])},
                "out_dirs": {"en": str(out / "en"), "fr": str(out / "fr")}, "checkpoint_dir": str(out / "ckpt"),
                "metrics_out": str(out / "metrics.csv"), "source_lang": "en", "device": "cpu",
                "objective": {"name": "clm"}}

    settings = dict(steps=3, batch_size=4, seq_len=16, peak_lr=1e-3, init_lr=1e-5, warmup_steps=1, log_every=1,
                    threads=1, stages=list(stages), checkpoint_every=1, keep_every=1)
    launch("train_bilingual", arguments(tmp_path / "pair"), {**settings, "gpus": 2})
    launch("train_bilingual", arguments(tmp_path / "single"), settings)
    columns = ("loss_en", "loss_fr")
    pair, single = rows_of(tmp_path / "pair" / "metrics.csv"), rows_of(tmp_path / "single" / "metrics.csv")
    assert [row["step"] for row in pair] == [row["step"] for row in single] == ["1", "2", "3"]
    np.testing.assert_allclose([[float(row[c]) for c in columns] for row in pair],
                               [[float(row[c]) for c in columns] for row in single], atol=1e-4)
    for lang in ("en", "fr"):
        ours = AutoModelForCausalLM.from_pretrained(tmp_path / "pair" / lang).state_dict()
        theirs = AutoModelForCausalLM.from_pretrained(tmp_path / "single" / lang).state_dict()
        for name in theirs:
            # Adam moves a weight whose gradient is near zero by up to the rate whatever its sign,
            # so summation order shows in a few elements at the rate's scale.
            torch.testing.assert_close(ours[name], theirs[name], rtol=1e-3, atol=1e-4,
                                       msg=lambda message, name=name: f"{name}: {message}")
    if stages:
        # Update 1 trained the French table alone in both runs: the shared blocks are the source's.
        start = AutoModelForCausalLM.from_pretrained(decoder_inputs["source"]).state_dict()
        for run in ("pair", "single"):
            at1 = checkpoint_tensors(tmp_path / run / "ckpt", 1)
            blocks = [key for key in at1 if ".layers." in key]
            assert blocks and all(torch.equal(at1[key], start[key[len("model.lm."):]]) for key in blocks), run
