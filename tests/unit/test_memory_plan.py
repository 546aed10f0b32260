"""The memory plan of a training job (ramen.training.memory): its exact parts are what a CPU run of
the trainer allocates; the recipes' goals hold; a plan over resources.gpu_memory_gb is refused
with the settings that would make it fit."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from ramen.errors import ConfigError
from ramen.modeling.frozen import held_bytes
from ramen.training import memory
from ramen.training.memory import GB, GIB, SourceShape, plan_job
from ramen.training.memory_advice import check_plan
from ramen.training.settings import LoraSettings, TrainSettings
from ramen.glue import settings_from

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tiny_decoder import tiny_llama  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EVERYTHING = ["encoder", "head", "source_embeddings", "foreign_embeddings"]
SOURCE_ROWS, FOREIGN_ROWS = 96, 72


def streams(rows: int):
    from ramen.vocab.encode import TokenStream

    ids = np.random.default_rng(0).integers(3, rows, size=400).astype(np.int32)
    return TokenStream(ids=ids, offsets=np.arange(0, 401, 8), vocab_size=rows)


class RecordedAdamW(torch.optim.AdamW):
    """The trainer's optimiser, remembering itself and the gradients it stepped with last."""

    made: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gradient_bytes = 0
        RecordedAdamW.made.append(self)

    def step(self, closure=None):
        self.gradient_bytes = sum(param.grad.nbytes for group in self.param_groups for param in group["params"]
                                  if param.grad is not None)
        return super().step(closure)


def objective_of(model, settings: TrainSettings):
    """The causal-LM objective over random text in each language, with LoRA's adapters when the settings train them."""
    from ramen.objectives.base import BatchShape
    from ramen.objectives.causal import CausalLanguageModeling

    if settings.uses_lora:
        model.add_adapters(**dataclasses.asdict(settings.lora), seed=settings.seed)
    rows = {lang: model.vocabulary_size(lang) for lang in model.languages}
    specials = {"bos": 0, "eos": 2, "pad": 1}
    return CausalLanguageModeling(model, {lang: streams(rows[lang]) for lang in model.languages},
                                  {lang: specials for lang in model.languages}, BatchShape.of(settings))


def allocated(model, settings: TrainSettings, tmp_path, monkeypatch) -> dict[str, int]:
    """Bytes of the parameters, of the gradients at the last update and of the optimiser state
    after ramen's trainer has run ``settings`` on ``model`` (a causal LM) on the CPU."""
    from ramen.training.trainer import train

    monkeypatch.setattr(torch.optim, "AdamW", RecordedAdamW)
    RecordedAdamW.made.clear()
    objective = objective_of(model, settings)
    train(objective, settings, tmp_path / "checkpoints", tmp_path / "metrics.csv", progress=False)
    optimizer, = RecordedAdamW.made
    return {"parameters": sum(held_bytes(param) for param in objective.parameters()),
            "gradients": optimizer.gradient_bytes,
            "optimizer": sum(value.nbytes for state in optimizer.state.values() for value in state.values()
                             if torch.is_tensor(value))}


def planned(model, settings: TrainSettings, foreign_rows: int, vocabulary: str) -> dict[str, int]:
    shape = SourceShape.from_config(model.lm.config.to_dict())
    plan = plan_job(shape, settings, foreign_rows=foreign_rows, vocabulary=vocabulary, device="cpu")
    return {part: plan.parts[part] for part in memory.EXACT_PARTS}


def settings_of(**values) -> TrainSettings:
    return TrainSettings(**{"steps": 2, "batch_size": 2, "seq_len": 8, "warmup_steps": 1, "log_every": 1,
                            "threads": 1, **values})


def bilingual(tie: bool):
    from ramen.modeling.causal import BilingualCausalLM, ForeignTables

    source = tiny_llama(SOURCE_ROWS, tie=tie, layers=2).train()
    generator = torch.Generator().manual_seed(1)
    tables = ForeignTables(torch.randn(FOREIGN_ROWS, 16, generator=generator),
                           None if tie else torch.randn(FOREIGN_ROWS, 16, generator=generator))
    return BilingualCausalLM(source, "en", {"fr": tables})


