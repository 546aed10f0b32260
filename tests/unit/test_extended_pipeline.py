"""`vocabulary: extend` through the functions the rules call: the source's tokenizer extended
(extend_vocabulary), the extended tables from a registered initialiser (init_foreign), one model
trained on both languages' text in the extended ids and exported as every language's side
(train_bilingual), and the extension refused for a masked LM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ramen.errors import ConfigError
from ramen.pipeline.initialise import initialise_foreign
from ramen.pipeline.train import train_bilingual
from ramen.pipeline.vocabulary import extend_foreign_vocabulary
from ramen.training.trainer import TrainSettings
from ramen.vocab.encode import encode_corpus
from ramen.vocab.tokenizer import load_tokenizer

sys.path.insert(0, str(Path(__file__).parent))
from conftest import build_source_dir, french_lines  # noqa: E402
from test_causal import SENTENCES, byte_level_tokenizer, tiny_causal_lm  # noqa: E402


@pytest.fixture(scope="module", params=["llama-untied", "llama-tied"])
def extended(request, tmp_path_factory):
    """A tiny decoder source, its tokenizer extended on French text and both corpora in its ids."""
    root = tmp_path_factory.mktemp(request.param)
    source_tokenizer = byte_level_tokenizer(300)
    model = tiny_causal_lm(request.param, len(source_tokenizer))
    model.save_pretrained(root / "source")
    source_tokenizer.save_pretrained(root / "source")
    (root / "fr.txt").write_text("\n".join(french_lines(300)) + "\n", encoding="utf-8")
    (root / "en.txt").write_text("\n".join(SENTENCES * 5) + "\n", encoding="utf-8")
    summary = extend_foreign_vocabulary(root / "fr.txt", root / "source", root / "extended", new_tokens=40,
                                        min_frequency=2, source_text=root / "en.txt", keep_lines=1000)
    tokenizer = load_tokenizer(root / "extended")
    for lang in ("en", "fr"):
        encode_corpus(tokenizer, root / f"{lang}.txt", root / f"encoded_{lang}")
    return {"root": root, "layout": request.param, "summary": summary, "first": len(source_tokenizer),
            "tokenizer": tokenizer}


def test_the_extended_tokenizer_keeps_the_source_s_tokens_and_adds_foreign_ones(extended):
    source = load_tokenizer(extended["root"] / "source")
    tokenizer = extended["tokenizer"]
    added = len(tokenizer) - len(source)
    assert 0 < added <= 40
    assert all(tokenizer.convert_tokens_to_ids(token) == index for token, index in source.get_vocab().items())
    line = french_lines(1, seed=7)[0]
    assert tokenizer.decode(tokenizer(line)["input_ids"]) == line
    assert len(tokenizer(line)["input_ids"]) < len(source(line)["input_ids"])
    # the summary the rule writes is the record without its per-token list
    assert "tokens" not in extended["summary"] and "new_ids" not in extended["summary"]
    # the English text the rule passes encodes as the source encodes it
    assert extended["summary"]["kept_word_types"] > 0
    assert tokenizer(SENTENCES)["input_ids"] == source(SENTENCES)["input_ids"]


def test_init_writes_the_extended_tables_with_the_source_rows_unchanged(extended):
    from transformers import AutoModelForCausalLM

    root = extended["root"]
    stats = initialise_foreign("mean", root / "source", root / "extended", {}, 0, root / "init.safetensors",
                               root / "init.json", vocabulary="extend")
    tensors = load_file(str(root / "init.safetensors"))
    source = AutoModelForCausalLM.from_pretrained(root / "source")
    first, total = extended["first"], len(extended["tokenizer"])
    table = source.get_input_embeddings().weight.detach()
    assert tensors["embeddings"].shape == (total, table.shape[1])
    assert torch.equal(tensors["embeddings"][:first], table[:first])
    assert torch.allclose(tensors["embeddings"][first:], table[:first].mean(0).expand(total - first, -1), atol=1e-6)
    untied = extended["layout"] == "llama-untied"
    assert ("output" in tensors) == untied
    if untied:
        assert torch.equal(tensors["output"][:first], source.get_output_embeddings().weight.detach()[:first])
    assert stats["vocabulary"] == "extend" and stats["new_rows"] == total - first
    assert json.loads((root / "init.json").read_text())["source_rows"] == first


def test_one_model_trains_on_both_languages_and_is_every_side(extended, tmp_path):
    """A first stage of the new rows alone: the exported model's source rows and blocks are the
    source's, its new rows moved, and both sides are the same model with the extended tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = extended["root"]
    init = tmp_path / "init.safetensors"
    initialise_foreign("mean", root / "source", root / "extended", {}, 0, init, tmp_path / "init.json",
                       vocabulary="extend")
    settings = TrainSettings(steps=3, batch_size=4, seq_len=16, peak_lr=1e-2, init_lr=1e-3, warmup_steps=1,
                             log_every=1, checkpoint_every=2, stages=[{"train": ["foreign_embeddings"]}])
    train_bilingual(root / "source", {"fr": {"init": init, "tokenizer": root / "extended"}},
                    {"en": root / "encoded_en", "fr": root / "encoded_fr"}, settings,
                    {"en": str(tmp_path / "en"), "fr": str(tmp_path / "fr")}, tmp_path / "checkpoints",
                    tmp_path / "metrics.csv", objective={"name": "clm"}, vocabulary="extend")
    source = AutoModelForCausalLM.from_pretrained(root / "source")
    first, total = extended["first"], len(extended["tokenizer"])
    sides = [AutoModelForCausalLM.from_pretrained(tmp_path / lang) for lang in ("en", "fr")]
    for side in sides:
        assert side.get_input_embeddings().weight.shape[0] == total
        assert len(AutoTokenizer.from_pretrained(tmp_path / "en")) == total
        weights = side.get_input_embeddings().weight.detach()
        assert torch.equal(weights[:first], source.get_input_embeddings().weight.detach()[:first])
        assert not torch.allclose(weights[first:], load_file(str(init))["embeddings"][first:])
        block = dict(side.named_parameters())["model.layers.0.mlp.up_proj.weight"]
        assert torch.equal(block, dict(source.named_parameters())["model.layers.0.mlp.up_proj.weight"])
    assert all(torch.equal(a, b) for a, b in zip(sides[0].state_dict().values(), sides[1].state_dict().values()))
    lines = (tmp_path / "metrics.csv").read_text().splitlines()
    assert lines[0].startswith("step") and len(lines) == 1 + 3


def test_a_masked_lm_is_not_extended(tmp_path):
    source = build_source_dir(tmp_path / "masked")
    (tmp_path / "fr.txt").write_text("\n".join(french_lines(50)) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="variants.*.vocabulary.*'extend' is not offered for a masked LM"):
        extend_foreign_vocabulary(tmp_path / "fr.txt", source, tmp_path / "extended", new_tokens=10, min_frequency=2)
