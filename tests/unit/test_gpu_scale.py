"""make gpu-check's sharded, LoRA and NF4 + LoRA steps, at a tiny shape on the CPU: the code a GPU runs, and
the plan's exact parts against what the steps allocate."""

from __future__ import annotations

from ramen.reports.gpu_scale import TINY_SHAPE, check_scale
from ramen.training.memory import EXACT_PARTS


def test_the_sharded_and_lora_steps_allocate_exactly_what_the_plan_says():
    rows = check_scale("cpu", TINY_SHAPE, seq_len=16, foreign_rows=100)
    assert [row["step"] for row in rows] == ["sharded (FSDP, world size 1)", "LoRA", "NF4 + LoRA"]
    for row in rows:
        for part in EXACT_PARTS:
            assert row[f"allocated_{part}"] > 0, (row["step"], part)
            assert row[f"allocated_{part}"] == row[f"planned_{part}"], (row["step"], part)
        assert row["peak"] is None  # peaks are measured on a GPU only
    sharded, lora, qlora = rows
    # LoRA trains the adapters and the foreign table (the tied head is the English table): fewer moments.
    assert lora["allocated_optimizer"] < sharded["allocated_optimizer"]
    assert lora["allocated_parameters"] > sharded["allocated_parameters"]  # the adapters

    # NF4 + LoRA: the frozen base in 4 bits (blocks) and bf16 (the English table); the same trained
    # weights (the tied head is the English table, in no group LoRA's step trains).
    assert qlora["allocated_parameters"] < lora["allocated_parameters"]
    assert qlora["allocated_optimizer"] == lora["allocated_optimizer"]