@pytest.mark.parametrize(("tie", "values"), [
    (False, {"train": EVERYTHING}),
    # The first update trains the French table alone, the second also the output rows and the top
    # block: the embeddings and the bottom block stay frozen, without gradients or moments.
    (False, {"stages": [{"until": 1, "train": ["foreign_embeddings"]},
                        {"train": ["foreign_embeddings", "head", "top:1"]}]}),
    (True, {}),
], ids=["untied-everything", "untied-staged", "tied-default-groups"])
def test_the_exact_parts_are_what_the_trainer_allocates(tie, values, tmp_path, monkeypatch):
    model = bilingual(tie)
    settings = settings_of(**values)
    plan = planned(model, settings, FOREIGN_ROWS, "replace")
    assert allocated(model, settings, tmp_path, monkeypatch) == plan
    if "stages" in values:  # the frozen groups are left out
        assert plan["gradients"] < memory.FP32 * sum(param.numel() for param in model.parameters())


def test_the_exact_parts_of_an_extended_vocabulary(tmp_path, monkeypatch):
    from ramen.modeling.causal import BilingualCausalLM, ForeignTables

    source = tiny_llama(SOURCE_ROWS, tie=False, layers=2).train()
    new = 24
    tables = ForeignTables(torch.cat([source.get_input_embeddings().weight.detach(), torch.randn(new, 16)]),
                           torch.cat([source.get_output_embeddings().weight.detach(), torch.randn(new, 16)]))
    model = BilingualCausalLM.extended(source, tables, SOURCE_ROWS, ("en", "fr"))
    # The new rows alone first, then everything but the source's own table.
    settings = settings_of(stages=[{"until": 1, "train": ["foreign_embeddings"]},
                                   {"train": ["foreign_embeddings", "encoder", "head"]}])
    assert allocated(model, settings, tmp_path, monkeypatch) == planned(model, settings, new, "extend")


@pytest.mark.parametrize("lora", [{}, {"rank": 4, "target_modules": ["q_proj", "v_proj"]}],
                         ids=["all-linear", "q-v-rank-4"])
def test_the_exact_parts_with_lora_adapters(lora, tmp_path, monkeypatch):
    model = bilingual(False)
    settings = settings_of(train=["lora", "foreign_embeddings", "head"], lora=LoraSettings(**lora))
    assert allocated(model, settings, tmp_path, monkeypatch) == planned(model, settings, FOREIGN_ROWS, "replace")


@pytest.mark.parametrize("frozen_dtype", ["fp32", "bf16", "nf4"])
def test_the_exact_parts_with_frozen_weights_below_fp32(frozen_dtype, tmp_path, monkeypatch):
    """An extension training its new rows and LoRA: the frozen weights at training.frozen_dtype
    (nf4: the blocks' linear weights in 4 bits with their scales, the rest bf16) byte for byte."""
    from ramen.modeling.causal import BilingualCausalLM, ForeignTables

    source = tiny_llama(SOURCE_ROWS, tie=False, layers=2).train()
    new = 24
    tables = ForeignTables(torch.cat([source.get_input_embeddings().weight.detach(), torch.randn(new, 16)]),
                           torch.cat([source.get_output_embeddings().weight.detach(), torch.randn(new, 16)]))
    model = BilingualCausalLM.extended(source, tables, SOURCE_ROWS, ("en", "fr"))
    settings = settings_of(train=["lora", "foreign_embeddings"], frozen_dtype=frozen_dtype)
    plan = planned(model, settings, new, "extend")
    assert allocated(model, settings, tmp_path, monkeypatch) == plan
    if frozen_dtype != "fp32":
        full = planned(model, dataclasses.replace(settings, frozen_dtype="fp32"), new, "extend")
        assert plan["parameters"] < full["parameters"] and plan["optimizer"] == full["optimizer"]


