"""Contextual pre-training of the module (§3.2): character-level dynamic MLM with the model frozen.

The module embeds every subword of a window of the encoded corpus from its characters
(special tokens keep their table rows); the chosen tokens' characters are corrupted
(:mod:`.masking`). The frozen encoder and MLM head predict the chosen tokens over the
subword vocabulary through the frozen, tied table, so only the module learns.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from ramen.char2subword.approximate import subword_strings
from ramen.training.loops import StepLoop
from ramen.training.optimisation import Updates
from ramen.training.schedules import warmup_cosine
from ramen.training.settings import check_accumulation, check_precision
from ramen.char2subword.masking import choose_tokens, corrupt_characters
from ramen.char2subword.module import Char2Subword
from ramen.vocab.encode import load_stream
from ramen.errors import ConfigError
from ramen.glue import check_shares
from ramen.modeling.bilingual import IGNORE_INDEX, BilingualMaskedLM, load_source_mlm
from ramen.training.batches import SpecialIds, token_windows

logger = logging.getLogger(__name__)


@dataclass
class PretrainSettings:
    steps: int = 1000
    batch_size: int = 16
    seq_len: int = 128
    learning_rate: float = 1e-4
    warmup_steps: int = 100
    weight_decay: float = 0.01
    mask_prob: float = 0.15
    mask_share: float = 0.8  # of a chosen token's characters: the mask symbol
    random_share: float = 0.1  # ... a random character (the rest stay)
    seed: int = 0
    log_every: int = 10
    grad_accumulation: int = 1  # micro-batches per step: the same updates in less memory
    precision: str = "fp32"  # or bf16/fp16 autocast (fp16 with loss scaling)

    def __post_init__(self):
        check_accumulation(self.grad_accumulation, "char2subword.pretraining.grad_accumulation")
        check_precision(self.precision, "char2subword.pretraining.precision")
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError("char2subword.pretraining.mask_prob", f"{self.mask_prob} is not in (0, 1)")
        check_shares(self.mask_share, self.random_share, "char2subword.pretraining")
        if self.seq_len < 8:
            raise ConfigError("char2subword.pretraining.seq_len", f"{self.seq_len} is too short")


def module_inputs(module: Char2Subword, strings: list[str], ids: np.ndarray, corpus: np.ndarray, chosen: np.ndarray,
                  table: torch.Tensor, generator: torch.Generator, settings: PretrainSettings) -> torch.Tensor:
    """(batch, length, d) input embeddings: table rows for special tokens, the module elsewhere.

    Unchosen tokens are embedded once per distinct subword; chosen ones each from their own
    corrupted characters.
    """
    embeds = F.embedding(torch.from_numpy(ids), table)
    plain = corpus & ~chosen
    distinct, inverse = np.unique(ids[plain], return_inverse=True)
    plain_vectors = module.embed([strings[i] for i in distinct.tolist()])[torch.from_numpy(inverse)]
    chars = module.chars.encode([strings[i] for i in ids[chosen].tolist()], module.config.max_chars)
    corrupted = corrupt_characters(chars, generator, len(module.chars), settings.mask_share, settings.random_share)
    embeds = embeds.index_put((torch.from_numpy(plain),), plain_vectors)
    return embeds.index_put((torch.from_numpy(chosen),), module(corrupted))


def pretrain(module: Char2Subword, model_dir: str | os.PathLike, data_dir: str | os.PathLike,
             settings: PretrainSettings, progress: bool = True, checkpoint_dir: str | os.PathLike | None = None,
             checkpoint_every: int = 0) -> list[dict]:
    """Train ``module`` in place against the frozen masked LM of ``model_dir``; the metrics rows.

    With ``checkpoint_dir`` a killed run resumes from its last checkpoint (ramen.training.loops.StepLoop)."""
    from ramen.vocab.tokenizer import load_tokenizer, ordered_vocab

    tokenizer = load_tokenizer(model_dir)
    model = BilingualMaskedLM(load_source_mlm(model_dir), "table")
    model.requires_grad_(False)
    model.eval()  # frozen: no dropout either
    stream = load_stream(data_dir)
    if stream.vocab_size != len(tokenizer):
        raise ConfigError("char2subword", f"{data_dir} was encoded with another vocabulary than {model_dir}",
                          "rerun the encode rule for this language")
    special = SpecialIds.from_tokenizer(tokenizer)
    strings = subword_strings(ordered_vocab(tokenizer))
    table = model.input_embeddings("table").weight.detach()
    if table.shape[1] != module.config.output_dim:
        raise ConfigError("char2subword", f"the module has width {module.config.output_dim} but {model_dir} "
                          f"has hidden size {table.shape[1]}", "approximate this model's table first")
    optimizer = torch.optim.AdamW(module.parameters(), lr=settings.learning_rate, weight_decay=settings.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine(step, settings.warmup_steps, settings.steps))
    updates = Updates(optimizer, scheduler=schedule, max_grad_norm=1.0, accumulation=settings.grad_accumulation,
                      precision=settings.precision, device=str(table.device))
    loop = StepLoop(module, updates, steps=settings.steps, seed=settings.seed, checkpoint_dir=checkpoint_dir,
                    checkpoint_every=checkpoint_every, desc="pretrain", progress=progress)
    module.train()
    for step in loop.steps_to_run():
        rng = np.random.default_rng([settings.seed, step - 1])
        generator = torch.Generator().manual_seed(settings.seed * 1_000_003 + step - 1)
        ids, attention, corpus = token_windows(stream, special, rng, settings.batch_size, settings.seq_len)
        chosen, labels = choose_tokens(ids, corpus, rng, settings.mask_prob)
        targets = torch.from_numpy(labels)
        masked = targets != IGNORE_INDEX
        correct = []

        def loss_of(part):
            rows = part.numpy()
            embeds = module_inputs(module, strings, ids[rows], corpus[rows], chosen[rows], table, generator, settings)
            hidden = model.mlm.base_model(
                inputs_embeds=embeds, attention_mask=torch.from_numpy(attention[rows].astype(np.int64))).last_hidden_state
            positions = masked[part]
            logits = model.masked_logits("table", hidden, positions).float()
            correct.append(int((logits.argmax(-1) == targets[part][positions]).sum()))
            return F.cross_entropy(logits, targets[part][positions])

        # The loss is a mean over masked tokens: a micro-batch weighs by its share of them.
        value = loop.update(settings.batch_size, loss_of, share=lambda part: float(masked[part].sum() / masked.sum()))
        if step % settings.log_every == 0 or step == settings.steps:
            accuracy = sum(correct) / max(1, int(masked.sum()))
            row = {"step": step, "loss": value, "masked_accuracy": accuracy}
            loop.log(row)
            logger.info("pre-training %s", row)
    module.eval()
    return loop.rows
