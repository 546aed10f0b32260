"""Tokens per second per process of the ways a decoder trains on several processes: DDP (a full
replica each), FSDP (``training.sharding: fsdp``) and LoRA (``train: [lora, foreign_embeddings]``,
under DDP), as ratios to DDP, each with what one process holds of the weights, gradients and
optimiser state (the memory plan's exact parts, ramen.training.memory).

Every case runs ramen's own trainer (ramen.training.trainer.train) on a random Llama-layout
bilingual causal LM with a foreign table, synthetic token ids, fp32 on the CPU, under one torchrun
job of ``--processes`` processes (gloo), one case after the other in the same processes so that
load hits them alike; the figure is the median of the trainer's own ``tokens_per_s`` over the
updates after the first (allocation, optimiser state).

    .venv/bin/python benchmarks/bench_sharding.py [--processes 2] [--shape cpu|smoke] [--steps N]

``--smoke``: the smallest shape and three updates, a quick check of the script itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

SHAPES = {
    "smoke": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 500, "foreign": 400, "batch_size": 4, "seq_len": 16},
    "cpu": {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 8000, "foreign": 8000, "batch_size": 8, "seq_len": 128},
}
GROUPS = ["encoder", "head", "source_embeddings", "foreign_embeddings"]
CASES = {
    "ddp": {"train": GROUPS},
    "fsdp": {"train": GROUPS, "sharding": "fsdp"},
    "lora": {"train": ["lora", "foreign_embeddings"], "lora": {"rank": 8, "alpha": 16.0}},
}


def objective_for(shape: dict, settings):
    """The clm objective over a random tied Llama and a foreign table, on synthetic streams."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ramen.modeling.causal import BilingualCausalLM, ForeignTables
    from ramen.objectives.base import BatchShape, ObjectiveSettings
    from ramen.objectives.causal import CausalLanguageModeling
    from ramen.vocab.encode import TokenStream

    config = LlamaConfig(**{key: value for key, value in shape.items() if key not in ("foreign", "batch_size",
                                                                                      "seq_len")},
                         tie_word_embeddings=True, max_position_embeddings=max(256, shape["seq_len"]))
    torch.manual_seed(0)
    source = LlamaForCausalLM(config)
    tables = ForeignTables(torch.randn(shape["foreign"], config.hidden_size) * 0.02)
    model = BilingualCausalLM(source, "en", {"xx": tables})
    rng = np.random.default_rng(0)
    sizes = {"en": config.vocab_size, "xx": shape["foreign"]}
    streams = {lang: TokenStream(ids=rng.integers(3, size, 200_000).astype(np.uint16),
                                 offsets=np.arange(0, 200_001, 20), vocab_size=size) for lang, size in sizes.items()}
    specials = {lang: {"bos": 0, "eos": 1, "pad": 2} for lang in sizes}
    return CausalLanguageModeling.build(model, streams, specials, BatchShape.of(settings), ObjectiveSettings())


def held_bytes(objective, optimizer_state: dict) -> int:
    """What this process holds of the weights, gradients and optimiser state (local shards)."""
    import torch

    def local(tensor):
        return tensor.to_local() if hasattr(tensor, "to_local") else tensor

    weights = sum(local(param).nbytes for param in objective.parameters())
    trained = sum(local(param).nbytes for param in objective.parameters() if param.requires_grad)
    moments = sum(local(value).nbytes for state in optimizer_state.values() for value in state.values()
                  if torch.is_tensor(value))
    return weights + trained + moments


def worker(job_path: Path) -> None:
    """One torchrun process: every case of the job in turn."""
    import dataclasses

    import torch

    from ramen.training import trainer as training
    from ramen.training.distributed import is_main_process
    from ramen.training.settings import LoraSettings

    job = json.loads(job_path.read_text())
    shape, out = SHAPES[job["shape"]], Path(job["out"])
    torch.set_num_threads(1)
    results = {}
    for case, values in CASES.items():
        values = dict(values)
        settings = training.TrainSettings(
            steps=job["steps"], batch_size=shape["batch_size"], seq_len=shape["seq_len"], peak_lr=1e-4,
            warmup_steps=1, log_every=1, precision="fp32", distributed=True, threads=1,
            gpus=job["processes"], lora=LoraSettings(**values.pop("lora", {})), **values)
        objective = objective_for(shape, settings)
        if settings.uses_lora:
            objective.model.add_adapters(**dataclasses.asdict(settings.lora), seed=0)
        held = {}
        step = torch.optim.AdamW.step

        def recording(self, *args, **kwargs):  # what the process holds, once the moments exist
            result = step(self, *args, **kwargs)
            held.setdefault("bytes", held_bytes(objective, self.state))
            return result

        torch.optim.AdamW.step = recording
        try:
            rows = training.train(objective, settings, out / case / "checkpoints", out / case / "metrics.csv",
                                  progress=False)
        finally:
            torch.optim.AdamW.step = step
        # One row per update; the first allocates the moments.
        rates = sorted(float(row["tokens_per_s"]) for row in rows[1:])
        results[case] = {"tokens_per_s": rates[len(rates) // 2], "held_bytes": held["bytes"]}
    if is_main_process():
        (out / "results.json").write_text(json.dumps(results))


def measure(shape: str, processes: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="ramen-bench-sharding-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"shape": shape, "processes": processes, "steps": steps, "out": tmp}))
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}",
                   str(Path(__file__).resolve()), "--worker", str(job)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"torchrun failed ({done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads((Path(tmp) / "results.json").read_text())


def report(shape: str, processes: int, steps: int, results: dict) -> None:
    size = SHAPES[shape]
    print(f"{processes} processes (gloo, CPU, fp32), hidden {size['hidden_size']}, {size['num_hidden_layers']} "
          f"blocks, vocabularies {size['vocab_size']:,} + {size['foreign']:,}, {size['batch_size']} + "
          f"{size['batch_size']} windows of {size['seq_len']} tokens per update, {steps} updates")
    base = results["ddp"]
    for case, row in results.items():
        per_process = row["tokens_per_s"] / processes
        print(f"  {case:5s} {per_process:10,.0f} tokens/s per process  ratio to ddp "
              f"{row['tokens_per_s'] / base['tokens_per_s']:.3f}   held per process {row['held_bytes'] / 2**20:8.2f} "
              f"MiB  ratio to ddp {row['held_bytes'] / base['held_bytes']:.3f}")


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="cpu")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--smoke", action="store_true", help="the smallest shape, three updates")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker)
        return {}
    shape, steps = ("smoke", 3) if args.smoke else (args.shape, max(3, args.steps))
    results = measure(shape, args.processes, steps)
    report(shape, args.processes, steps, results)
    return results


if __name__ == "__main__":
    main()
