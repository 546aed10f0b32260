"""The bilingual causal LM: one shared stack of transformer blocks, one input table and one output
layer per language, next-token loss on packed windows of each language.

The source checkpoint (any Hugging Face causal LM: ramen.modeling.sources) supplies the blocks,
the final norm and the English table and output layer. Each foreign language adds its own input
table and, where the source does not tie them, its own output rows; a bias where the source's
output layer has one. Logits are computed only at positions with a target (no padding).

Each language side exports as a standard ``AutoModelForCausalLM`` directory of the source's
architecture, with special token ids taken from that side's own tokenizer by string.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ramen.errors import ConfigError
from ramen.modeling import lora
from ramen.modeling.export import export_side
from ramen.modeling.sources import output_layer, transformer_blocks

IGNORE_INDEX = -100


@dataclass
class ForeignTables:
    """A foreign language's vocabulary-sized tensors (``output``/``bias`` None: tied / no bias)."""

    embeddings: torch.Tensor  # (V_f, d)
    output: torch.Tensor | None = None  # (V_f, d), only for a source with an untied output layer
    bias: torch.Tensor | None = None  # (V_f,), only for a source whose output layer has a bias


@dataclass
class CausalBatch:
    input_ids: torch.Tensor  # (batch, length)
    attention_mask: torch.Tensor  # (batch, length)
    labels: torch.Tensor  # (batch, length): the next token at each position, IGNORE_INDEX where none

    def apply(self, function) -> "CausalBatch":
        return CausalBatch(function(self.input_ids), function(self.attention_mask), function(self.labels))

    def targets(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())

    def tokens(self) -> int:
        return int(self.attention_mask.sum())


def packed_windows(offsets: np.ndarray, ids: np.ndarray, rng: np.random.Generator, count: int, length: int,
                   bos: int | None, eos: int, pad: int) -> CausalBatch:
    """``count`` windows of ``length`` tokens starting at random sentence starts, each beginning
    with BOS (when the tokenizer has one) and running on across sentences with EOS after each, as
    causal LMs are pre-trained; a window that reaches the end of the corpus is padded and its
    padding predicts nothing. Labels are the next token of every position."""
    num_sentences = len(offsets) - 1
    starts = rng.integers(0, num_sentences, size=count)
    rows = np.full((count, length + 1), pad, dtype=np.int64)
    real = np.zeros((count, length + 1), dtype=bool)
    for row, sentence in enumerate(starts):
        pieces, size = ([np.asarray([bos])] if bos is not None else []), int(bos is not None)
        while size < length + 1 and sentence < num_sentences:
            body = np.asarray(ids[offsets[sentence]:offsets[sentence + 1]], dtype=np.int64)
            pieces += [body, np.asarray([eos])]
            size += len(body) + 1
            sentence += 1
        window = np.concatenate(pieces)[:length + 1]
        rows[row, :len(window)] = window
        real[row, :len(window)] = True
    labels = np.where(real[:, 1:], rows[:, 1:], IGNORE_INDEX)
    return CausalBatch(torch.from_numpy(rows[:, :-1].copy()), torch.from_numpy(real[:, :-1].astype(np.int64)),
                       torch.from_numpy(labels))


