"""GGUF export (ramen.modeling.gguf_export): an exported side written as model.gguf reads back
through transformers' GGUF loader with the exported model's logits and token ids, and what ramen
cannot write is refused while the job graph is built."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest
import torch

from ramen.errors import ConfigError
from ramen.modeling.gguf_export import source_pre_tokenizer, write_gguf
from ramen.workflow.gguf_checks import check_gguf_export
from tiny_decoder import (ENGLISH, build_byte_tokenizer_dir, build_sentencepiece_tokenizer_dir, export_tiny_side,
                          split_like_qwen2, tiny_llama, write_llama_gguf)

PARALLEL = Path(__file__).resolve().parents[2] / "resources" / "demo" / "parallel"
TRAIN_LINES = 150  # the foreign tokenizer learns from these; the lines after them are held out
HELD_OUT = 12


def demo_lines(name: str, start: int, count: int) -> list[str]:
    path = PARALLEL / name
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    return lines[start:start + count]


def foreign_lines(start: int, count: int) -> list[str]:
    """Greek (flores) and French (Multi30k) text: two scripts, accents, digits and punctuation."""
    return demo_lines("flores.train.el", start, count) + demo_lines("multi30k.val.fr.gz", start, count)


def held_out_lines() -> list[str]:
    return (foreign_lines(TRAIN_LINES, HELD_OUT) + demo_lines("multi30k.val.en.gz", TRAIN_LINES, HELD_OUT)
            + ["Прага — столица Чехии.", "东京是日本的首都。", "x = 3.14; y = [1, 2]  # tabs\tand  spaces",
               "<|im_start|>user\nΓεια σου<|im_end|>"])


def read_back(directory: Path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file="model.gguf").eval()
    return model, AutoTokenizer.from_pretrained(directory, gguf_file="model.gguf")


def assert_round_trip(directory: Path, lines: list[str], tolerance: float) -> float:
    """The GGUF file's model and tokenizer against the exported directory's: the same ids for every
    line, logits within ``tolerance``; the largest logit difference."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    exported = AutoModelForCausalLM.from_pretrained(directory).eval()
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model, gguf_tokenizer = read_back(directory)
    largest = 0.0
    for line in lines:
        ids = tokenizer(line)["input_ids"]
        assert gguf_tokenizer(line)["input_ids"] == ids, line
        with torch.no_grad():
            batch = torch.tensor([ids[:64]])  # within the tiny model's 128 positions
            difference = (model(batch).logits - exported(batch).logits).abs().max().item()
        largest = max(largest, difference)
    assert largest <= tolerance, largest
    return largest


@pytest.fixture(scope="module")
def greek_french_tokenizer(tmp_path_factory):
    """A byte-level foreign tokenizer with chat markers, learned on the demo's Greek and French."""
    return build_byte_tokenizer_dir(tmp_path_factory.mktemp("fr_el"), foreign_lines(0, TRAIN_LINES), 600)


@pytest.mark.parametrize("layout", ["llama-untied", "llama-tied", "mistral", "qwen2", "qwen3", "phi3", "gemma2"])
def test_an_exported_side_reads_back_from_gguf_with_its_logits_and_token_ids(tmp_path, layout,
                                                                             greek_french_tokenizer):
    from transformers import AutoTokenizer
    from transformers.integrations.gguf import get_gguf_tokenizer

    side = export_tiny_side(tmp_path, layout, greek_french_tokenizer)
    summary = write_gguf(side, side / "model.gguf", dtype="f32", source=tmp_path / "source")
    assert summary["tokenizer"] == "gpt2" and summary["pre"] == ("qwen2" if layout.startswith("qwen") else "gpt-2")
    largest = assert_round_trip(side, held_out_lines(), 1e-4)
    print(f"{layout}: max |logit difference| {largest:.3g}")
    model, tokenizer = read_back(side)
    # transformers reads the template (its tokenizer object then drops it; llama.cpp applies it).
    _, _, file_config = get_gguf_tokenizer(str(side / "model.gguf"))
    assert file_config["chat_template"] == AutoTokenizer.from_pretrained(side).chat_template
    assert [file_config[f"{role}_token"] for role in ("bos", "eos", "pad")] == ["<|endoftext|>", "<|im_end|>",
                                                                               "<|endoftext|>"]
    assert model.config.tie_word_embeddings == (layout in ("llama-tied", "qwen2", "qwen3", "gemma2"))


