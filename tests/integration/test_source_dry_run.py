"""A source that cannot be transferred fails the dry run, naming the setting and the file: each of
these passed `snakemake -n` and failed in the first jobs that read the source, or after training
had started (ramen.families.check_source, from check_run_inputs in common.smk)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import build_source_dir
from test_config import REPO, demo_config, failing_dry_run, snakemake, workdir  # noqa: F401 (a fixture)
from tiny_decoder import build_tiny_decoder_dir, write_llama_gguf

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    """A tiny masked LM (WordPiece tokenizer) and a tiny causal LM as one GGUF file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    root = tmp_path_factory.mktemp("sources")
    hf = build_tiny_decoder_dir(root / "causal")
    gguf = root / "tiny.gguf"
    write_llama_gguf(AutoModelForCausalLM.from_pretrained(hf), AutoTokenizer.from_pretrained(hf), gguf)
    return {"masked": build_source_dir(root / "masked"), "gguf": gguf}


def with_source(config: dict, path: Path) -> dict:
    config["source"]["model"] = str(path)
    return config


def decoder_config() -> dict:
    return yaml.safe_load((REPO / "config" / "demo-decoder.yaml").read_text(encoding="utf-8"))


def test_the_tiny_sources_pass_the_dry_run(workdir, sources):  # noqa: F811
    """The checks refuse what is broken, not these: each family with its own objective."""
    for config in (with_source(demo_config(), sources["masked"]), with_source(decoder_config(), sources["gguf"])):
        (workdir / "good.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        result = snakemake(workdir, "-n", "--configfile", str(workdir / "good.yaml"))
        assert result.returncode == 0, result.stderr[-3000:]


def test_an_encoder_decoder_source_is_refused_by_name(workdir, sources, tmp_path):  # noqa: F811
    from transformers import T5Config, T5ForConditionalGeneration

    t5 = tmp_path / "t5"
    shutil.copytree(sources["masked"], t5)
    T5ForConditionalGeneration(T5Config(vocab_size=200, d_model=16, d_ff=32, d_kv=8, num_layers=1,
                                        num_heads=2)).save_pretrained(t5)
    output = failing_dry_run(workdir, with_source(demo_config(), t5))
    assert f"config setting 'source.model': {t5 / 'config.json'}: 't5' is an encoder-decoder model" in output
    assert "Job stats" not in output


def test_a_model_directory_without_weights_fails_the_dry_run(workdir, sources, tmp_path):  # noqa: F811
    bare = tmp_path / "bare"
    shutil.copytree(sources["masked"], bare)
    (bare / "model.safetensors").unlink()
    output = failing_dry_run(workdir, with_source(demo_config(), bare))
    assert f"config setting 'source.model': {bare} holds config.json but no weights" in output


def test_a_gguf_file_cut_in_half_fails_the_dry_run(workdir, sources, tmp_path):  # noqa: F811
    cut = tmp_path / "cut.gguf"
    whole = sources["gguf"].read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    output = failing_dry_run(workdir, with_source(decoder_config(), cut))
    assert f"config setting 'source.model': {cut} ends before the data of tensor" in output
    assert "download it again" in output and "reshape" not in output


def test_a_causal_objective_on_a_masked_lm_names_the_variant(workdir, sources):  # noqa: F811
    config = with_source(demo_config(), sources["masked"])
    config["variants"]["ramen-mono"] = {**config["variants"]["ramen"], "objective": "clm"}
    output = failing_dry_run(workdir, config)
    assert ("config setting 'variants.ramen-mono.objective': objective 'clm' trains a causal LM but the source "
            f"(source.model: {sources['masked'] / 'config.json'}) is a masked LM") in output


def test_a_masked_lm_tokenizer_without_a_mask_token_fails_the_dry_run(workdir, sources, tmp_path):  # noqa: F811
    source = tmp_path / "nomask"
    shutil.copytree(sources["masked"], source)
    settings = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
    del settings["mask_token"]
    (source / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    output = failing_dry_run(workdir, with_source(demo_config(), source))
    assert (f"config setting 'source.model': the tokenizer of {source / 'tokenizer.json'} defines no mask token"
            in output)