class BilingualCausalLM(nn.Module):
    """Shared transformer blocks over per-language input tables and output layers."""

    def __init__(self, source_lm: nn.Module, source_lang: str, foreign: Mapping[str, ForeignTables] | None = None):
        super().__init__()
        self.source_lang = source_lang
        self.lm = source_lm
        rows, bias, self.tied = output_layer(source_lm)
        self.has_bias = bias is not None
        self.foreign_embeddings = nn.ModuleDict()
        self.foreign_output = nn.ParameterDict()
        self.foreign_bias = nn.ParameterDict()
        for lang, tables in (foreign or {}).items():
            self.add_language(lang, tables)

    @property
    def config(self):
        return self.lm.config

    @property
    def languages(self) -> list[str]:
        return [self.source_lang, *self.foreign_embeddings.keys()]

    def add_language(self, lang: str, tables: ForeignTables) -> None:
        """Add ``lang``'s tables; each must match the source's layout (tied or not, bias or not)."""
        hidden = self.lm.config.hidden_size
        rows = tables.embeddings.shape[0]
        if tables.embeddings.dim() != 2 or tables.embeddings.shape[1] != hidden:
            raise ConfigError(f"languages.{lang}", f"embeddings {tuple(tables.embeddings.shape)} do not fit "
                              f"hidden size {hidden}")
        if self.tied != (tables.output is None):
            raise ConfigError(f"languages.{lang}", "the source " + ("ties" if self.tied else "does not tie")
                              + " its output layer to its input table, the initial tables "
                              + ("do not" if self.tied else "do"), "rerun the init rule for this language")
        if self.has_bias != (tables.bias is not None):
            raise ConfigError(f"languages.{lang}", "the source's output layer " + ("has" if self.has_bias else
                              "has no") + " bias, the initial tables " + ("have none" if self.has_bias else
                              "have one"), "rerun the init rule for this language")
        if tables.output is not None and tables.output.shape != tables.embeddings.shape:
            raise ConfigError(f"languages.{lang}", f"output rows {tuple(tables.output.shape)} and embeddings "
                              f"{tuple(tables.embeddings.shape)} differ")
        if tables.bias is not None and tables.bias.shape != (rows,):
            raise ConfigError(f"languages.{lang}", f"bias {tuple(tables.bias.shape)} does not fit {rows} rows")
        self.foreign_embeddings[lang] = nn.Embedding.from_pretrained(tables.embeddings.detach().clone().float(),
                                                                     freeze=False)
        if tables.output is not None:
            self.foreign_output[lang] = nn.Parameter(tables.output.detach().clone().float())
        if tables.bias is not None:
            self.foreign_bias[lang] = nn.Parameter(tables.bias.detach().clone().float())

    # --- per-language tables ----------------------------------------------------------------

    def input_embeddings(self, lang: str) -> nn.Embedding:
        return self.lm.get_input_embeddings() if lang == self.source_lang else self.foreign_embeddings[lang]

    def output_rows(self, lang: str) -> torch.Tensor:
        if lang == self.source_lang:
            return self.lm.get_output_embeddings().weight
        return self.foreign_embeddings[lang].weight if self.tied else self.foreign_output[lang]

    def output_bias(self, lang: str) -> torch.Tensor | None:
        if not self.has_bias:
            return None
        return self.lm.get_output_embeddings().bias if lang == self.source_lang else self.foreign_bias[lang]

    def foreign_tables(self, lang: str) -> ForeignTables:
        return ForeignTables(self.input_embeddings(lang).weight, None if self.tied else self.output_rows(lang),
                             self.output_bias(lang))

    # --- parameter groups (what staged training freezes and trains) ------------------------

    def blocks(self) -> nn.ModuleList:
        return transformer_blocks(self.lm)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role, named as the masked-LM model's: ``encoder`` the shared stack (blocks,
        final norm, learned positions), ``head`` the untied output rows and biases of every language,
        ``source_embeddings`` / ``foreign_embeddings`` the input tables (with the output rows when
        tied), plus ``block:<i>`` for each block (``bottom:k``/``top:k`` select them by count), and
        ``lora`` the adapters once added (:meth:`add_adapters`), in no other group."""
        source_table = self.lm.get_input_embeddings().weight
        head = []
        if not self.tied:
            head.append(self.lm.get_output_embeddings().weight)
            head += list(self.foreign_output.values())
        if self.has_bias:
            head.append(self.lm.get_output_embeddings().bias)
            head += list(self.foreign_bias.values())
        taken = {id(source_table)} | {id(p) for p in head}
        encoder = [p for p in self.lm.parameters() if id(p) not in taken]
        groups = {"encoder": encoder, "head": head, "source_embeddings": [source_table],
                  "foreign_embeddings": [e.weight for e in self.foreign_embeddings.values()]}
        for index, block in enumerate(self.blocks()):
            groups[f"block:{index}"] = list(block.parameters())
        return lora.adapter_groups(groups, self.lm)

    def add_adapters(self, *, rank: int, alpha: float, dropout: float, target_modules: Sequence[str],
                     seed: int) -> list[str]:
        """LoRA adapters on the blocks' linear layers that ``target_modules`` names (ramen.modeling.lora):
        the group ``lora``, merged into the blocks on export and saved beside them."""
        return lora.add_adapters(self.lm, self.blocks(), rank=rank, alpha=alpha, dropout=dropout,
                                 target_modules=target_modules, seed=seed, task_type="CAUSAL_LM")

    # --- forward ----------------------------------------------------------------------------

    def hidden_states(self, batches: Mapping[str, CausalBatch]) -> dict[str, torch.Tensor]:
        """Every language's windows through the shared stack, in one pass when their lengths agree."""
        langs = list(batches)
        lengths = {batches[lang].input_ids.shape[1] for lang in langs}
        groups = [langs] if len(lengths) == 1 else [[lang] for lang in langs]
        hidden = {}
        for group in groups:
            embeds = torch.cat([self.input_embeddings(lang)(batches[lang].input_ids) for lang in group])
            attention = torch.cat([batches[lang].attention_mask for lang in group])
            out = self.lm.base_model(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
            hidden.update(zip(group, torch.split(out, [batches[lang].input_ids.shape[0] for lang in group])))
        return hidden

    def logits(self, lang: str, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over ``lang``'s vocabulary for hidden states (any leading shape)."""
        return F.linear(hidden, self.output_rows(lang), self.output_bias(lang))

    def forward(self, batches: Mapping[str, CausalBatch]) -> dict[str, torch.Tensor]:
        """Mean next-token cross-entropy per language."""
        hidden = self.hidden_states(batches)
        losses = {}
        for lang, batch in batches.items():
            positions = batch.labels != IGNORE_INDEX
            logits = self.logits(lang, hidden[lang][positions])
            losses[lang] = F.cross_entropy(logits.float(), batch.labels[positions])
        return losses

    # --- export -----------------------------------------------------------------------------

    def export_language(self, lang: str, tokenizer, out_dir: str | os.PathLike) -> None:
        """Save ``lang``'s side as a standard ``AutoModelForCausalLM`` directory with its tokenizer.

        The architecture is the source's; special token ids are those of ``tokenizer``'s own
        BOS/EOS/PAD strings (a new vocabulary numbers them differently from the source's).
        """
        from transformers import AutoModelForCausalLM

        config = copy.deepcopy(self.lm.config)
        rows = self.input_embeddings(lang).weight.shape[0]
        config.vocab_size = rows
        ids = special_token_ids(tokenizer)
        for role in ("bos", "eos", "pad"):
            setattr(config, f"{role}_token_id", ids.get(role))
        vocabulary = [self.lm.get_input_embeddings().weight, self.lm.get_output_embeddings().weight]
        if self.has_bias:
            vocabulary.append(self.lm.get_output_embeddings().bias)
        generation = getattr(self.lm, "generation_config", None)

        def fill(exported):
            exported.get_input_embeddings().weight.copy_(self.input_embeddings(lang).weight)
            head = exported.get_output_embeddings()
            if self.tied:
                head.weight = exported.get_input_embeddings().weight
            else:
                head.weight.copy_(self.output_rows(lang))
            if self.has_bias:
                head.bias.copy_(self.output_bias(lang))
            if generation is not None:
                exported.generation_config = copy.deepcopy(generation)
                for role in ("bos", "eos", "pad"):
                    setattr(exported.generation_config, f"{role}_token_id", ids.get(role))

        export_side(self.lm, config, vocabulary, lambda config: AutoModelForCausalLM.from_config(
            config, dtype=torch.float32), fill, tokenizer, out_dir, lang)


def special_token_ids(tokenizer) -> dict[str, int]:
    """The ids of the tokenizer's own BOS, EOS and PAD strings (PAD falls back to EOS, as for
    decoders without a pad token)."""
    ids = {}
    for role in ("bos", "eos", "pad"):
        token = getattr(tokenizer, f"{role}_token", None)
        if token is not None:
            ids[role] = tokenizer.convert_tokens_to_ids(str(token))
    if "pad" not in ids and "eos" in ids:
        ids["pad"] = ids["eos"]
    return ids