@pytest.fixture
def three_fake_processes():
    """A process group of three of which this process is rank 0, whose collectives do nothing:
    FSDP2 shards as it would over three processes, in one."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=3)
    yield 3
    dist.destroy_process_group()


@pytest.mark.parametrize("train", [EVERYTHING, ["lora", "foreign_embeddings", "head"]], ids=["everything", "lora"])
def test_the_exact_parts_of_rank_0_sharded_over_three_processes(train, three_fake_processes):
    """The trainer's set-up of a sharded run (ramen.training.trainer.train): a unit per block and the
    root, then the groups trained, then fused AdamW; one update. Dimensions that do not split in
    three (16 hidden values) are padded: rank 0 holds ceil(rows / 3) rows."""
    from torch.distributed.tensor import DTensor

    from ramen.training.sharding import ShardedObjective
    from ramen.training.trainer import configure_trainable

    def local(tensor):
        return tensor.to_local() if isinstance(tensor, DTensor) else tensor

    model = bilingual(False)
    settings = settings_of(train=train, sharding="fsdp", gpus=three_fake_processes, batch_size=3)
    objective = objective_of(model, settings)
    ShardedObjective(objective, three_fake_processes, "cpu")
    trainable = configure_trainable(objective, settings.train)
    optimizer = torch.optim.AdamW(trainable, fused=True)
    sum(objective(objective.step_batches(1, 0)).values()).backward()
    gradients = sum(local(param.grad).nbytes for param in trainable)
    optimizer.step()
    assert {"parameters": sum(local(param).nbytes for param in objective.parameters()), "gradients": gradients,
            "optimizer": sum(local(value).nbytes for state in optimizer.state.values() for value in state.values())
            } == planned(model, settings, FOREIGN_ROWS, "replace")


@pytest.mark.parametrize("objective", ["tlm-da", "mlm"])
def test_the_weights_gathered_at_once_under_fsdp_are_planned(objective, three_fake_processes):
    """FSDP gathers a unit's weights when it computes: the root's (kept through forward and
    backward) and one block's at a time, except for an objective that runs its blocks in parts
    (tlm-da), whose blocks are the root's: all of them at once. Counted as the sharded objective
    holds them (unsharded parameters are plain tensors, sharded ones DTensors) in every layer."""
    from torch.distributed.tensor import DTensor
    from transformers import BertConfig, BertForMaskedLM

    from ramen.modeling.bilingual import BilingualMaskedLM
    from ramen.objectives import get_objective
    from ramen.objectives.base import BatchShape, ObjectiveSettings, PairedStreams
    from ramen.training.batches import SpecialIds
    from ramen.training.sharding import ShardedObjective
    from ramen.vocab.encode import TokenStream

    torch.manual_seed(0)
    rows = {"en": 40, "fr": 30}
    mlm = BertForMaskedLM(BertConfig(vocab_size=rows["en"], hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=64))
    model = BilingualMaskedLM(mlm, "en", {"fr": (torch.randn(rows["fr"], 16), torch.zeros(rows["fr"]))})
    specials = {lang: SpecialIds(cls=2, sep=3, pad=0, mask=4, all_special=[0, 1, 2, 3, 4], vocab_size=size)
                for lang, size in rows.items()}

    def text(seed, size):
        ids = np.random.default_rng(seed).integers(5, size, size=200).astype(np.uint16)
        return TokenStream(ids=ids, offsets=np.arange(0, 201, 8), vocab_size=size)

    settings = settings_of(train=EVERYTHING, sharding="fsdp", gpus=three_fake_processes, batch_size=3, seq_len=12)
    # Shared CA layers and no language embeddings: the objective adds no parameters of its own.
    trained = get_objective(objective)(model, {lang: text(seed, size) for seed, (lang, size) in enumerate(rows.items())},
                                       specials, BatchShape.of(settings),
                                       ObjectiveSettings(decomposed_share=True, language_embeddings=False),
                                       PairedStreams(text(3, rows["en"]), text(3, rows["fr"])))
    ShardedObjective(trained, three_fake_processes, "cpu")
    peak = 0

    def gathered(*_):
        nonlocal peak
        peak = max(peak, sum(param.nbytes for param in trained.parameters() if not isinstance(param, DTensor)))

    for layer in mlm.base_model.encoder.layer:
        layer.output.dense.register_forward_hook(gathered)
    for step in (1, 2):  # tlm-da: monolingual batches, then translation pairs
        sum(trained(trained.step_batches(step, 0)).values()).backward()
    shape = SourceShape.from_config(mlm.config.to_dict())
    plan = plan_job(shape, settings, foreign_rows=rows["fr"], device="cpu", objective=objective)
    weights = memory.model_weights(shape, rows["fr"])
    assert plan.parameters == sum(param.numel() for param in trained.parameters())
    units = memory.fsdp_units(shape, weights, objective in memory.BLOCKS_RUN_IN_PARTS)
    assert peak == memory.FP32 * sum(weight.numel for unit in units[:2] for weight in unit)
    if objective in memory.BLOCKS_RUN_IN_PARTS:
        # Every weight gathered in fp32 (no autocast on the CPU), and every gradient whole before its reduce-scatter.
        assert peak == memory.FP32 * plan.parameters
        assert plan.parts["weight_copies"] == peak + memory.FP32 * plan.trainable
        # Activation checkpointing wraps a block's own forward, which these blocks never run.
        checkpointed = plan_job(shape, dataclasses.replace(settings, activation_checkpointing=True),
                                foreign_rows=rows["fr"], device="cpu", objective=objective)
        assert checkpointed.parts["activations"] == plan.parts["activations"]
    else:
        assert peak < memory.FP32 * plan.parameters


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "qwen3", "mistral", "gpt2", "bert", "roberta"])
def test_the_source_shapes_are_the_models_parameters(model_type):
    """Every layout's tensors, each with its shape, as transformers builds them (the bilingual
    models add the foreign ones, checked above)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    config = AutoConfig.for_model(model_type, vocab_size=50, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=32,
                                  n_embd=16, n_layer=2, n_head=4, n_positions=32, pad_token_id=0, bos_token_id=0,
                                  eos_token_id=1, tie_word_embeddings=model_type != "llama")
    masked = model_type in memory.BERT_LIKE
    model = (AutoModelForMaskedLM if masked else AutoModelForCausalLM).from_config(config)
    shape = SourceShape.from_config(json.loads(config.to_json_string()))
    assert sorted(weight.shape for weight in shape.weights()) == sorted(
        tuple(param.shape) for param in model.parameters())


