"""Decoder sources and the bilingual causal LM: family detection, tied/untied output layers with and
without a bias, GGUF files, packed next-token windows, export as a standard causal LM."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from ramen.data.checkpoints import is_gguf_source, locate_source
from ramen.errors import ConfigError
from ramen.modeling.causal import (
    IGNORE_INDEX,
    BilingualCausalLM,
    CausalBatch,
    ForeignTables,
    packed_windows,
    special_token_ids,
)
from ramen.modeling.sources import (
    DECODER,
    ENCODER,
    load_source_causal_lm,
    load_source_tokenizer,
    source_family,
    causal_lm_parts,
    transformer_blocks,
)
from tiny_decoder import write_llama_gguf

SENTENCES = ["the cat sat on the mat", "a dog runs in the park", "le chat est sur la table",
             "un chien court dans le parc", "the weather is nice today", "il fait beau aujourd'hui"] * 4


def byte_level_tokenizer(vocab_size: int = 300, bos: str | None = "<s>"):
    """A small byte-level BPE with BOS/EOS/PAD (every string encodes), as decoders use."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<pad>"] + ([bos] if bos else [])
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(SENTENCES, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=bos, eos_token="<|endoftext|>",
                                   pad_token="<pad>")


def tiny_causal_lm(layout: str, vocab_size: int, seed: int = 0):
    """Random-weight causal LMs of the supported layouts (hidden 32, two blocks)."""
    import transformers as tf

    torch.manual_seed(seed)
    shapes = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=128)
    if layout == "llama-tied":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**shapes, num_key_value_heads=2, tie_word_embeddings=True))
    elif layout == "llama-untied":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**shapes, num_key_value_heads=2, tie_word_embeddings=False))
    elif layout == "qwen2":
        model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**shapes, num_key_value_heads=2, tie_word_embeddings=True))
    elif layout == "phi-bias":  # an untied output layer with a bias
        model = tf.PhiForCausalLM(tf.PhiConfig(**shapes, tie_word_embeddings=False))
    elif layout == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=2, n_head=4,
                                                 n_positions=128, bos_token_id=0, eos_token_id=0))
    elif layout == "pythia":
        model = tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**shapes, tie_word_embeddings=False))
    else:
        raise ValueError(layout)
    if model.get_output_embeddings().bias is not None:
        torch.nn.init.normal_(model.get_output_embeddings().bias)  # not zero, so a lost bias shows
    return model.eval()


LAYOUTS = ["llama-tied", "llama-untied", "qwen2", "phi-bias", "gpt2", "pythia"]


def copied_tables(model) -> ForeignTables:
    parts = causal_lm_parts(model, byte_level_tokenizer())
    return ForeignTables(parts.input_embeddings, None if parts.tied else parts.output_rows, parts.output_bias)


def windows(vocab_size: int, rows: int = 3, length: int = 12, seed: int = 0) -> CausalBatch:
    ids = torch.randint(0, vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))
    labels = torch.cat([ids[:, 1:], torch.full((rows, 1), IGNORE_INDEX)], dim=1)
    return CausalBatch(ids, torch.ones_like(ids), labels)


# --- sources ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_family_is_read_from_the_checkpoint(tmp_path, layout):
    tiny_causal_lm(layout, 64).save_pretrained(tmp_path / "model")
    assert source_family(tmp_path / "model") == DECODER


def test_a_masked_lm_is_an_encoder_even_without_a_declared_architecture(tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    model = BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                       intermediate_size=64))
    model.save_pretrained(tmp_path / "mlm")
    assert source_family(tmp_path / "mlm") == ENCODER
    config = json.loads((tmp_path / "mlm" / "config.json").read_text())
    config.pop("architectures")
    (tmp_path / "mlm" / "config.json").write_text(json.dumps(config))
    assert source_family(tmp_path / "mlm") == ENCODER
    with pytest.raises(ConfigError, match="masked LM, not a causal LM"):
        load_source_causal_lm(tmp_path / "mlm")


def test_a_source_that_is_no_model_names_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="source.model.*neither a config.json nor a .gguf"):
        locate_source(tmp_path)
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(ConfigError, match="several GGUF files"):
        locate_source(tmp_path)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_source_parts_follow_the_output_layer(layout):
    model = tiny_causal_lm(layout, 64)
    parts = causal_lm_parts(model, byte_level_tokenizer())
    head = model.get_output_embeddings()
    assert parts.family == DECODER
    assert parts.tied == (head.weight is model.get_input_embeddings().weight)
    assert parts.tied == (layout in ("llama-tied", "qwen2", "gpt2"))
    assert torch.equal(parts.output_rows, head.weight)
    assert (parts.output_bias is not None) == (layout == "phi-bias")
    if parts.output_bias is not None:
        assert torch.equal(parts.output_bias, head.bias)
    assert parts.special_tokens == {"bos": "<s>", "eos": "<|endoftext|>", "pad": "<pad>"}
    assert len(transformer_blocks(model)) == 2


