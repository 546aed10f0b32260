"""The decoder families users adapt go through every stage: each family's tiny random model goes
through ``replace`` and ``extend`` (the causal-LM family's stage functions: initialise, build the
model), staged training on the training core and the export, and each export loads where ramen is
not importable as an ``AutoModelForCausalLM`` whose logits are the trained model's. A family whose
forward ramen cannot reproduce is refused by the dry run (ramen.families.check_source)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import save_file

from ramen.errors import ConfigError
from ramen.families import check_source
from ramen.families import causal_lm as stages
from ramen.modeling.causal import BilingualCausalLM, CausalBatch, ForeignTables, special_token_ids
from ramen.modeling.layouts import CausalLayout
from ramen.modeling.lora import ADAPTER_DIR
from ramen.objectives.base import BatchShape, ObjectiveSettings
from ramen.objectives.causal import CausalLanguageModeling
from ramen.training.trainer import TrainSettings, train
from ramen.vocab.encode import encode_corpus, load_stream
from ramen.vocab.extend import extend_tokenizer
from ramen.vocab.tokenizer import load_tokenizer

from conftest import french_lines
from tiny_decoder import ENGLISH, FAMILIES, build_byte_tokenizer_dir, tiny_family

STAGES = [{"until": 2, "train": ["foreign_embeddings"]},
          {"train": ["encoder", "head", "source_embeddings", "foreign_embeddings"]}]
# A replaced vocabulary's run trains LoRA adapters too (every linear layer: Phi-3's fused qkv_proj and
# gate_up_proj included), merged into the blocks on export.
LORA_STAGES = [STAGES[0], {"train": ["encoder", "head", "source_embeddings", "foreign_embeddings", "lora"]}]
# A source's sides as the export writes them: (vocabulary, language side).
SIDES = [("replace", "en"), ("replace", "fr"), ("extend", "fr")]

EXPORTED_LOGITS = """
import importlib.util, json, sys
from pathlib import Path
sys.path = [p for p in sys.path if not (Path(p or ".") / "ramen" / "__init__.py").exists()]
sys.meta_path = [f for f in sys.meta_path if "editable" not in repr(f)]
if importlib.util.find_spec("ramen") is not None:
    raise SystemExit("ramen is importable")
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(1)
for job in json.loads(Path(sys.argv[1]).read_text()):
    model = AutoModelForCausalLM.from_pretrained(job["dir"]).eval()
    ids = torch.load(job["ids"])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    torch.save({"logits": logits, "class": type(model).__name__, "tied": tied}, job["out"])
