"""`make gpu-check`: does ramen's GPU path work on this machine, and how fast is it?

One command, a few minutes on one GPU, writes ``docs/results/gpu.md`` with the command, commit,
date, machine and device, and three checks:

1. **Throughput at the paper's shapes** (the GPU section of ``benchmarks/bench_train_step.py``):
   the bilingual training loop on BERT-base (56 + 56 sequences of 256 tokens) and BERT-large
   (12 + 12), random weights, every parameter trained, ``precision: auto``: seconds per update,
   tokens/s, the share of the update spent waiting for data, peak GPU memory, the hours the
   paper's 120k / 300k updates would take at that rate, and a bare ``BertForMaskedLM`` update on
   as many sequences, for scale.
2. **Kill and resume**: the demo config's ``train_bilingual`` (variant ``rnd``, French) run by
   the workflow itself with ``device: cuda`` and ``precision: bf16``, killed with SIGKILL (the
   whole process group: Snakemake and the trainer) after its first checkpoint, resumed by
   rerunning Snakemake, and compared with an uninterrupted run on the same inputs: the metrics
   file and every exported tensor, bit for bit.
3. **Two GPUs** (when two are visible): the same job with ``training.gpus: 2`` (torchrun through
   ``ramen.pipeline.launch``), compared with the one-GPU run.
4. **At a real size** (:mod:`ramen.reports.gpu_scale`): a sharded update (FSDP over one process)
   and a LoRA update of a random decoder of Llama-3.2-1B's shapes, each with its peak memory beside
   the memory plan the job graph makes (goal: within 10 %) and its exact parts beside the plan's.

A check that fails is reported on the page with its error and the command exits 1; on a machine
without a CUDA GPU it writes nothing and exits 2. The checks themselves are in
:mod:`ramen.reports.gpu_throughput` (1) and :mod:`ramen.reports.gpu_resume` (2, 3); this module
runs them and writes the page.

    python -m ramen.reports.gpu_check [--out docs/results/gpu.md] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ramen.io import write_lines
from ramen.reports.gpu_scale import RECIPE_SHAPE, check_scale
from ramen.reports.gpu_resume import REPO, TrainingRun, compare_runs, demo_runs, kill_and_resume, prepare
from ramen.reports.gpu_throughput import GIB, Shape, measure_shape, paper_shapes, reset_peak_memory, throughput_line

NO_GPU_EXIT = 2


# --- the device and the page ----------------------------------------------------------------------

def no_gpu_message(out: str | os.PathLike) -> str:
    import torch

    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
    return (f"gpu-check: torch {torch.__version__} ({build}) sees no CUDA GPU on this machine, so nothing was "
            f"measured and {out} was left as it was. Run it on a machine with an NVIDIA GPU and a CUDA build of "
            f"torch {torch.__version__.split('+')[0]} in .venv (pytorch.org lists the install command).")


def describe_device() -> str:
    import torch

    count = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(0)
    bf16 = "bf16 supported" if torch.cuda.is_bf16_supported() else "no bf16"
    return (f"{props.name} x {count} ({props.total_memory / GIB:.0f} GiB each), CUDA {torch.version.cuda}, "
            f"torch {torch.__version__}, {bf16}")


@dataclass
class Report:
    device: str
    throughput: list[dict] = field(default_factory=list)
    resume: dict | None = None
    ddp: dict | None = None
    ddp_skipped: str = ""
    scale: list[dict] = field(default_factory=list)
    inputs_s: float | None = None
    errors: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    settings: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.errors


def run_checks(device: str, description: str, workdir: Path, shapes: Sequence[Shape], runs: Mapping[int, TrainingRun],
               steps: int = 20, warmup: int = 2, sentences: int = 200_000, kill_after: int = 100,
               timeout: float = 600, scale_shape: Mapping | None = None, scale_seq_len: int = 2048) -> Report:
    """Every check; a failing one is recorded in ``Report.errors`` and the others still run.
    ``scale_shape``: the config.json of the real-size steps (None: they are not run)."""
    started = time.monotonic()
    workdir = Path(workdir)
    report = Report(device=description, settings={"steps": steps, "warmup": warmup, "kill_after": kill_after})
    for shape in shapes:
        try:
            row = measure_shape(shape, device, workdir / "throughput" / shape.name, steps, warmup, sentences)
            print(throughput_line(row), flush=True)
            report.throughput.append(row)
        except Exception as error:  # the other checks still tell what works
            report.errors[f"throughput, BERT-{shape.name}"] = describe_error(error)
            reset_peak_memory(device)
    try:
        for row in check_scale(device, scale_shape, scale_seq_len) if scale_shape is not None else ():
            print(scale_line(row), flush=True)
            report.scale.append(row)
    except Exception as error:
        report.errors["at a real size"] = describe_error(error)
        reset_peak_memory(device)
    one = runs[1]
    try:
        report.inputs_s = prepare(one, workdir, timeout)
        report.resume = kill_and_resume(one, workdir / "resume", kill_after, timeout)
        print(f"kill and resume: {'bit-identical' if report.resume['identical'] else 'differs'} "
              f"(largest weight difference {report.resume['max_weight_difference']:.3g})", flush=True)
    except Exception as error:
        report.errors["kill and resume"] = describe_error(error)
    if 2 not in runs:
        report.ddp_skipped = "one GPU visible"
    elif report.resume is None:
        report.ddp_skipped = "the one-GPU run it is compared with failed"
    else:
        try:
            report.ddp = compare_runs(one, runs[2], workdir / "ddp", timeout)
            print(f"two GPUs: largest loss difference {report.ddp['max_loss_difference']:.3g}", flush=True)
        except Exception as error:
            report.errors["two GPUs"] = describe_error(error)
    report.seconds = time.monotonic() - started
    return report


def describe_error(error: Exception) -> str:
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    for log in getattr(error, "logs", []):
        if Path(log).exists():
            # Progress bars rewrite one line with carriage returns: only its last state is kept.
            lines = [line.rsplit("\r", 1)[-1] for line in
                     Path(log).read_text(encoding="utf-8", errors="replace").splitlines()]
            text += f"\n\nThe end of {Path(log).name}:\n\n" + "\n".join(lines[-25:])
    return text


def _gib(value: float | None) -> str:
    return "" if value is None else f"{value / GIB:.1f}"


def render(report: Report, stamp) -> list[str]:
    """The page's lines: the stamp, the device, one section per check (or its error)."""
    from ramen.reports.results_pages import markdown_table

    verdict = "every check passed" if report.passed else "some checks failed (below)"
    lines = ["# GPU check", "", f"{stamp.sentence()} Do not edit: rerun the command to refresh this page.", "",
             f"Device: {report.device}. The checks took {report.seconds:.0f} s; {verdict}.", "",
             "## Training throughput at the paper's shapes", "",
             "The bilingual training loop (`ramen.training.trainer.train`, batches made in a background thread) on "
             "random weights and random token ids: every parameter trained, `precision: auto`, 32k-row foreign "
             f"table, median of {report.settings['steps']} updates after {report.settings['warmup']} warm-up ones. "
             "The bare `BertForMaskedLM` update trains the same encoder on as many sequences with its own loss "
             "(logits over the whole vocabulary at every position). Projected hours: the paper's updates (§3.1) at "
             "this rate, one GPU. The same figures as `python benchmarks/bench_train_step.py --no-cpu`.", ""]
    rows = [{"model": f"BERT-{row['model']}", "batch": f"{row['per_language']} + {row['per_language']} x "
             f"{row['seq_len']}", "s": f"{row['step_s']:.3f}", "tokens": f"{row['tokens_per_s']:,.0f}",
             "wait": f"{100 * row['data_wait']:.1f}", "peak": _gib(row["peak_memory"]),
             "updates": f"{row['updates']:,}", "hours": f"{row['hours']:.1f}", "bare": f"{row['bare_step_s']:.3f}",
             "bare_peak": _gib(row["bare_peak_memory"]), "ratio": f"{row['ratio']:.2f}"} for row in report.throughput]
    if rows:
        lines += markdown_table(("model", "batch", "s", "tokens", "wait", "peak", "updates", "hours", "bare",
                                 "bare_peak", "ratio"), rows,
                                ["model", "batch (en + fr x tokens)", "s/update", "tokens/s", "data wait (%)",
                                 "peak memory (GiB)", "paper updates", "projected hours", "bare BertForMaskedLM "
                                 "s/update", "bare peak memory (GiB)", "ours / bare"]) + [""]
    lines += _errors(report, "throughput")

    lines += ["## At a real size: a sharded update and a LoRA update beside the memory plan", "",
              "A random decoder of Llama-3.2-1B's shapes (`resources/recipes/llama-3.2-1b/config.json`) with a "
              "50,000-row foreign table, 2 + 2 windows of 2,048 tokens, bf16 compute: one update sharded with "
              "FSDP over one process (every group trained), one with LoRA (rank 16 on every linear layer of the "
              "blocks, the foreign table and the head trained, activation checkpointing). Planned: "
              "`ramen.training.memory`, as the job graph plans a training job; the peak leaves out the CUDA "
              "context, which torch does not count. Goal: the peak within 10 % of the plan.", ""]
    if report.scale:
        lines += markdown_table(("step", "parameters", "gradients", "optimizer", "planned", "peak", "ratio"), [
            {"step": row["step"], **{part: f"{_gib(row[f'planned_{part}'])} / {_gib(row[f'allocated_{part}'])}"
                                     for part in ("parameters", "gradients", "optimizer")},
             "planned": _gib(row["planned_peak"]), "peak": _gib(row["peak"]),
             "ratio": _ratio(row["ratio"])} for row in report.scale],
            ["update", "weights (GiB, planned / allocated)", "gradients", "optimiser state",
             "planned peak (GiB)", "measured peak (GiB)", "measured / planned"]) + [""]
        verdicts = [f"{row['step']}: {'within' if abs(row['ratio'] - 1) <= 0.10 else 'outside'} 10 %"
                    for row in report.scale if row["ratio"] is not None]
        lines += ["; ".join(verdicts) + "." if verdicts else "No peak: not measured on a GPU.", ""]
    elif "at a real size" not in report.errors:
        lines += ["Not run.", ""]
    lines += _errors(report, "at a real size")

    lines += ["## Kill and resume", "",
              "The demo config's `train_bilingual` (variant `rnd`, French) run by Snakemake with `device` and "
              "`training.precision` as below, killed with SIGKILL (Snakemake and the trainer) once a checkpoint at "
              f"update {report.settings['kill_after']} or later exists, resumed by rerunning Snakemake, then run "
              "again uninterrupted on the same inputs. Compared: the metrics file's losses and every tensor of the "
              "exported models, bit for bit.", ""]
    if report.inputs_s is not None:
        lines += [f"The job's inputs (text, vocabulary, encodings, head warm-up, initialisation) took "
                  f"{report.inputs_s:.0f} s.", ""]
    if report.resume:
        r = report.resume
        lines += markdown_table(("what", "value"), [
            {"what": "killed after the checkpoint of update", "value": r["killed_at"]},
            {"what": "resumed from update", "value": r["resumed_from"]},
            {"what": "losses logged", "value": r["logged_steps"]},
            {"what": "final losses", "value": ", ".join(f"{k} {v}" for k, v in r["final_losses"].items())},
            {"what": "tensors compared", "value": r["tensors"]},
            {"what": "largest weight difference", "value": f"{r['max_weight_difference']:.3g}"},
            {"what": "largest logged-loss difference", "value": f"{r['max_loss_difference']:.3g}"},
            {"what": "seconds: killed run, resume, uninterrupted run",
             "value": f"{r['killed_s']:.0f}, {r['resumed_s']:.0f}, {r['uninterrupted_s']:.0f}"},
        ]) + [""]
        if r["identical"]:
            lines += ["**Bit-identical**: the resumed run ends with exactly the weights and losses of the "
                      "uninterrupted one.", ""]
        else:
            lines += ["**Not bit-identical.** Every random choice of the trainer is drawn from (seed, update) and "
                      "the optimiser state is checkpointed, so on the CPU a resumed run is identical to an "
                      "uninterrupted one (tests/unit/test_train_resume.py). On a GPU some kernels (atomic adds in "
                      "the embedding backward pass, the reduction order cuBLAS picks) sum in an order that may "
                      "change from run to run."]
            repeat = r.get("repeat")
            if repeat is None:
                lines += [""]
            elif repeat["identical"]:
                lines += ["Here two uninterrupted runs were identical, so the difference comes from the resume: "
                          "a bug to report.", ""]
            else:
                within = r["max_weight_difference"] <= 10 * repeat["max_weight_difference"]
                lines += [f"Here two uninterrupted runs differ too (largest weight difference "
                          f"{repeat['max_weight_difference']:.3g}, logged loss {repeat['max_loss_difference']:.3g}): "
                          + ("that is the device's own run-to-run variation, and the resumed run differs by no more "
                             "than its order of magnitude." if within else
                             "the resumed run differs far more than that: a bug to report."), ""]
    lines += _errors(report, "kill and resume")

    lines += ["## Two GPUs (DDP)", ""]
    if report.ddp:
        d = report.ddp
        lines += ["The same job with `training.gpus: 2` (torchrun through `ramen.pipeline.launch`, each GPU half "
                  "of every batch) beside the one-GPU uninterrupted run. Not bit-identical by design: the "
                  "gradients are summed across GPUs in another order.", ""]
        lines += markdown_table(("what", "value"), [
            {"what": "tokens/s, one GPU", "value": _rate(d["first_tokens_per_s"])},
            {"what": "tokens/s, two GPUs", "value": _rate(d["second_tokens_per_s"])},
            {"what": "largest logged-loss difference", "value": f"{d['max_loss_difference']:.3g}"},
            {"what": "largest weight difference", "value": f"{d['max_weight_difference']:.3g}"},
            {"what": "final losses, two GPUs", "value": ", ".join(f"{k} {v}" for k, v in d["final_losses"].items())},
            {"what": "seconds", "value": f"{d['seconds']:.0f}"},
        ]) + [""]
    elif report.ddp_skipped:
        lines += [f"Not run: {report.ddp_skipped}.", ""]
    lines += _errors(report, "two GPUs")
    return lines


