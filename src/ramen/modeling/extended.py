"""One causal LM over an extended vocabulary: the source keeps every token and row, the new
foreign tokens (ramen.vocab.extend) get rows of their own after them, and one model reads and
writes both languages.

The vocabulary-sized tensors are held in two parts: the source's rows stay the source model's
own parameters (its input table, output layer and bias), the new rows are separate parameters.
A training stage can therefore move the new rows alone: the source rows get no gradient, do not
move and hold no optimiser state (ramen.training.staging). The lookup takes each token's row from
the part that holds it; the logits are those of the two parts side by side. Exported, the two
parts are one table of the extended size in a standard ``AutoModelForCausalLM`` directory.

Extended tables with output rows of their own for a tied source (a rule of their own for the new
output rows: ramen.initializers.extension) untie the whole head: the source's output rows become a
parameter of their own, a copy of its input rows at the start, and the export is untied.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ramen.errors import ConfigError
from ramen.modeling import lora
from ramen.modeling.causal import IGNORE_INDEX, CausalBatch, ForeignTables, special_token_ids
from ramen.modeling.export import export_side
from ramen.modeling.sources import output_layer, transformer_blocks

SETTING = "variants.<variant>.vocabulary"


def _check_source_rows(name: str, given: torch.Tensor, source: torch.Tensor, first: int) -> None:
    if given.shape[0] < first or given.shape[1:] != source.shape[1:]:
        raise ConfigError(SETTING, f"the extended {name} has shape {tuple(given.shape)}, the source's first {first} "
                          f"rows have {tuple(source[:first].shape)}", "rerun the initialisation of the new rows")
    if not torch.equal(given[:first].to(source.dtype), source[:first].detach()):
        raise ConfigError(SETTING, f"the first {first} rows of the extended {name} are not the source's",
                          "initialise the new rows from this source model (ramen.initializers.extension)")


def untie_output_layer(model: nn.Module) -> None:
    """Give a tied causal LM output rows of their own, a copy of its input table; its config says so,
    so that an export of it is untied too."""
    head = model.get_output_embeddings()
    head.weight = nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.config.tie_word_embeddings = False


class ExtendedCausalLM(nn.Module):
    """A causal LM whose vocabulary is the source's (ids below ``first``) plus new rows.

    ``tables``: the extended input table, output rows (None: tied, as the source; given for a
    tied source: the head is untied) and output bias (None: the source has none), each with the
    source's rows first, unchanged (checked).
    ``languages``: the text streams it trains on (e.g. English and the foreign language); they
    all read the one vocabulary.
    """

    def __init__(self, source_lm: nn.Module, tables: ForeignTables, first: int,
                 languages: Sequence[str] = ("en", "xx")):
        super().__init__()
        self.lm = source_lm
        self.first = int(first)
        self._languages = list(languages)
        rows, bias, source_tied = output_layer(source_lm)
        if source_tied and tables.output is not None:
            untie_output_layer(source_lm)
            rows, bias, _ = output_layer(source_lm)
        self.tied = source_tied and tables.output is None
        self.has_bias = bias is not None
        table = source_lm.get_input_embeddings().weight
        if table.shape[0] < self.first:
            raise ConfigError(SETTING, f"the source model has {table.shape[0]} rows but its tokenizer "
                              f"{self.first} tokens", "use the tokenizer saved with the source model")
        if self.tied != (tables.output is None):
            raise ConfigError(SETTING, "the source " + ("ties" if self.tied else "does not tie") + " its output "
                              "layer to its input table, the extended tables " + ("do not" if self.tied else "do"),
                              "rerun the initialisation of the new rows")
        if self.has_bias != (tables.bias is not None):
            raise ConfigError(SETTING, "the source's output layer " + ("has" if self.has_bias else "has no")
                              + " bias, the extended tables " + ("have none" if self.has_bias else "have one"),
                              "rerun the initialisation of the new rows")
        _check_source_rows("input table", tables.embeddings, table, self.first)
        total = tables.embeddings.shape[0]
        self.new_embeddings = nn.Parameter(tables.embeddings[self.first:].detach().clone().float())
        self.new_output = self.new_bias = None
        if tables.output is not None:
            _check_source_rows("output rows", tables.output, rows, self.first)
            if tables.output.shape[0] != total:
                raise ConfigError(SETTING, f"output rows {tuple(tables.output.shape)} and input table "
                                  f"{tuple(tables.embeddings.shape)} differ", "rerun the initialisation of the new rows")
            self.new_output = nn.Parameter(tables.output[self.first:].detach().clone().float())
        if tables.bias is not None:
            if tables.bias.shape != (total,) or not torch.equal(tables.bias[:self.first].to(bias.dtype),
                                                                 bias[:self.first].detach()):
                raise ConfigError(SETTING, f"the extended output bias {tuple(tables.bias.shape)} does not start "
                                  "with the source's", "rerun the initialisation of the new rows")
            self.new_bias = nn.Parameter(tables.bias[self.first:].detach().clone().float())

    @property
    def config(self):
        return self.lm.config

    @property
    def languages(self) -> list[str]:
        return list(self._languages)

    @property
    def vocab_size(self) -> int:
        return self.first + self.new_embeddings.shape[0]

    # --- the two parts of each vocabulary-sized tensor -------------------------------------

    def source_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The source's input rows, output rows and bias (views of its parameters, ``first`` rows)."""
        rows, bias, _ = output_layer(self.lm)
        table = self.lm.get_input_embeddings().weight
        return table[:self.first], rows[:self.first], None if bias is None else bias[:self.first]

    def new_rows(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The new tokens' input rows, output rows and bias."""
        return (self.new_embeddings, self.new_embeddings if self.tied else self.new_output, self.new_bias)

    def extended_tables(self) -> ForeignTables:
        """The whole vocabulary's tensors, source rows first (copies)."""
        (table, rows, bias), (new_table, new_rows, new_bias) = self.source_rows(), self.new_rows()
        return ForeignTables(torch.cat([table, new_table]), None if self.tied else torch.cat([rows, new_rows]),
                             None if bias is None else torch.cat([bias, new_bias]))

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Each token's input row from the part that holds it: no gradient reaches the other part."""
        source = F.embedding(input_ids.clamp(max=self.first - 1), self.lm.get_input_embeddings().weight)
        if not self.new_embeddings.shape[0]:
            return source
        new = F.embedding((input_ids - self.first).clamp(min=0), self.new_embeddings)
        return torch.where((input_ids >= self.first).unsqueeze(-1), new, source)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over the extended vocabulary for hidden states (any leading shape)."""
        (_, rows, bias), (_, new_rows, new_bias) = self.source_rows(), self.new_rows()
        return torch.cat([F.linear(hidden, rows, bias), F.linear(hidden, new_rows, new_bias)], dim=-1)

    # --- parameter groups (what staged training freezes and trains) ------------------------

    def blocks(self) -> nn.ModuleList:
        return transformer_blocks(self.lm)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role, named as the bilingual models': ``foreign_embeddings`` every row of
        the new tokens (input rows, and untied output rows and bias where the model has them),
        ``source_embeddings`` the source's input table (with its output rows when tied), ``head``
        the source's untied output rows (a tied source's untied copy too) and bias, ``encoder``
        the rest (blocks, final norm, learned positions), plus ``block:<i>`` per block. A stage of
        ``foreign_embeddings`` alone trains the new rows and leaves every source row as it is;
        ``lora`` the adapters once added (:meth:`add_adapters`), in no other group."""
        table = self.lm.get_input_embeddings().weight
        rows, bias, _ = output_layer(self.lm)
        head = ([] if self.tied else [rows]) + ([bias] if bias is not None else [])
        taken = {id(table)} | {id(param) for param in head}
        new = [param for param in (self.new_embeddings, self.new_output, self.new_bias) if param is not None]
        groups = {"encoder": [param for param in self.lm.parameters() if id(param) not in taken], "head": head,
                  "source_embeddings": [table], "foreign_embeddings": new}
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

    def forward(self, batches: Mapping[str, CausalBatch]) -> dict[str, torch.Tensor]:
        """Mean next-token cross-entropy per stream; the streams' windows go through the stack in
        one pass when their lengths agree."""
        keys = list(batches)
        lengths = {batches[key].input_ids.shape[1] for key in keys}
        groups = [keys] if len(lengths) == 1 else [[key] for key in keys]
        losses = {}
        for group in groups:
            ids = torch.cat([batches[key].input_ids for key in group])
            attention = torch.cat([batches[key].attention_mask for key in group])
            hidden = self.lm.base_model(inputs_embeds=self.embed(ids), attention_mask=attention).last_hidden_state
            for key, states in zip(group, torch.split(hidden, [batches[key].input_ids.shape[0] for key in group])):
                labels = batches[key].labels
                positions = labels != IGNORE_INDEX
                losses[key] = F.cross_entropy(self.logits(states[positions]).float(), labels[positions])
        return losses

    # --- export -----------------------------------------------------------------------------

    def export(self, tokenizer, out_dir: str | os.PathLike) -> None:
        """Save the model as one standard ``AutoModelForCausalLM`` directory of the source's
        architecture with the extended tokenizer: one table of the extended vocabulary size
        (output rows tied or not, bias or not, as the source), ``vocab_size`` and the special
        token ids of ``tokenizer``'s own BOS/EOS/PAD strings in its config (atomic)."""
        from transformers import AutoModelForCausalLM

        if len(tokenizer) > self.vocab_size:
            raise ConfigError(SETTING, f"the tokenizer has {len(tokenizer)} tokens, the model {self.vocab_size} rows",
                              "export with the extended tokenizer the model was initialised for")
        config = copy.deepcopy(self.lm.config)
        config.vocab_size = self.vocab_size
        ids = special_token_ids(tokenizer)
        for role in ("bos", "eos", "pad"):
            setattr(config, f"{role}_token_id", ids.get(role))
        rows, bias, _ = output_layer(self.lm)
        vocabulary = [self.lm.get_input_embeddings().weight, rows] + ([bias] if bias is not None else [])
        generation = getattr(self.lm, "generation_config", None)
        tables = self.extended_tables()

        def fill(exported):
            exported.get_input_embeddings().weight.copy_(tables.embeddings)
            head = exported.get_output_embeddings()
            if self.tied:
                head.weight = exported.get_input_embeddings().weight
            else:
                head.weight.copy_(tables.output)
            if tables.bias is not None:
                head.bias.copy_(tables.bias)
            if generation is not None:
                exported.generation_config = copy.deepcopy(generation)
                for role in ("bos", "eos", "pad"):
                    setattr(exported.generation_config, f"{role}_token_id", ids.get(role))

        export_side(self.lm, config, vocabulary, lambda config: AutoModelForCausalLM.from_config(
            config, dtype=torch.float32), fill, tokenizer, out_dir, "extended")

    def export_language(self, lang: str, tokenizer, out_dir: str | os.PathLike) -> None:
        """Every language's side is the one model (:meth:`export`)."""
        self.export(tokenizer, out_dir)