"""


def settings(stages=STAGES) -> TrainSettings:
    return TrainSettings(steps=4, batch_size=2, seq_len=12, peak_lr=1e-2, init_lr=1e-3, warmup_steps=1,
                         log_every=1, stages=stages, threads=1)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    """The source, foreign and extended tokenizers, and the text each side trains on, encoded."""
    root = tmp_path_factory.mktemp("corpora")
    french = french_lines(300)
    source = build_byte_tokenizer_dir(root / "source", lines=ENGLISH + french[:20], vocab_size=300)
    build_byte_tokenizer_dir(root / "foreign", lines=french, vocab_size=280)
    (root / "fr.txt").write_text("\n".join(french) + "\n")
    (root / "en.txt").write_text("\n".join(ENGLISH * 10) + "\n")
    extend_tokenizer(source, root / "fr.txt", root / "extended", new_tokens=30)
    tokenizers = {name: load_tokenizer(root / name) for name in ("source", "foreign", "extended")}
    encoded = {}
    for tokenizer, lang in (("source", "en"), ("foreign", "fr"), ("extended", "en"), ("extended", "fr")):
        encode_corpus(tokenizers[tokenizer], root / f"{lang}.txt", root / f"{tokenizer}_{lang}")
        encoded[tokenizer, lang] = root / f"{tokenizer}_{lang}"
    return root, tokenizers, encoded


def trained(model: BilingualCausalLM, streams: dict, tokenizers: dict, out, stages=STAGES) -> BilingualCausalLM:
    """A few staged updates on the training core: the new rows alone, then everything."""
    run = settings(stages)
    objective = CausalLanguageModeling.build(
        model, {lang: load_stream(path) for lang, path in streams.items()},
        {lang: special_token_ids(tokenizer) for lang, tokenizer in tokenizers.items()}, BatchShape.of(run),
        ObjectiveSettings())
    rows = train(objective, run, out / "checkpoints", out / "metrics.csv", progress=False)
    assert len(rows) == run.steps and all(torch.isfinite(torch.tensor(row["loss"])) for row in rows if "loss" in row)
    return model.eval()


def trainer_logits(model: BilingualCausalLM, lang: str, ids: torch.Tensor) -> torch.Tensor:
    batch = CausalBatch(ids, torch.ones_like(ids), ids)
    with torch.no_grad():
        return model.logits(lang, model.hidden_states({lang: batch})[lang])


@pytest.fixture(scope="module")
def exports(corpora, tmp_path_factory):
    """Each family through replace and extend, trained and exported; the trainer's logits on fixed
    ids and those of the exports loaded by a ``python -I`` process (one for every export)."""
    root, tokenizers, encoded = corpora
    out = tmp_path_factory.mktemp("families")
    first = len(tokenizers["source"])
    jobs, expected = [], {}
    for family in FAMILIES:
        source_dir = out / family / "source"
        source_lm = tiny_family(family, first)
        source_lm.save_pretrained(source_dir)
        tokenizers["source"].save_pretrained(source_dir)
        # replace: the foreign language's own tables (the source's layout: output rows where untied)
        parts = stages.source_parts(stages.load_source(source_dir), tokenizers["source"])
        rows = len(tokenizers["foreign"])
        generator = torch.Generator().manual_seed(1)
        tables = {"embeddings": torch.randn(rows, parts.input_embeddings.shape[1], generator=generator) * 0.05}
        if not parts.tied:
            tables["output"] = torch.randn(rows, parts.input_embeddings.shape[1], generator=generator) * 0.05
        save_file(tables, str(out / family / "replace.safetensors"))
        replaced = stages.bilingual_model(source_dir, "en", {"fr": out / family / "replace.safetensors"}, {"fr": rows})
        replaced.add_adapters(rank=2, alpha=4.0, dropout=0.0, target_modules=["all-linear"], seed=0)
        replaced = trained(replaced, {"en": encoded["source", "en"], "fr": encoded["foreign", "fr"]},
                           {"en": tokenizers["source"], "fr": tokenizers["foreign"]}, out / family / "replace",
                           LORA_STAGES)
        # extend: the source's tokenizer plus new tokens, new rows by an initialiser
        extended_tables, _ = stages.initialise_extension("mean", source_dir, root / "extended", {}, 0)
        save_file({key: value for key, value in (("embeddings", extended_tables.embeddings),
                                                 ("output", extended_tables.output),
                                                 ("bias", extended_tables.bias)) if value is not None},
                  str(out / family / "extend.safetensors"))
        extended = stages.extended_model(source_dir, "en", "fr", out / family / "extend.safetensors", first)
        extended = trained(extended, {"en": encoded["extended", "en"], "fr": encoded["extended", "fr"]},
                           {"en": tokenizers["extended"], "fr": tokenizers["extended"]}, out / family / "extend")
        models = {"replace": replaced, "extend": extended}
        side_tokenizers = {("replace", "en"): tokenizers["source"], ("replace", "fr"): tokenizers["foreign"],
                           ("extend", "fr"): tokenizers["extended"]}
        for vocabulary, lang in SIDES:
            model, name = models[vocabulary], f"{vocabulary}-{lang}"
            model.export_language(lang, side_tokenizers[vocabulary, lang], out / family / name)
            assert (out / family / name / ADAPTER_DIR).is_dir() == (vocabulary == "replace")
            ids = torch.randint(0, model.vocabulary_size(lang), (2, 10), generator=torch.Generator().manual_seed(3))
            torch.save(ids, out / family / f"{name}.ids.pt")
            expected[family, vocabulary, lang] = (trainer_logits(model, lang, ids), model.tied, source_lm)
            jobs.append({"dir": str(out / family / name), "ids": str(out / family / f"{name}.ids.pt"),
                         "out": str(out / family / f"{name}.logits.pt"), "key": [family, vocabulary, lang]})
    (out / "jobs.json").write_text(json.dumps(jobs))
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-I", "-c", textwrap.dedent(EXPORTED_LOGITS), str(out / "jobs.json")],
                            cwd=out, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return {tuple(job["key"]): (torch.load(job["out"]), *expected[tuple(job["key"])]) for job in jobs}


@pytest.mark.parametrize("vocabulary,lang", SIDES)
@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_exports_a_causal_lm_whose_logits_are_the_trainer_s(exports, family, vocabulary, lang):
    exported, ours, tied, source_lm = exports[family, vocabulary, lang]
    assert exported["class"] == type(source_lm).__name__
    assert exported["tied"] == tied == (source_lm.get_output_embeddings().weight
                                        is source_lm.get_input_embeddings().weight)
    torch.testing.assert_close(exported["logits"], ours, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", ["gemma2", "gemma3"])
def test_gemma_embeddings_are_scaled_and_its_logits_capped_as_its_own_forward_does(family):
    """The source's English side is the source model exactly, and would not be without the layout."""
    source_lm = tiny_family(family, 120)
    model = BilingualCausalLM(source_lm, "en").eval()
    assert model.layout.embed_scale == pytest.approx(source_lm.config.hidden_size ** 0.5)
    assert model.layout.softcap == source_lm.config.final_logit_softcapping
    ids = torch.randint(0, 120, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = source_lm(input_ids=ids).logits
    torch.testing.assert_close(trainer_logits(model, "en", ids), theirs, rtol=1e-6, atol=1e-6)
    for wrong in (CausalLayout(family, None, model.layout.softcap), CausalLayout(family, model.layout.embed_scale)):
        model.layout = wrong
        assert not torch.allclose(trainer_logits(model, "en", ids), theirs, atol=1e-4)


def source_dir_with(tmp_path, config: dict):
    path = tmp_path / "source"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


TEXT = {"model_type": "gemma3_text", "hidden_size": 32, "vocab_size": 300}


@pytest.mark.parametrize("config,problem", [
    ({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "text_config": TEXT,
      "vision_config": {"model_type": "siglip_vision_model"}}, "nests its text model in a multimodal config"),
    ({"architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "hidden_size": 32},
     "per-layer embeddings looked up by token id"),
    ({"architectures": ["CohereForCausalLM"], "model_type": "cohere", "logit_scale": 0.0625},
     "sets logit_scale: 0.0625"),
    ({"architectures": ["GraniteForCausalLM"], "model_type": "granite", "logits_scaling": 8.0},
     "sets logits_scaling: 8.0"),
])
def test_the_dry_run_refuses_a_family_whose_forward_ramen_cannot_reproduce(tmp_path, config, problem):
    path = source_dir_with(tmp_path, config)
    with pytest.raises(ConfigError, match=rf"config setting 'source.model': .*config.json: .*{problem}"):
        check_source(path)


def test_a_family_ramen_serves_passes_the_layout_check(tmp_path):
    """A Granite that leaves its logits as they are, and the Gemma 3 text model, reach the next check
    (the weights, which these directories lack)."""
    for config in ({"architectures": ["GraniteForCausalLM"], "model_type": "granite", "logits_scaling": 1.0},
                   {"architectures": ["Gemma3ForCausalLM"], **TEXT, "final_logit_softcapping": 30.0}):
        path = tmp_path / config["model_type"]
        path.mkdir()
        (path / "config.json").write_text(json.dumps(config))
        with pytest.raises(ConfigError) as refused:
            check_source(path)
        assert "weights" in str(refused.value) or "safetensors" in str(refused.value), str(refused.value)


def test_the_loader_refuses_what_the_dry_run_refuses(tmp_path):
    """A source that reaches a job anyway (the dry run skipped) is refused before its weights load."""
    path = source_dir_with(tmp_path, {"architectures": ["CohereForCausalLM"], "model_type": "cohere",
                                      "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 1,
                                      "num_attention_heads": 4, "intermediate_size": 64, "logit_scale": 0.5})
    with pytest.raises(ConfigError, match="sets logit_scale: 0.5"):
        stages.load_source(path)


def test_a_family_that_scales_its_embeddings_unknown_to_ramen_is_refused():
    source_lm = tiny_family("llama-untied", 64)
    source_lm.get_input_embeddings().embed_scale = 3.0  # as an unknown family's embedding module would
    with pytest.raises(ConfigError, match="scales its rows by 3.0, where ramen expects None"):
        BilingualCausalLM(source_lm, "en", {"fr": ForeignTables(torch.zeros(5, 32), torch.zeros(5, 32))})
