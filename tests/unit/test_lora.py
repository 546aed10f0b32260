"""LoRA adapters as the parameter group ``lora``: a stage that names it moves the adapters and the
groups it also names, never the weights the adapters wrap; the export is a plain model with the
adapters merged (the adapter model's logits) and the adapters in peft's format beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ramen.errors import ConfigError
from ramen.modeling.bilingual import BilingualMaskedLM, MaskedBatch
from ramen.modeling.causal import BilingualCausalLM, ForeignTables
from ramen.modeling.lora import ADAPTER_DIR, plain_state
from ramen.training.staging import apply_stage, parse_stages, resolve, union_of_stages

from test_causal import SENTENCES, byte_level_tokenizer, tiny_causal_lm, windows

RANK = dict(rank=4, alpha=8.0, dropout=0.0, seed=0)
LORA_STAGES = [{"until": 3, "train": ["lora"]}, {"train": ["lora", "foreign_embeddings"]}]
FRENCH = ["le chat est sur la table", "un chien court dans le parc", "il fait beau aujourd'hui",
          "la maison est grande", "les enfants jouent dehors"] * 8


@pytest.fixture(autouse=True)
def one_thread():
    torch.set_num_threads(1)


def foreign_tables(lm, rows: int, seed: int = 1) -> ForeignTables:
    generator = torch.Generator().manual_seed(seed)
    hidden = lm.config.hidden_size
    tied = lm.get_output_embeddings().weight is lm.get_input_embeddings().weight
    has_bias = lm.get_output_embeddings().bias is not None
    return ForeignTables(torch.randn(rows, hidden, generator=generator),
                         None if tied else torch.randn(rows, hidden, generator=generator),
                         torch.randn(rows, generator=generator) if has_bias else None)


def bilingual(layout: str, rows: int = 40) -> BilingualCausalLM:
    lm = tiny_causal_lm(layout, 60)
    return BilingualCausalLM(lm, "en", {"xx": foreign_tables(lm, rows)})


def extended(layout: str, first: int = 270, new: int = 12) -> BilingualCausalLM:
    """The source's ``first`` rows (a byte-level vocabulary's) followed by ``new`` rows of its own."""
    lm = tiny_causal_lm(layout, first)
    rows = foreign_tables(lm, new)
    source = ForeignTables(lm.get_input_embeddings().weight.detach(),
                           None if rows.output is None else lm.get_output_embeddings().weight.detach(),
                           None if rows.bias is None else lm.get_output_embeddings().bias.detach())
    tables = ForeignTables(*(None if part is None else torch.cat([part, extra]) for part, extra in
                             zip((source.embeddings, source.output, source.bias), (rows.embeddings, rows.output,
                                                                                   rows.bias))))
    return BilingualCausalLM.extended(lm, tables, first, ("en", "xx"))


def randomise_adapters(model) -> None:
    """Adapters far from their start (lora_B starts at zero: no change at all)."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in model.parameter_groups()["lora"]:
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2)


@pytest.mark.parametrize("kind", ["bilingual", "extended"])
def test_a_lora_stage_moves_the_adapters_and_the_groups_it_names_never_the_wrapped_weights(kind):
    model = bilingual("llama-untied") if kind == "bilingual" else extended("llama-untied")
    batch = {"en": windows(60, seed=1), "xx": windows(model.vocabulary_size("xx"), seed=2)}
    with torch.no_grad():
        before_loss = model(batch)
    names = model.add_adapters(**RANK, target_modules=["all-linear"])
    assert len(names) == 2 * 7  # q, k, v, o, gate, up, down of both blocks
    with torch.no_grad():  # lora_B starts at zero: the model computes what it computed
        assert all(torch.equal(before_loss[lang], loss) for lang, loss in model(batch).items())

    groups = model.parameter_groups()
    adapters = {id(param) for param in groups["lora"]}
    assert len(adapters) == 2 * len(names)
    for name, params in groups.items():
        if name != "lora":
            assert not adapters & {id(param) for param in params}, name  # encoder, block:<i>, top:k hold none
    assert not adapters & {id(param) for param in resolve(["top:1", "encoder"], groups)}
    assert all(param.requires_grad for param in model.parameters())  # peft's freezing undone: staging decides

    stages = parse_stages(LORA_STAGES)
    trainable = resolve(union_of_stages(stages), groups)
    tables = {id(param) for param in groups["foreign_embeddings"]}
    assert {id(param) for param in trainable} == adapters | tables
    optimizer = torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.1)
    start = {name: param.detach().clone() for name, param in model.named_parameters()}

    def step(number):
        apply_stage(stages, number, groups, trainable)
        optimizer.zero_grad(set_to_none=True)
        sum(model({"en": windows(60, seed=number), "xx": windows(model.vocabulary_size("xx"), seed=50 + number)})
            .values()).backward()
        optimizer.step()

    def moved() -> set[int]:
        return {id(param) for name, param in model.named_parameters() if not torch.equal(param, start[name])}

    for number in (1, 2, 3):
        step(number)
    assert moved() == adapters  # every adapter (lora_A from the second update on), nothing else
    assert {id(param) for param in optimizer.state} == adapters
    for number in (4, 5):
        step(number)
    assert moved() == adapters | tables  # the new rows or the foreign table too; the source's weights never