def scale_line(row: Mapping) -> str:
    return (f"{row['step']}: peak {_gib(row['peak'])} GiB, planned {_gib(row['planned_peak'])} GiB "
            f"(ratio {_ratio(row['ratio'])}); exact parts planned/allocated "
            + ", ".join(f"{part} {_gib(row[f'planned_{part}'])}/{_gib(row[f'allocated_{part}'])}"
                        for part in ("parameters", "gradients", "optimizer")) + " GiB")


def _ratio(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def _errors(report: Report, prefix: str) -> list[str]:
    lines = []
    for name, text in report.errors.items():
        if name.startswith(prefix):
            lines += [f"**{name} failed:**", "", "```", *text.splitlines(), "```", ""]
    return lines


def write_page(report: Report, stamp, out: str | os.PathLike) -> Path:
    """Write the page atomically and give it its row in the results index beside it."""
    out = Path(out)
    write_lines(out, ["\n".join(render(report, stamp)).rstrip("\n")])
    index = out.parent / "README.md"
    if index.exists():
        row = (f"| [GPU check]({out.name}) | {'all' if report.passed else 'not all'} checks passed, "
               f"{stamp.date} |")
        lines = index.read_text(encoding="utf-8").rstrip("\n").splitlines()
        lines = [line for line in lines if f"]({out.name})" not in line] + [row]
        write_lines(index, ["\n".join(lines)])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ramen.reports.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/results/gpu.md")
    parser.add_argument("--workdir", type=Path, help="scratch directory (default: a temporary one, removed after)")
    parser.add_argument("--steps", type=int, default=20, help="timed updates per paper shape")
    parser.add_argument("--models", nargs="+", default=["base", "large"], choices=["base", "large"])
    parser.add_argument("--command", default="make gpu-check", help="the command to stamp on the page")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print(no_gpu_message(args.out), file=sys.stderr)
        return NO_GPU_EXIT
    from ramen.reports.results_pages import Stamp

    stamp = Stamp.now(args.command, REPO)
    with tempfile.TemporaryDirectory(prefix="ramen-gpu-check-") as tmp:
        workdir = args.workdir or Path(tmp)
        gpus = (1, 2) if torch.cuda.device_count() >= 2 else (1,)
        runs = demo_runs(workdir / "demo", "cuda", "bf16", gpus=gpus)
        shapes = [shape for shape in paper_shapes() if shape.name in args.models]
        report = run_checks("cuda", describe_device(), workdir, shapes, runs, steps=args.steps,
                            scale_shape=json.loads(RECIPE_SHAPE.read_text(encoding="utf-8")))
    print(write_page(report, stamp, args.out))
    return 0 if report.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