def test_a_sentencepiece_tokenizer_is_written_with_scores_that_keep_its_merge_order(tmp_path):
    """A Llama-2-style source (SentencePiece BPE, byte fallback): the file's tokenizer gives the
    ids of the exported tokenizer and of SentencePiece itself, unseen characters as bytes."""
    import gguf
    import sentencepiece

    tokenizer_dir = build_sentencepiece_tokenizer_dir(tmp_path / "sp", ENGLISH + foreign_lines(0, 40), 500)
    side = export_tiny_side(tmp_path, "llama-untied", tokenizer_dir)
    assert write_gguf(side, side / "model.gguf", dtype="f32")["tokenizer"] == "llama"
    lines = held_out_lines()
    assert_round_trip(side, lines, 1e-4)
    processor = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer_dir / "sentencepiece.model"))
    _, tokenizer = read_back(side)
    for line in lines:
        assert tokenizer(line)["input_ids"] == [1, *processor.encode(line)], line
    reader = gguf.GGUFReader(side / "model.gguf")
    types = reader.get_field("tokenizer.ggml.token_type").contents()
    assert types.count(gguf.TokenType.BYTE) == 256 and types[:3] == [2, 3, 3]  # <unk>, <s>, </s>
    assert reader.get_field("tokenizer.ggml.add_space_prefix").contents() is True


@pytest.mark.parametrize("kind", ["bytes", "sentencepiece"])
def test_an_extended_tokenizer_is_written_whole(tmp_path, kind):
    """What a `vocabulary: extend` variant exports (the source's tokenizer plus foreign tokens, for a
    SentencePiece source also characters that were byte pieces) reads back from the file with the
    ids of the exported tokenizer on held-out lines, and the logits of the export."""
    from sp_source import build_sp_source_dir

    from ramen.vocab.extend import extend_tokenizer

    if kind == "bytes":
        source = build_byte_tokenizer_dir(tmp_path / "source_tokenizer", ENGLISH * 5, 400)
    else:
        source = build_sp_source_dir(tmp_path / "source_tokenizer", "llama2", chat=True)
    record = extend_tokenizer(source, foreign_lines(0, TRAIN_LINES), tmp_path / "extended", new_tokens=200,
                              min_frequency=2)
    assert record["new_tokens"] > 100
    side = export_tiny_side(tmp_path, "llama-tied", tmp_path / "extended")
    assert write_gguf(side, side / "model.gguf", dtype="f32", source=tmp_path / "source")["tokenizer"] == (
        "gpt2" if kind == "bytes" else "llama")
    assert_round_trip(side, held_out_lines(), 1e-4)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_precision_keeps_norms_in_f32(tmp_path, dtype, greek_french_tokenizer):
    import gguf

    side = export_tiny_side(tmp_path, "llama-untied", greek_french_tokenizer)
    write_gguf(side, side / "model.gguf", dtype=dtype, source=tmp_path / "source")
    types = {tensor.name: tensor.tensor_type.name for tensor in gguf.GGUFReader(side / "model.gguf").tensors}
    assert types["token_embd.weight"] == dtype.upper() and types["blk.0.attn_q.weight"] == dtype.upper()
    assert types["output_norm.weight"] == "F32"
    assert_round_trip(side, held_out_lines()[:4], 0.05)


def test_the_pre_tokenizer_name_comes_from_the_source(tmp_path):
    """A GGUF source's tokenizer.ggml.pre is copied; a Hugging Face source's is named from its
    pre-tokenizer; one ramen cannot name asks for gguf.pre."""
    from transformers import AutoTokenizer

    source = build_byte_tokenizer_dir(tmp_path / "hf")
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = tiny_llama(len(tokenizer))
    model.save_pretrained(source)
    assert source_pre_tokenizer(source) == "gpt-2"
    write_llama_gguf(model, tokenizer, tmp_path / "source.gguf")
    assert source_pre_tokenizer(tmp_path / "source.gguf") == "default"
    split_like_qwen2(source)
    assert source_pre_tokenizer(source) == "qwen2"
    tokenizer_json = json.loads((source / "tokenizer.json").read_text())
    tokenizer_json["pre_tokenizer"] = {"type": "Whitespace"}
    (source / "tokenizer.json").write_text(json.dumps(tokenizer_json))
    with pytest.raises(ConfigError, match="gguf.pre"):
        source_pre_tokenizer(source)


def test_an_architecture_without_a_writer_is_refused_before_any_job(tmp_path):
    from transformers import Olmo2Config

    Olmo2Config(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2,
                num_key_value_heads=1).save_pretrained(tmp_path / "olmo2")
    (tmp_path / "olmo2" / "model.safetensors").write_bytes(b"")
    config = {"source": {"model": str(tmp_path / "olmo2")}, "gguf": {"dtype": "f16", "pre": None},
              "download_dir": str(tmp_path / "downloads")}
    with pytest.raises(ConfigError, match="source.model.*olmo2.*no GGUF writer.*GGUF loader"):
        check_gguf_export(config)
    with pytest.raises(ConfigError, match="gguf.dtype"):
        check_gguf_export({**config, "gguf": {"dtype": "q4_0", "pre": None}})