# --- the bilingual model ---------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_language_computes_what_the_source_computes_from_the_same_tables(layout):
    """A foreign side initialised with the source's own tables gives the source's loss: the shared
    stack, positions, output rows and bias are all used as the source uses them."""
    model = tiny_causal_lm(layout, 64)
    bilingual = BilingualCausalLM(model, "en", {"xx": copied_tables(model)}).eval()
    batch = windows(64)
    with torch.no_grad():
        losses = bilingual({"en": batch, "xx": batch})
        reference = model(input_ids=batch.input_ids, labels=batch.input_ids).loss
    assert torch.allclose(losses["en"], reference, atol=1e-5)
    assert torch.allclose(losses["xx"], reference, atol=1e-5)


def test_foreign_tables_are_separate_parameters_and_train_alone():
    model = tiny_causal_lm("llama-untied", 64)
    bilingual = BilingualCausalLM(model, "en", {"xx": copied_tables(model)})
    groups = bilingual.parameter_groups()
    everything = [id(p) for name in ("encoder", "head", "source_embeddings", "foreign_embeddings")
                  for p in groups[name]]
    assert len(everything) == len(set(everything)) == len({id(p) for p in bilingual.parameters()})
    assert bilingual.tables("xx").output is not bilingual.tables("en").output
    for param in bilingual.parameters():
        param.requires_grad_(False)
    bilingual.input_embeddings("xx").weight.requires_grad_(True)
    bilingual({"xx": windows(64)})["xx"].backward()
    assert bilingual.input_embeddings("xx").weight.grad.abs().sum() > 0
    assert bilingual.tables("xx").output.grad is None and bilingual.input_embeddings("en").weight.grad is None


def test_tables_that_do_not_match_the_source_layout_are_refused():
    tied = tiny_causal_lm("llama-tied", 64)
    untied = tiny_causal_lm("llama-untied", 64)
    with pytest.raises(ConfigError, match=r"'variants\.<variant>\.init': the source ties its output layer .* xx's "):
        BilingualCausalLM(tied, "en", {"xx": copied_tables(untied)})
    with pytest.raises(ConfigError, match="does not tie"):
        BilingualCausalLM(untied, "en", {"xx": copied_tables(tied)})
    with pytest.raises(ConfigError, match="has no bias"):
        BilingualCausalLM(untied, "en", {"xx": ForeignTables(torch.zeros(10, 32), torch.zeros(10, 32),
                                                             torch.zeros(10))})
    with pytest.raises(ConfigError, match=r"'variants\.<variant>\.init': embeddings .* hidden size 32"):
        BilingualCausalLM(tied, "en", {"xx": ForeignTables(torch.zeros(10, 16))})


def test_packed_windows_predict_the_next_token_across_sentences():
    ids = np.arange(10, 30, dtype=np.uint16)  # sentences of 3, 5, 4, 8 tokens
    offsets = np.array([0, 3, 8, 12, 20])
    batch = packed_windows(offsets, ids, np.random.default_rng(0), 16, 10, bos=1, eos=2, pad=0)
    for row in range(16):
        tokens = batch.input_ids[row][batch.attention_mask[row].bool()].tolist()
        assert tokens[0] == 1
        start = tokens[1]
        sentence = int(np.searchsorted(offsets, start - 10))
        expected = [1]
        for index in range(sentence, 4):
            expected += list(range(10 + offsets[index], 10 + offsets[index + 1])) + [2]
        assert tokens == expected[:len(tokens)]
        labels = batch.labels[row]
        real = labels != IGNORE_INDEX
        assert labels[real].tolist() == expected[1:1 + int(real.sum())]
        # the last sentence's window runs out: its padding neither attends nor predicts
        assert int(real.sum()) == min(10, len(expected) - 1)
    assert batch.input_ids.shape == (16, 10)
    no_bos = packed_windows(offsets, ids, np.random.default_rng(0), 4, 6, bos=None, eos=2, pad=0)
    assert int(no_bos.input_ids[0, 0]) >= 10


