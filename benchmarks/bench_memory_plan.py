"""The memory plans of the recipes for real sizes, and a plan set against what a training update
allocates.

(a) Every recipe in config/recipes/ planned as the job graph plans it (ramen.training.memory, from
    its shipped config.json): each part, the total and its ratio to resources.gpu_memory_gb, per
    trained variant; and Llama-3.1-8B trained in full, sharded over 8 GPUs (the goal: <= 80 GB each).
(b) One update of a random model of the ``--shape`` on ``--device``, 2 windows per language, with
    every group trained, then with LoRA, the foreign rows and activation checkpointing, then the
    same over an NF4 base (``frozen_dtype: nf4``) without the head (one
    process, the trainer's set-up: adapters, checkpointed blocks, the groups trained, fused AdamW,
    autocast): the exact parts as allocated against the plan's, and on a GPU the peak allocated
    against the planned total (CUDA context left out), the check of the estimates.

    .venv/bin/python benchmarks/bench_memory_plan.py [--device cuda] [--shape 1b|tiny] [--smoke]

``--smoke``: (a), and (b) for a tiny shape on the CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from ramen.reports.gpu_scale import ScaleStep, measure_step  # noqa: E402
from ramen.training import memory  # noqa: E402
from ramen.training.memory import GIB, SourceShape, plan_job  # noqa: E402
from ramen.training.settings import TrainSettings  # noqa: E402
from ramen.glue import settings_from  # noqa: E402

TINY = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 500, "tie_word_embeddings": False}
SHAPES = {"tiny": TINY, "1b": REPO / "resources" / "recipes" / "llama-3.2-1b" / "config.json"}


def recipe_plans(path: Path) -> dict[str, tuple[TrainSettings, memory.Plan]]:
    """Each trained variant's settings and plan, as common.smk plans them before the download."""
    import yaml

    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    resources = config["resources"]
    shape = SourceShape.from_config(json.loads((REPO / resources["source_config"]).read_text(encoding="utf-8")))
    plans = {}
    for name, variant in config["variants"].items():
        if variant.get("init", "none") == "none":
            continue
        settings = settings_from(TrainSettings, {**config["training"], **variant.get("training", {})}, "training")
        vocabulary = variant.get("vocabulary", "replace")
        plans[name] = settings, plan_job(shape, settings, vocabulary=vocabulary, device=config["device"],
                                         foreign_rows=memory.foreign_vocabulary_rows(shape, vocabulary, config["bpe"]),
                                         limit_gb=resources["gpu_memory_gb"])
    return plans


def show(name: str, plan: memory.Plan) -> None:
    parts = "  ".join(f"{part} {value / GIB:.2f}" for part, value in plan.parts.items() if value)
    ratio = f"  ratio to limit {plan.total / plan.limit:.3f}" if plan.limit else ""
    print(f"  {name:12s} {parts}  total {plan.total / GIB:.2f} GiB{ratio}")


def plan_recipes() -> None:
    for path in sorted((REPO / "config" / "recipes").glob("*.yaml")):
        print(f"{path.name} (GiB per GPU):")
        for name, (_, plan) in recipe_plans(path).items():
            show(name, plan)
    header = REPO / "resources" / "recipes" / "llama-3.1-8b" / "config.json"
    shape = SourceShape.from_config(json.loads(header.read_text(encoding="utf-8")))
    whole = TrainSettings(steps=1, batch_size=8, seq_len=2048, precision="bf16", sharding="fsdp", gpus=8,
                          train=("encoder", "head", "source_embeddings", "foreign_embeddings"))
    print("Llama-3.1-8B trained in full, FSDP over 8 GPUs, 2 x 2048 tokens per GPU (GiB per GPU):")
    show("everything", plan_job(shape, whole, foreign_rows=50_000, limit_gb=80))


def check_estimate(shape_name: str, device: str) -> None:
    shape = SHAPES[shape_name]
    config = shape if isinstance(shape, dict) else json.loads(shape.read_text(encoding="utf-8"))
    cuda = device.startswith("cuda")
    foreign_rows = 300 if shape_name == "tiny" else 50_000
    seq_len = 16 if shape_name == "tiny" else 2048
    for label, values in (("everything", {"train": ("encoder", "head", "source_embeddings", "foreign_embeddings")}),
                          ("lora", {"train": ("lora", "foreign_embeddings", "head"), "activation_checkpointing": True}),
                          # An NF4 base runs the forward in bf16 on the CPU too.
                          ("nf4 + lora", {"train": ("lora", "foreign_embeddings"), "activation_checkpointing": True,
                                          "frozen_dtype": "nf4", "precision": "bf16"})):
        settings = TrainSettings(**{"steps": 1, "batch_size": 2, "seq_len": seq_len,
                                    "precision": "bf16" if cuda else "fp32", **values})
        plan = plan_job(SourceShape.from_config(config), settings, foreign_rows=foreign_rows, device=device)
        measured = measure_step(config, ScaleStep(label, settings, sharded=False), foreign_rows, device)
        print(f"{shape_name} on {device}, {label}, 2 x {settings.batch_size} x {seq_len} tokens:")
        for part in memory.EXACT_PARTS:
            print(f"  {part:10s} planned {plan.parts[part] / GIB:.4f} GiB  allocated {measured[part] / GIB:.4f} GiB"
                  f"  ratio allocated/planned {measured[part] / max(plan.parts[part], 1):.3f}")
        if cuda:
            planned = plan.total - plan.parts["cuda_context"]
            print(f"  peak       planned {planned / GIB:.2f} GiB  allocated {measured['peak'] / GIB:.2f} GiB"
                  f"  ratio allocated/planned {measured['peak'] / planned:.3f}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), help="default: 1b on a GPU, tiny on the CPU")
    parser.add_argument("--smoke", action="store_true", help="the recipes' plans and a tiny model on the CPU")
    args = parser.parse_args(argv)
    plan_recipes()
    if args.smoke:
        check_estimate("tiny", "cpu")
    else:
        check_estimate(args.shape or ("1b" if args.device.startswith("cuda") else "tiny"), args.device)


if __name__ == "__main__":
    main()