# --- the recipes' goals ------------------------------------------------------------------------

def recipe(name: str) -> tuple[dict, SourceShape]:
    config = yaml.safe_load((REPO / "config" / "recipes" / f"{name}.yaml").read_text(encoding="utf-8"))
    header = json.loads((REPO / config["resources"]["source_config"]).read_text(encoding="utf-8"))
    return config, SourceShape.from_config(header)


def test_llama_8b_with_lora_fits_one_80_gb_gpu_at_2048_tokens():
    config, shape = recipe("llama-3.1-8b-lora")
    assert config["resources"]["gpu_memory_gb"] == 80 and shape.tied is False
    assert abs(sum(weight.numel for weight in shape.weights()) - 8.03e9) < 0.01e9
    for name, variant in config["variants"].items():
        if variant.get("init") == "none":
            continue
        settings = settings_from(TrainSettings, {**config["training"], **variant.get("training", {})}, "training")
        assert settings.seq_len == 2048 and settings.processes == 1 and settings.uses_lora
        plan = plan_job(shape, settings, foreign_rows=memory.foreign_vocabulary_rows(
            shape, variant.get("vocabulary", "replace"), config["bpe"]), vocabulary=variant.get("vocabulary", "replace"),
            limit_gb=80)
        assert plan.fits and plan.total <= 80 * GB, (name, plan.summary())


@pytest.mark.parametrize(("name", "frozen_dtype", "limit"), [("llama-3.1-8b-qlora-24gb", "nf4", 24),
                                                          ("llama-3.1-8b-bf16-base-40gb", "bf16", 40)])
