"""`make gpu-check`'s steps at a real size: a sharded update (FSDP2 over one process, bf16 compute
over fp32 masters), a LoRA update (adapters, the foreign table and the head trained, activation
checkpointing) and a QLoRA update (adapters and the foreign table over a frozen base whose blocks'
linear weights are NF4, ``training.frozen_dtype: nf4``), each on a random decoder of a recipe's shapes, with what it allocates beside the
memory plan (ramen.training.memory): the exact parts (weights, gradients, optimiser state) and,
on a GPU, the peak against the planned total (the CUDA context left out: torch does not count it).

Each update is set up as the trainer sets it up (the groups trained, fused AdamW, clipping, the
precision's autocast) on 2 windows per language of ``seq_len`` tokens, without its checkpoints
(writing a 1B model's optimiser state would take longer than the update). On the CPU (the test
suite) the same code runs at a tiny shape, where only the exact parts are compared.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Iterator, Mapping
from pathlib import Path

from ramen.training.memory import EXACT_PARTS, SourceShape, plan_job
from ramen.training.settings import LoraSettings, TrainSettings

REPO = Path(__file__).resolve().parents[3]
RECIPE_SHAPE = REPO / "resources" / "recipes" / "llama-3.2-1b" / "config.json"
TINY_SHAPE = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 500, "tie_word_embeddings": True}
EVERY_GROUP = ("encoder", "head", "source_embeddings", "foreign_embeddings")


@dataclasses.dataclass(frozen=True)
class ScaleStep:
    name: str
    settings: TrainSettings
    sharded: bool


def scale_steps(seq_len: int, precision: str) -> list[ScaleStep]:
    sharded = TrainSettings(steps=1, batch_size=2, seq_len=seq_len, precision=precision, sharding="fsdp",
                            train=EVERY_GROUP)
    lora = TrainSettings(steps=1, batch_size=2, seq_len=seq_len, precision=precision, activation_checkpointing=True,
                         train=("lora", "foreign_embeddings", "head"), lora=LoraSettings(rank=16, alpha=32.0))
    # NF4 runs the forward in bf16 whatever the device (TrainSettings.compute_precision).
    qlora = TrainSettings(steps=1, batch_size=2, seq_len=seq_len, precision="bf16", activation_checkpointing=True,
                          train=("lora", "foreign_embeddings"), lora=LoraSettings(rank=16, alpha=32.0),
                          frozen_dtype="nf4")
    return [ScaleStep("sharded (FSDP, world size 1)", sharded, True), ScaleStep("LoRA", lora, False),
            ScaleStep("NF4 + LoRA", qlora, False)]


@contextlib.contextmanager
def one_process_group(device: str) -> Iterator[None]:
    """A process group of this process alone: FSDP's units need one even at world size 1."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        yield
        return
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def local_bytes(tensor) -> int:
    """Bytes this process holds of a tensor (its shard of a sharded one; an NF4 weight's codes and scales)."""
    from ramen.modeling.frozen import held_bytes

    return held_bytes(tensor.to_local() if hasattr(tensor, "to_local") else tensor)


def measure_step(config: Mapping, step: ScaleStep, foreign_rows: int, device: str) -> dict[str, int]:
    """One update of a random bilingual decoder of ``config``'s shapes: the bytes of its parameters,
    gradients (after backward) and optimiser state (after the update), and the peak allocated on a GPU."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from ramen.modeling.causal import BilingualCausalLM, CausalBatch, ForeignTables
    from ramen.modeling.frozen import hold_frozen
    from ramen.training.optimisation import Updates, fused_adam
    from ramen.training.precision import autocast_dtype
    from ramen.training.sharding import ShardedObjective, checkpointed_blocks
    from ramen.training.trainer import configure_trainable

    settings, cuda = step.settings, device.startswith("cuda")
    torch.manual_seed(0)
    # Built on the CPU: FSDP moves each unit's shard itself.
    source = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config), dtype=torch.float32,
                                              attn_implementation="sdpa")
    hidden = source.config.hidden_size
    tables = ForeignTables(torch.randn(foreign_rows, hidden) * 0.02,
                           None if source.config.tie_word_embeddings else torch.randn(foreign_rows, hidden) * 0.02)
    model = BilingualCausalLM(source, "en", {"xx": tables}).train()
    if settings.uses_lora:
        model.add_adapters(**dataclasses.asdict(settings.lora), seed=settings.seed)
    if cuda:
        gc.collect()  # a sharded model of an earlier step lingers in reference cycles (FSDP's state and hooks)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    with checkpointed_blocks(model, settings.activation_checkpointing):
        if step.sharded:
            compute = autocast_dtype(settings.precision, device)
            ShardedObjective(model, 1, device, compute if cuda else None)
        else:
            model.to(device)
        trainable = configure_trainable(model, settings.train)
        hold_frozen(model, trainable, settings.frozen_dtype, model.blocks(), model.parameter_groups().get("lora", ()))
        updates = Updates(torch.optim.AdamW(trainable, lr=1e-5, fused=fused_adam(device)), max_grad_norm=1.0,
                          precision=settings.compute_precision, device=device, parameters=trainable)
        generator = torch.Generator().manual_seed(0)
        batches = {}
        for lang, vocabulary in (("en", source.config.vocab_size), ("xx", foreign_rows)):
            ids = torch.randint(0, vocabulary, (settings.batch_size, settings.seq_len + 1), generator=generator)
            batches[lang] = CausalBatch(ids[:, :-1].to(device), torch.ones_like(ids[:, :-1]).to(device),
                                        ids[:, 1:].to(device))
        with updates.autocast():
            losses = model(batches)
        updates.backward(sum(losses.values()) / len(losses))
        gradients = sum(local_bytes(param.grad) for param in trainable if param.grad is not None)
        updates.step()
    peak = torch.cuda.max_memory_allocated(device) if cuda else 0
    return {"parameters": sum(local_bytes(param) for param in model.parameters()), "gradients": gradients,
            "optimizer": sum(local_bytes(value) for state in updates.optimizer.state.values()
                             for value in state.values() if torch.is_tensor(value)), "peak": peak}


def check_scale(device: str, config: Mapping, seq_len: int = 2048, foreign_rows: int = 50_000) -> list[dict]:
    """Each step's row at ``config``'s shapes (a config.json, e.g. :data:`RECIPE_SHAPE`'s): its
    planned and allocated parts (bytes), and the peak against the plan."""
    config = dict(config)
    shape = SourceShape.from_config(config)
    cuda = device.startswith("cuda")
    rows = []
    with one_process_group(device):
        for step in scale_steps(seq_len, "bf16" if cuda else "fp32"):
            plan = plan_job(shape, step.settings, foreign_rows=foreign_rows, device=device,
                            shard_one_process=step.sharded)
            measured = measure_step(config, step, foreign_rows, device)
            planned_peak = plan.total - plan.parts.get("cuda_context", 0)
            rows.append({"step": step.name, "parameters_b": plan.parameters, "seq_len": seq_len,
                         **{f"planned_{part}": plan.parts[part] for part in EXACT_PARTS},
                         **{f"allocated_{part}": measured[part] for part in EXACT_PARTS},
                         "planned_peak": planned_peak, "peak": measured["peak"] if cuda else None,
                         "ratio": measured["peak"] / planned_peak if cuda else None})
    return rows