@pytest.mark.parametrize(("kind", "layout"), [("bilingual", "llama-tied"), ("bilingual", "gpt2"),
                                              ("bilingual", "phi-bias"), ("extended", "llama-untied")])
def test_the_merged_export_computes_what_the_adapter_model_computes(kind, layout, tmp_path):
    from transformers import AutoModelForCausalLM

    model = bilingual(layout) if kind == "bilingual" else extended(layout)
    names = model.add_adapters(**RANK, target_modules=["all-linear"])
    randomise_adapters(model)
    model.eval()
    rows = model.vocabulary_size("xx")
    batch = windows(rows, seed=3)

    def logits():
        with torch.no_grad():
            return model.logits("xx", model.hidden_states({"xx": batch})["xx"])

    ours = logits()
    model.export_language("xx", byte_level_tokenizer(rows), tmp_path / "xx")
    assert torch.equal(logits(), ours)  # the export leaves the model as it was

    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "xx").eval()
    assert not any(type(module).__module__.startswith("peft") for module in exported.modules())
    saved = load_file(str(tmp_path / "xx" / "model.safetensors"))
    assert not [key for key in saved if "lora" in key or "base_layer" in key]
    with torch.no_grad():
        theirs = exported(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)
    wrapped = plain_state(model.lm)
    assert all(not torch.equal(saved[f"{name}.weight"], wrapped[f"{name}.weight"]) for name in names)  # merged
    adapter = json.loads((tmp_path / "xx" / ADAPTER_DIR / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and adapter["lora_alpha"] == 8.0 and adapter["task_type"] == "CAUSAL_LM"


def test_a_masked_lm_takes_adapters_on_its_encoder_layers_and_exports_them_merged(tmp_path):
    from transformers import AutoModelForMaskedLM, BertConfig, BertForMaskedLM

    tokenizer = byte_level_tokenizer(280)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    model = BilingualMaskedLM(BertForMaskedLM(config), "en",
                              {"xx": (torch.randn(len(tokenizer), 16), torch.randn(len(tokenizer)))})
    names = model.add_adapters(**RANK, target_modules=["query", "value"])
    assert names == [f"bert.encoder.layer.{i}.attention.self.{kind}" for i in (0, 1) for kind in ("query", "value")]
    groups = model.parameter_groups()
    adapters = {id(param) for param in groups["lora"]}
    assert len(adapters) == 8
    assert not adapters & {id(param) for name in ("encoder", "head") for param in groups[name]}
    randomise_adapters(model)
    model.eval()
    ids = torch.randint(0, len(tokenizer), (2, 9), generator=torch.Generator().manual_seed(0))
    batch = MaskedBatch(ids, torch.ones_like(ids), ids)
    with torch.no_grad():
        ours = model.masked_logits("xx", model.encode({"xx": batch})["xx"], torch.ones_like(ids, dtype=torch.bool))
    model.export_language("xx", tokenizer, tmp_path / "xx")
    exported = AutoModelForMaskedLM.from_pretrained(tmp_path / "xx").eval()
    with torch.no_grad():
        theirs = exported(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    torch.testing.assert_close(theirs.reshape(-1, theirs.shape[-1]), ours, rtol=1e-4, atol=1e-4)
    assert (tmp_path / "xx" / ADAPTER_DIR / "adapter_model.safetensors").exists()


# --- through the pipeline ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def pipeline_inputs(tmp_path_factory):
    """A tiny Llama source, a French tokenizer, both corpora encoded and the French initial tables."""
    from ramen.pipeline.initialise import initialise_foreign
    from ramen.vocab.encode import encode_corpus

    root = tmp_path_factory.mktemp("lora")
    source_tokenizer = byte_level_tokenizer(300)
    tiny_causal_lm("llama-untied", len(source_tokenizer)).save_pretrained(root / "source")
    source_tokenizer.save_pretrained(root / "source")
    foreign_tokenizer = byte_level_tokenizer(270, bos="<s>")
    foreign_tokenizer.save_pretrained(root / "fr_tokenizer")
    (root / "en.txt").write_text("\n".join(SENTENCES * 2) + "\n")
    (root / "fr.txt").write_text("\n".join(FRENCH) + "\n")
    encode_corpus(source_tokenizer, root / "en.txt", root / "encoded_en")
    encode_corpus(foreign_tokenizer, root / "fr.txt", root / "encoded_fr")
    initialise_foreign("mean", root / "source", root / "fr_tokenizer", {}, 0, root / "init.safetensors",
                       root / "init.json")
    return root


def run_pipeline(root: Path, out: Path, target_modules=("all-linear",)) -> None:
    from ramen.pipeline.train import train_bilingual
    from ramen.training.settings import LoraSettings, TrainSettings

    settings = TrainSettings(steps=4, batch_size=2, seq_len=16, peak_lr=1e-2, init_lr=1e-3, warmup_steps=1,
                             log_every=2, threads=1, stages=[{"until": 2, "train": ["lora"]},
                                                             {"train": ["lora", "foreign_embeddings"]}],
                             lora=LoraSettings(rank=4, alpha=8.0, target_modules=tuple(target_modules)))
    train_bilingual(root / "source", {"fr": {"init": str(root / "init.safetensors"),
                                             "tokenizer": str(root / "fr_tokenizer")}},
                    {"en": str(root / "encoded_en"), "fr": str(root / "encoded_fr")}, settings,
                    {"en": str(out / "en"), "fr": str(out / "fr")}, out / "checkpoints", out / "metrics.csv",
                    objective={"name": "clm"})


@pytest.fixture(scope="module")
def pipeline_export(pipeline_inputs):
    out = pipeline_inputs / "trained"
    run_pipeline(pipeline_inputs, out)
    return out


def unmerged_base(export_dir: Path, source_dir: Path):
    """The export with the source's block weights: what the adapters were trained over (the stages
    never train the wrapped weights)."""
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(export_dir)
    blocks = {key: value for key, value in AutoModelForCausalLM.from_pretrained(source_dir).state_dict().items()
              if ".layers." in key}
    assert not base.load_state_dict(blocks, strict=False).unexpected_keys
    return base


def test_training_with_a_lora_stage_exports_merged_sides_and_their_adapter(pipeline_inputs, pipeline_export):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    source = AutoModelForCausalLM.from_pretrained(pipeline_inputs / "source").state_dict()
    ids = torch.randint(3, 200, (2, 10), generator=torch.Generator().manual_seed(0))
    for lang in ("en", "fr"):
        export_dir = pipeline_export / lang
        merged = AutoModelForCausalLM.from_pretrained(export_dir).eval()
        state = merged.state_dict()
        assert state.keys() == source.keys()
        # Merged: every adapted weight differs from the source's; the norms (no adapters) do not.
        assert not torch.equal(state["model.layers.1.mlp.down_proj.weight"], source["model.layers.1.mlp.down_proj.weight"])
        assert torch.equal(state["model.layers.1.input_layernorm.weight"], source["model.layers.1.input_layernorm.weight"])
        adapter = load_file(str(export_dir / ADAPTER_DIR / "adapter_model.safetensors"))
        assert len(adapter) == 2 * 2 * 7 and all(key.startswith("base_model.model.model.layers.") for key in adapter)
        reloaded = PeftModel.from_pretrained(unmerged_base(export_dir, pipeline_inputs / "source"),
                                             export_dir / ADAPTER_DIR).eval()
        with torch.no_grad():
            torch.testing.assert_close(reloaded(input_ids=ids).logits, merged(input_ids=ids).logits,
                                       rtol=1e-4, atol=1e-4)
    assert torch.equal(AutoModelForCausalLM.from_pretrained(pipeline_export / "en").get_input_embeddings().weight,
                       source["model.embed_tokens.weight"])  # English's table is no stage's


def test_target_modules_that_match_no_linear_layer_are_refused(pipeline_inputs, tmp_path):
    model = bilingual("llama-tied")
    for targets in (["q_projection"], ["q_proj", "input_layernorm"]):
        with pytest.raises(ConfigError, match=r"training\.lora\.target_modules.*no linear layer") as raised:
            model.add_adapters(**RANK, target_modules=targets)
        assert "q_proj" in str(raised.value)  # the fix lists the layers there are
    assert "lora" not in model.parameter_groups()  # nothing half injected
    with pytest.raises(ConfigError, match=r"training\.lora\.target_modules"):
        run_pipeline(pipeline_inputs, tmp_path, target_modules=["attention"])
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_the_export_loads_without_ramen_and_holds_the_adapters_training_wrote(pipeline_inputs, pipeline_export,
                                                                              tmp_path):
    """The export against what training itself wrote (its last checkpoint), not only against its
    own files: an export of adapters that never trained would reload onto its own merge exactly."""
    script = textwrap.dedent("""
        import sys
        sys.modules["ramen"] = None  # loading the export must not import ramen
        import torch
        from transformers import AutoModelForCausalLM
        export_dir, source_dir = sys.argv[1], sys.argv[2]
        merged = AutoModelForCausalLM.from_pretrained(export_dir).eval()
        assert "peft" not in sys.modules, "loading the export imported peft"
        assert not any("lora" in name or "base_layer" in name for name in merged.state_dict())
        from peft import PeftModel
        base = AutoModelForCausalLM.from_pretrained(export_dir)
        source = AutoModelForCausalLM.from_pretrained(source_dir).state_dict()
        base.load_state_dict({key: value for key, value in source.items() if ".layers." in key}, strict=False)
        adapted = PeftModel.from_pretrained(base, export_dir + "/lora_adapter").eval()
        ids = torch.randint(3, 200, (2, 10), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            gap = (adapted(input_ids=ids).logits - merged(input_ids=ids).logits).abs().max().item()
        assert gap < 1e-4, gap
        print("LOADED", type(merged).__name__, gap)
    """)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-c", script, str(pipeline_export / "fr"),
                             str(pipeline_inputs / "source")], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "LOADED LlamaForCausalLM" in result.stdout
    # The adapters are those of the training's last checkpoint, and the merged weights the source's
    # plus alpha / rank x B A of them, computed here from the checkpoint.
    last = sorted((pipeline_export / "checkpoints").glob("*/step-*/model.safetensors"))[-1]
    trained = {key.removeprefix("model.lm.").replace(".default.", "."): value
               for key, value in load_file(str(last)).items() if ".lora_" in key}
    adapter = load_file(str(pipeline_export / "fr" / ADAPTER_DIR / "adapter_model.safetensors"))
    adapter = {key.removeprefix("base_model.model."): value for key, value in adapter.items()}
    assert adapter.keys() == trained.keys() and all(torch.equal(adapter[key], trained[key]) for key in trained)
    assert all(trained[key].abs().max() > 0 for key in trained if ".lora_B." in key)  # they trained
    source = load_file(str(pipeline_inputs / "source" / "model.safetensors"))
    merged = load_file(str(pipeline_export / "fr" / "model.safetensors"))
    for layer in {key.rsplit(".lora_", 1)[0] for key in trained}:
        delta = (8.0 / 4) * trained[f"{layer}.lora_B.weight"] @ trained[f"{layer}.lora_A.weight"]
        torch.testing.assert_close(merged[f"{layer}.weight"], source[f"{layer}.weight"] + delta, msg=layer)