def test_llama_8b_extended_over_a_frozen_nf4_or_bf16_base_fits_24_or_40_gb(name, frozen_dtype, limit):
    config, shape = recipe(name)
    assert config["resources"]["gpu_memory_gb"] == limit
    (variant_name, variant), = [(n, v) for n, v in config["variants"].items() if v.get("init") != "none"]
    settings = settings_from(TrainSettings, {**config["training"], **variant.get("training", {})}, "training")
    assert variant["vocabulary"] == "extend" and settings.frozen_dtype == frozen_dtype and settings.seq_len == 2048
    assert settings.activation_checkpointing and set(settings.train) == {"lora", "foreign_embeddings"}
    rows = memory.foreign_vocabulary_rows(shape, "extend", config["bpe"])
    plan = plan_job(shape, settings, foreign_rows=rows, vocabulary="extend", limit_gb=limit)
    assert plan.fits and plan.total <= limit * GB, plan.summary()
    # Counted by hand: the trained new rows and adapters in fp32, the blocks' linear weights in NF4
    # (4 bits a value, an int8 scale per 64 values, a bf16 factor per 256 scales, a bf16 mean and
    # 16-entry code book per tensor) or bf16, every other source weight bf16.
    d, kv, inner, layers = 4096, 1024, 14336, 32
    linear = [d * d, kv * d, kv * d, d * d, inner * d, inner * d, d * inner]
    adapters = sum(16 * (rows_ + cols) for rows_, cols in ((d, d), (kv, d), (kv, d), (d, d), (inner, d),
                                                          (inner, d), (d, inner))) * layers
    trained = 2 * rows * d + adapters
    blocks = (sum(n // 2 + n // 64 + 2 * (n // 64 // 256) + 2 + 32 for n in linear) if frozen_dtype == "nf4"
              else 2 * sum(linear)) * layers
    others = 2 * (2 * shape.vocab * d + (2 * layers + 1) * d)
    assert plan.parts["parameters"] == 4 * trained + blocks + others
    assert plan.trainable == trained


def test_llama_8b_trained_fully_and_sharded_over_8_gpus_fits_80_gb_each():
    _, shape = recipe("llama-3.1-8b-lora")
    settings = TrainSettings(steps=1000, batch_size=8, seq_len=2048, precision="bf16", train=EVERYTHING,
                             sharding="fsdp", gpus=8)
    plan = plan_job(shape, settings, foreign_rows=50_000, limit_gb=80)
    assert plan.fits, plan.summary()
    unsharded = plan_job(shape, TrainSettings(steps=1000, batch_size=8, seq_len=2048, precision="bf16",
                                              train=EVERYTHING, gpus=8), foreign_rows=50_000, limit_gb=80)
    assert unsharded.parts["optimizer"] > 7 * plan.parts["optimizer"] and not unsharded.fits


def test_llama_1b_recipe_is_sharded_over_8_gpus_and_fits():
    config, shape = recipe("llama-3.2-1b-fsdp8")
    settings = settings_from(TrainSettings, config["training"], "training")
    assert (settings.sharding, settings.processes, shape.tied) == ("fsdp", 8, True)
    plan = plan_job(shape, settings, foreign_rows=memory.foreign_vocabulary_rows(shape, "replace", config["bpe"]),
                    limit_gb=config["resources"]["gpu_memory_gb"])
    assert plan.fits, plan.summary()


# --- refusing a plan that does not fit ---------------------------------------------------------

def test_a_plan_over_the_limit_is_refused_naming_the_settings_that_make_it_fit():
    _, shape = recipe("llama-3.1-8b-lora")
    settings = TrainSettings(steps=1000, batch_size=8, seq_len=2048, precision="bf16", train=EVERYTHING)

    def plan_for(changed):
        return plan_job(shape, changed, foreign_rows=50_000, limit_gb=80)

    with pytest.raises(ConfigError, match="resources.gpu_memory_gb") as refused:
        check_plan("train_bilingual ramen_fr", plan_for(settings), plan_for, settings)
    message = str(refused.value)
    assert "training.sharding: fsdp with training.gpus: 8" in message
    # The variant's own key where the variant sets it.
    with pytest.raises(ConfigError, match=r"variants\.big\.training\.gpus"):
        check_plan("train_bilingual big_fr", plan_for(settings), plan_for, settings,
                   key=lambda name: f"variants.big.training.{name}" if name == "gpus" else f"training.{name}")
    # Training the adapters instead of the blocks fits one GPU (one window per micro-step: no more GPUs).
    whole = TrainSettings(steps=10, batch_size=16, grad_accumulation=16, seq_len=2048, precision="bf16",
                          activation_checkpointing=True, train=EVERYTHING)
    with pytest.raises(ConfigError) as refused:
        check_plan("train_bilingual ramen_fr", plan_for(whole), plan_for, whole)
    assert "set training.train naming lora instead of encoder (plans " in str(refused.value)
    assert "training.gpus" not in str(refused.value)


def test_the_8b_recipe_on_40_gb_gpus_is_told_the_changes_together_that_fit():
    """A batch of 16 in 16 micro-steps splits over no more GPUs and every other single change is
    made already or too small: what fits is sharding over more GPUs with fewer micro-steps, all
    named together, each text naming settings whose plan fits."""
    config, shape = recipe("llama-3.1-8b-lora")
    for name, variant in config["variants"].items():
        if variant.get("init") == "none":
            continue
        override = variant.get("training", {})
        settings = settings_from(TrainSettings, {**config["training"], **override}, "training")
        vocabulary = variant.get("vocabulary", "replace")
        rows = memory.foreign_vocabulary_rows(shape, vocabulary, config["bpe"])

        def plan_for(changed, rows=rows, vocabulary=vocabulary):
            return plan_job(shape, changed, foreign_rows=rows, vocabulary=vocabulary, limit_gb=40)

        with pytest.raises(ConfigError) as refused:
            check_plan(f"train_bilingual {name}_fr", plan_for(settings), plan_for, settings,
                       key=lambda key: f"variants.{name}.training.{key}" if key in override else f"training.{key}")
        message = str(refused.value)
        assert "(set training.sharding: fsdp with training.gpus: 2 and training.grad_accumulation: 8 (plans" in message
        for text in message.split("(set ", 1)[1].split("; or "):
            values = dict(re.findall(r"training\.(\w+): (\w+)", text))
            assert values, text
            changed = dataclasses.replace(settings, **{key: int(value) if value.isdigit() else value == "true"
                                                       if value in ("true", "false") else value
                                                       for key, value in values.items()})
            assert plan_for(changed).fits, text


def test_nothing_fits_a_tiny_gpu_and_the_error_says_so():
    _, shape = recipe("llama-3.2-1b-fsdp8")
    settings = TrainSettings(steps=10, batch_size=8, seq_len=512)

    def plan_for(changed):
        return plan_job(shape, changed, foreign_rows=50_000, limit_gb=0.5)

    with pytest.raises(ConfigError, match="a GPU with more memory"):
        check_plan("train_bilingual mean_fr", plan_for(settings), plan_for, settings)
    assert plan_for(settings).total > 0.5 * GIB


def test_advice_for_a_frozen_nf4_base_skips_changes_it_cannot_take():
    """Sharding and more GPUs are refused with nf4: the advice names what fits without them."""
    config, shape = recipe("llama-3.1-8b-qlora-24gb")
    settings = settings_from(TrainSettings, {**config["training"], "grad_accumulation": 8}, "training")

    def plan_for(changed):
        return plan_job(shape, changed, foreign_rows=16_000, vocabulary="extend", limit_gb=15)

    with pytest.raises(ConfigError, match=r"set training.grad_accumulation: 16 \(plans") as error:
        check_plan("train_bilingual ramen-ext_fr", plan_for(settings), plan_for, settings)
    assert "sharding" not in str(error.value) and "gpus" not in str(error.value)


def test_an_output_rule_that_unties_a_tied_head_is_planned_with_the_head():
    from ramen.training.memory import SourceShape, plan_job
    from ramen.training.settings import TrainSettings

    shape = SourceShape.from_config({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
                                     "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                                     "vocab_size": 500, "tie_word_embeddings": True})
    settings = TrainSettings(steps=1, batch_size=2, seq_len=16, precision="fp32")
    tied = plan_job(shape, settings, foreign_rows=100, vocabulary="extend", device="cpu")
    untied = plan_job(shape, settings, foreign_rows=100, vocabulary="extend", device="cpu", output_init="mean")
    # The source's output rows and the new tokens' output rows: (500 + 100) x 32 more parameters.
    assert untied.parameters - tied.parameters == (500 + 100) * 32
    replaced = plan_job(shape, settings, foreign_rows=100, vocabulary="replace", device="cpu", output_init="mean")
    assert replaced.parameters == plan_job(shape, settings, foreign_rows=100, device="cpu").parameters
