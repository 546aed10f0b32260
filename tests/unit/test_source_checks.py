"""Every source is checked from its metadata and file headers while the job graph is built
(ramen.families.check_source): each problem names the setting and the file, and no weights are
loaded."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import build_source_dir
from ramen.errors import ConfigError
from ramen.families import FAMILIES, check_source, recognise
from ramen.objectives import OBJECTIVES
from tiny_decoder import build_tiny_decoder_dir, write_llama_gguf

TRAINS = {name: entry.family for name, entry in OBJECTIVES.items()}


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory) -> Path:
    return build_source_dir(tmp_path_factory.mktemp("masked") / "model")


@pytest.fixture(scope="module")
def gguf_file(tmp_path_factory) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    hf = build_tiny_decoder_dir(tmp_path_factory.mktemp("causal") / "hf")
    path = hf.parent / "package" / "tiny.gguf"
    path.parent.mkdir()
    write_llama_gguf(AutoModelForCausalLM.from_pretrained(hf), AutoTokenizer.from_pretrained(hf), path)
    return path


def copy_of(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / source.name))


def test_each_family_of_the_tiny_sources_is_recognised(masked_lm, gguf_file):
    assert check_source(masked_lm, objectives={"variants.ramen.objective": "mlm"}, objective_families=TRAINS) == "masked-lm"
    assert check_source(gguf_file, objectives={"variants.ramen.objective": "clm"}, objective_families=TRAINS) == "causal-lm"
    assert check_source(gguf_file.parent) == "causal-lm"  # a directory holding one GGUF file
    assert list(FAMILIES) == ["masked-lm", "causal-lm"]
    # A bare encoder (all-MiniLM-L6-v2 declares BertModel) is a masked LM by its model type.
    assert recognise({"architectures": ["BertModel"], "model_type": "bert"}) == "masked-lm"
    assert recognise({"model_type": "qwen2"}) == "causal-lm"


def test_an_encoder_decoder_is_refused_by_name(tmp_path):
    config = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "is_encoder_decoder": True}
    (tmp_path / "t5").mkdir()
    (tmp_path / "t5" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"'source.model': .*t5/config.json: 't5' is an encoder-decoder model"):
        check_source(tmp_path / "t5")
    with pytest.raises(ConfigError, match="'bart' is an encoder-decoder"):
        recognise({"model_type": "bart"})
    with pytest.raises(ConfigError, match="model type 'resnet' is neither a masked nor a causal LM"):
        recognise({"model_type": "resnet"})


def test_weights_missing_or_cut_short_are_named(masked_lm, tmp_path):
    source = copy_of(masked_lm, tmp_path)
    weights = source / "model.safetensors"
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ConfigError, match=r"model.safetensors ends before the data of tensor .*download it again"):
        check_source(source)
    weights.write_bytes(whole[:100])
    with pytest.raises(ConfigError, match=r"model.safetensors declares a \d+-byte header but the file is 100 bytes"):
        check_source(source)
    weights.unlink()
    with pytest.raises(ConfigError, match=r"'source.model': .*model holds config.json but no weights"):
        check_source(source, "source.model")
    # A sharded checkpoint needs every shard its index lists.
    (source / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "part-1.safetensors"}}))
    with pytest.raises(ConfigError, match="lists part-1.safetensors, which is not in"):
        check_source(source)
    (source / "part-1.safetensors").write_bytes(whole)
    assert check_source(source) == "masked-lm"


def test_a_gguf_file_cut_short_is_named_with_its_tensor(gguf_file, tmp_path):
    whole = gguf_file.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ConfigError, match=r"'source.model': .*cut.gguf ends before the data of tensor '[\w.]+'"):
        check_source(cut)
    cut.write_bytes(whole[:200])  # inside the metadata
    with pytest.raises(ConfigError, match=r"cut.gguf ends inside its header"):
        check_source(cut)
    cut.write_bytes(b"GGML" + whole[4:])
    with pytest.raises(ConfigError, match=r"cut.gguf is not a GGUF file"):
        check_source(cut)


def test_a_masked_lm_tokenizer_without_a_mask_token_is_refused(masked_lm, tmp_path):
    source = copy_of(masked_lm, tmp_path)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        path = source / name
        if path.is_file():
            values = json.loads(path.read_text())
            values.pop("mask_token", None)
            path.write_text(json.dumps(values))
    with pytest.raises(ConfigError, match=r"'variants.mbert.model': the tokenizer of .*tokenizer.json defines no mask"):
        check_source(source, "variants.mbert.model")
    (source / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"tokenizer.json does not load as a tokenizer"):
        check_source(source)


def test_an_objective_of_another_family_is_named_by_the_variant(masked_lm, gguf_file):
    with pytest.raises(ConfigError, match=r"'variants.ramen-mono.objective': objective 'clm' trains a causal LM but "
                                          r"the source \(source.model: .*config.json\) is a masked LM"):
        check_source(masked_lm, objectives={"variants.ramen-mono.objective": "clm"}, objective_families=TRAINS)
    with pytest.raises(ConfigError, match=r"'variants.x.objective': objective 'tlm' .*tiny.gguf\) is a causal LM "
                                          r"\(choose one of \['clm'\]\)"):
        check_source(gguf_file, objectives={"variants.x.objective": "tlm"}, objective_families=TRAINS)


def test_the_checks_read_headers_only_and_import_no_torch(masked_lm, gguf_file):
    probe = ("import sys, time; from ramen.families import check_source; start = time.perf_counter(); "
             f"check_source({str(masked_lm)!r}); check_source({str(gguf_file)!r}); "
             "print(time.perf_counter() - start, 'torch' in sys.modules, 'transformers' in sys.modules)")
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    seconds, torch_loaded, transformers_loaded = result.stdout.split()
    assert (torch_loaded, transformers_loaded) == ("False", "False")
    assert float(seconds) < 2 and time.perf_counter() - started < 20


def test_init_scratch_on_a_causal_lm_is_named_by_the_variant(masked_lm, gguf_file):
    assert check_source(masked_lm, scratch=("variants.scratch.init",)) == "masked-lm"
    with pytest.raises(ConfigError, match=r"'variants.scratch.init': the source \(source.model: .*tiny.gguf\) is a "
                                          r"causal LM, which is not trained from scratch here"):
        check_source(gguf_file, scratch=("variants.scratch.init",))


def test_a_context_token_the_source_lacks_is_refused_while_the_graph_is_built(tmp_path):
    """A config copied from another source names that source's token: refused before training."""
    from ramen.workflow.graph_checks import check_context_token

    source = build_tiny_decoder_dir(tmp_path / "decoder")

    def config(token):
        return {"tasks": {"language_modeling": {"text": {}, "settings": {"context_token": token}}}}

    with pytest.raises(ConfigError, match="'<s>' is not a token of the source") as error:
        check_context_token(config("<s>"), str(source))
    assert error.value.setting == "tasks.language_modeling.settings.context_token"
    assert "<|endoftext|>" in str(error.value)  # what to name instead
    check_context_token(config("<|endoftext|>"), str(source))
    check_context_token(config(None), str(source))
    check_context_token({}, str(source))
