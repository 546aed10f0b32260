"""Training runs for test_sharding.py, in the test's process or in each process of a torchrun job.

``python sharding_worker.py jobs.json``: every job of the list in turn, in the same processes. A
job names its ``case`` (``extended``: a tied Llama-layout source with new vocabulary rows, or
``masked``: the tiny BERT masked LM with a foreign table), its ``out`` directory and settings
overrides (LoRA adapters are added when a stage names ``lora``). After training, the main process
records what the objective holds (``facts.json``), its weights (``weights.safetensors``) and, for
the extended case, the exported model.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tiny_decoder

# Weight decay: a parameter left with optimiser state would move without a gradient.
SETTINGS = dict(steps=20, batch_size=4, seq_len=12, peak_lr=1e-2, init_lr=1e-4, warmup_steps=2, weight_decay=0.01,
                log_every=1, checkpoint_every=6, keep_last=2, keep_every=6, threads=1)
STAGES = {
    # The new rows alone, then with the top block, then every group (tied: the head is the input table).
    "extended": [{"until": 6, "train": ["foreign_embeddings"]},
                 {"until": 12, "train": ["foreign_embeddings", "top:1"]},
                 {"train": ["encoder", "source_embeddings", "foreign_embeddings"]}],
    "masked": [{"until": 6, "train": ["foreign_embeddings"]},
               {"train": ["encoder", "head", "foreign_embeddings"]}],
}
NEW_ROWS = 24


def streams(vocab: dict[str, int]) -> dict:
    from ramen.vocab.encode import TokenStream

    rng = np.random.default_rng(0)
    return {lang: TokenStream(ids=rng.integers(5, size, 3000).astype(np.uint16), offsets=np.arange(0, 3001, 10),
                              vocab_size=size) for lang, size in vocab.items()}


def training_settings(case: str, **overrides):
    from ramen.training.settings import LoraSettings
    from ramen.training.trainer import TrainSettings

    values = {**SETTINGS, "stages": STAGES[case], **overrides}
    values["lora"] = LoraSettings(**values.get("lora", {}))
    return TrainSettings(**values)


def extended_objective(inputs: dict, settings, dropout: float = 0.0):
    """CLM over a tied tiny Llama whose vocabulary gained ``NEW_ROWS`` rows; English reads the
    source's ids, French every id."""
    from tiny_decoder import tiny_llama

    from ramen.modeling.causal import BilingualCausalLM, ForeignTables, special_token_ids
    from ramen.objectives.base import BatchShape, ObjectiveSettings
    from ramen.objectives.causal import CausalLanguageModeling
    from ramen.vocab.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(inputs["tokenizer"])
    first = len(tokenizer)
    source = tiny_llama(first, tie=True, seed=0, hidden=32)
    for module in source.modules():
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = dropout
    new = torch.randn(NEW_ROWS, 32, generator=torch.Generator().manual_seed(1)) * 0.02
    model = BilingualCausalLM.extended(
        source, ForeignTables(torch.cat([source.get_input_embeddings().weight.detach(), new])), first, ("en", "fr"))
    specials = special_token_ids(tokenizer)
    objective = CausalLanguageModeling.build(model, streams({"en": first, "fr": model.vocabulary_size("fr")}),
                                             {"en": specials, "fr": specials}, BatchShape.of(settings),
                                             ObjectiveSettings())
    return objective, tokenizer


def masked_objective(inputs: dict, settings, dropout: float = 0.0):
    from transformers import AutoTokenizer

    from ramen.modeling.bilingual import BilingualMaskedLM, load_source_mlm
    from ramen.objectives.mlm import masked_lm
    from ramen.training.batches import SpecialIds

    source = load_source_mlm(inputs["masked_source"])
    source.config.hidden_dropout_prob = source.config.attention_probs_dropout_prob = dropout
    for module in source.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = dropout
    english = SpecialIds.from_tokenizer(AutoTokenizer.from_pretrained(inputs["masked_source"]))
    size = english.vocab_size + 16
    generator = torch.Generator().manual_seed(7)
    model = BilingualMaskedLM(source, "en", {"fr": (torch.randn(size, 32, generator=generator) * 0.1,
                                                     torch.zeros(size))})
    specials = {"en": english, "fr": SpecialIds(**{**vars(english), "vocab_size": size})}
    return masked_lm(model, streams({"en": english.vocab_size, "fr": size}), specials, settings), None


def run(job: dict):
    """Train one job (resuming what its ``out`` holds); the objective."""
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor

    from ramen.training import trainer as training
    from ramen.training.checkpoints import tied_once
    from ramen.training.distributed import is_main_process

    torch.set_num_threads(1)
    out = Path(job["out"])
    settings = training_settings(job["case"], **job.get("settings", {}))
    build = extended_objective if job["case"] == "extended" else masked_objective
    objective, tokenizer = build(job["inputs"], settings, job.get("dropout", 0.0))
    if settings.uses_lora:  # as the pipeline adds them: before training, so sharded with the blocks
        objective.model.add_adapters(**asdict(settings.lora), seed=settings.seed)
    schedule = training.TrainSettings.learning_rate
    if job.get("step_delay"):  # slows the run down so that it can be killed mid-way; results do not change
        training.TrainSettings.learning_rate = lambda self, step: (time.sleep(job["step_delay"]),
                                                                  schedule(self, step))[1]
    try:
        training.train(objective, settings, out / "checkpoints", out / "metrics.csv", progress=False)
    finally:
        training.TrainSettings.learning_rate = schedule
    if not is_main_process():
        return objective
    model = objective.model
    lm = model.lm if hasattr(model, "lm") else model.mlm
    facts = {
        "dtensors": [name for name, param in objective.named_parameters() if isinstance(param, DTensor)],
        "classes": sorted({type(module).__name__ for module in objective.modules()}),
        "devices": sorted({str(tensor.device) for tensor in objective.state_dict().values()}),
        "dtypes": sorted({str(param.dtype) for param in objective.parameters()}),
        "tied": lm.get_output_embeddings().weight is lm.get_input_embeddings().weight,
        "hooks": sum(len(table) for module in objective.modules() for name, table in vars(module).items()
                     if name.endswith("hooks") and isinstance(table, dict)),
    }
    (out / "facts.json").write_text(json.dumps(facts))
    save_file(tied_once(objective), str(out / "weights.safetensors"))
    if tokenizer is not None:
        model.export_language("fr", tokenizer, out / "model")
    return objective


if __name__ == "__main__":
    for job in json.loads(Path(sys.argv[1]).read_text()):
        run(job)