# --- export ----------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["llama-tied", "llama-untied", "phi-bias", "gpt2"])
def test_a_side_exports_as_a_standard_causal_lm(tmp_path, layout):
    from transformers import AutoModelForCausalLM

    source_tokenizer = byte_level_tokenizer(300)
    foreign_tokenizer = byte_level_tokenizer(280, bos="<bos>")
    model = tiny_causal_lm(layout, len(source_tokenizer))
    parts = causal_lm_parts(model, source_tokenizer)
    generator = torch.Generator().manual_seed(1)
    rows = len(foreign_tokenizer)
    tables = ForeignTables(torch.randn(rows, 32, generator=generator),
                           None if parts.tied else torch.randn(rows, 32, generator=generator),
                           None if parts.output_bias is None else torch.randn(rows, generator=generator))
    bilingual = BilingualCausalLM(model, "en", {"xx": tables}).eval()
    bilingual.export_language("xx", foreign_tokenizer, tmp_path / "xx")
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "xx").eval()
    assert type(exported) is type(model)
    assert exported.get_input_embeddings().weight.shape == (rows, 32)
    assert (exported.get_output_embeddings().weight is exported.get_input_embeddings().weight) == parts.tied
    ids = special_token_ids(foreign_tokenizer)
    assert exported.config.bos_token_id == foreign_tokenizer.convert_tokens_to_ids("<bos>") == ids["bos"]
    assert exported.config.eos_token_id == foreign_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert exported.generation_config.pad_token_id == ids["pad"]
    batch = windows(rows)
    with torch.no_grad():
        ours = bilingual({"xx": batch})["xx"]
        theirs = exported(input_ids=batch.input_ids, labels=batch.input_ids).loss
    assert torch.allclose(ours, theirs, atol=1e-5)


@pytest.mark.slow
def test_an_exported_side_generates_without_ramen(tmp_path):
    """The exported directory is all a user needs: a fresh interpreter in which ramen cannot be
    imported loads it with the Auto classes and generates."""
    source_tokenizer = byte_level_tokenizer(300)
    foreign_tokenizer = byte_level_tokenizer(280, bos="<bos>")
    model = tiny_causal_lm("llama-untied", len(source_tokenizer))
    generator = torch.Generator().manual_seed(2)
    tables = ForeignTables(torch.randn(len(foreign_tokenizer), 32, generator=generator),
                           torch.randn(len(foreign_tokenizer), 32, generator=generator))
    BilingualCausalLM(model, "en", {"xx": tables}).export_language("xx", foreign_tokenizer, tmp_path / "xx")
    script = textwrap.dedent("""
        import importlib.util, sys
        from pathlib import Path
        sys.path = [p for p in sys.path if not (Path(p or '.') / 'ramen').exists()]
        assert importlib.util.find_spec('ramen') is None, 'ramen is importable'
        from transformers import AutoModelForCausalLM, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
        model = AutoModelForCausalLM.from_pretrained(sys.argv[1])
        inputs = tokenizer('le chat', return_tensors='pt')
        out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
        assert out.shape[1] > inputs['input_ids'].shape[1], out.shape
        print('GENERATED', len(tokenizer.decode(out[0])))
    """)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    result = subprocess.run([sys.executable, "-I", "-c", script, str(tmp_path / "xx")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "GENERATED" in result.stdout


# --- GGUF sources ------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["llama-tied", "llama-untied"])
def test_a_gguf_file_is_a_source(tmp_path, layout):
    tokenizer = byte_level_tokenizer(300)
    model = tiny_causal_lm(layout, len(tokenizer))
    package = tmp_path / "package"
    package.mkdir()
    write_llama_gguf(model, tokenizer, package / "tiny.Q-F32.gguf")
    assert locate_source(package).gguf_file == "tiny.Q-F32.gguf"
    from ramen.glue import resolve_model_path

    assert resolve_model_path(str(package)) == str(package)  # the workflow accepts it as source.model
    assert source_family(package) == DECODER
    loaded = load_source_causal_lm(package / "tiny.Q-F32.gguf")
    loaded_tokenizer = load_source_tokenizer(package)
    parts = causal_lm_parts(loaded, loaded_tokenizer)
    assert parts.tied == (layout == "llama-tied")
    assert parts.special_tokens["bos"] == "<s>" and parts.special_tokens["eos"] == "<|endoftext|>"
    ids = loaded_tokenizer("the cat sat", add_special_tokens=False)["input_ids"]
    assert ids == tokenizer("the cat sat", add_special_tokens=False)["input_ids"]
    batch = windows(len(tokenizer))
    with torch.no_grad():
        expected = model(input_ids=batch.input_ids).logits
        got = loaded(input_ids=batch.input_ids).logits
    assert torch.allclose(got, expected, atol=1e-4)
    assert is_gguf_source(package) and is_gguf_source(package / "tiny.Q-F32.gguf")

    # Materialised as a standard directory, every later stage reads it with the Auto classes.
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ramen.families.causal_lm import prepare_source

    prepare_source(package, None, None, tmp_path / "source_hf", None, tmp_path / "metrics.csv")
    assert not is_gguf_source(tmp_path / "source_hf")
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "source_hf").eval()
    with torch.no_grad():
        assert torch.allclose(saved(input_ids=batch.input_ids).logits, expected, atol=1e-4)
    saved_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "source_hf")
    assert saved_tokenizer("the cat sat", add_special_tokens=False)["input_ids"] == ids
    assert saved_tokenizer.bos_token == "<s>"