@pytest.mark.parametrize("change, problem", [
    # Llama 3.1's config.json as published (rope_scaling, the key before transformers 5)
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rotary scaling 'llama3'"),
    ({"model_type": "mistral", "sliding_window": 4096, "max_position_embeddings": 32768}, "sliding-window"),
])
def test_a_layout_the_file_would_get_wrong_is_refused_before_any_job(tmp_path, change, problem):
    """The writer's own layout check, applied to the source's config.json while the graph is built."""
    source = tmp_path / "source"
    source.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8,
              "num_attention_heads": 2, "max_position_embeddings": 64, "hidden_act": "silu", **change}
    (source / "config.json").write_text(json.dumps(config))
    (source / "model.safetensors").write_bytes(b"")
    with pytest.raises(ConfigError, match=f"source.model.*{problem}"):
        check_gguf_export({"source": {"model": str(source)}, "gguf": {"dtype": "f16", "pre": None},
                           "download_dir": str(tmp_path / "downloads")})


def test_writing_refuses_what_the_file_would_get_wrong(tmp_path, greek_french_tokenizer):
    side = export_tiny_side(tmp_path, "llama-untied", greek_french_tokenizer)
    config = json.loads((side / "config.json").read_text())
    config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    (side / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="source.model.*rotary scaling 'linear'"):
        write_gguf(side, tmp_path / "out.gguf", dtype="f32", source=tmp_path / "source")
    assert not (tmp_path / "out.gguf").exists()


# --- the workflow: rule export_gguf, dry runs -------------------------------------------------------


def dry_run(workdir: Path, config: dict, *targets: str):
    import subprocess
    import sys

    import yaml

    repo = Path(__file__).resolve().parents[2]
    if not (workdir / "resources").exists():
        (workdir / "resources").symlink_to(repo / "resources")  # the demo config's relative paths
    (workdir / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return subprocess.run(
        [str(Path(sys.executable).parent / "snakemake"), "--snakefile", str(repo / "workflow" / "Snakefile"),
         "--directory", str(workdir), "--cores", "1", "-n", *targets, "--configfile", str(workdir / "config.yaml")],
        capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=600)


def decoder_config(source: Path, **gguf) -> dict:
    import yaml

    repo = Path(__file__).resolve().parents[2]
    config = yaml.safe_load((repo / "config" / "demo-decoder.yaml").read_text(encoding="utf-8"))
    config["source"]["model"] = str(source)
    config["gguf"] = gguf
    return config


@pytest.mark.integration
def test_a_gguf_target_plans_the_export_after_training_and_a_gpt2_source_is_refused_by_name(tmp_path):
    """One dry run plans results/gguf/<variant>_<lang>/<side>/model.gguf from the trained side; the
    same target of a source without a GGUF writer fails the dry run naming source.model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from tiny_decoder import build_tiny_decoder_dir

    hf = build_tiny_decoder_dir(tmp_path / "llama")
    write_llama_gguf(AutoModelForCausalLM.from_pretrained(hf), AutoTokenizer.from_pretrained(hf),
                     tmp_path / "tiny.gguf")
    workdir = tmp_path / "run"
    workdir.mkdir()
    result = dry_run(workdir, decoder_config(tmp_path / "tiny.gguf", dtype="bf16"), "gguf_all")
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    planned = set(re.findall(r"results/gguf/\S+/model\.gguf", result.stdout))
    assert "results/gguf/fvt-ext_fr/fr/model.gguf" in planned and "results/gguf/pfvt-ext_el/en/model.gguf" in planned
    assert re.search(r"export_gguf\s+\d+", result.stdout) and re.search(r"train_bilingual\s+\d+", result.stdout)

    gpt2 = tmp_path / "gpt2"
    build_byte_tokenizer_dir(gpt2)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(AutoTokenizer.from_pretrained(gpt2)), n_embd=16, n_layer=2, n_head=2,
                               n_positions=64, bos_token_id=0, eos_token_id=2)).save_pretrained(gpt2)
    result = dry_run(workdir, decoder_config(gpt2), "results/gguf/fvt-ext_fr/fr/model.gguf")
    assert result.returncode != 0
    assert re.search(r"source\.model'?: model_type 'gpt2' has no GGUF writer", result.stdout + result.stderr), \
        (result.stdout + result.stderr)[-3000:]


@pytest.mark.integration
def test_a_dtype_the_writer_does_not_know_fails_the_dry_run_by_its_key(tmp_path):
    result = dry_run(tmp_path, decoder_config(tmp_path / "unused.gguf", dtype="q4_0"))
    output = result.stdout + result.stderr
    assert result.returncode != 0 and re.search(r"gguf\W+dtype", output) and "q4_0" in output, output[-2000:]
