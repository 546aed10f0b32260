"""The bilingual causal LM: one shared stack of transformer blocks over the vocabularies of two
languages, next-token loss on packed windows of each language. One class serves both kinds of
vocabulary (``variants.<variant>.vocabulary``):

``replace``  one input table and one output layer per language. The source checkpoint (any Hugging
             Face causal LM: ramen.modeling.sources) supplies the blocks, the final norm and the
             English table and output layer. Each foreign language adds its own input table and,
             where the source does not tie them, its own output rows; a bias where the source's
             output layer has one.
``extend``   one vocabulary, the source's (ids below ``first``) followed by new foreign tokens
             (ramen.vocab.extend), that every language reads and writes. The source's rows stay
             the source model's own parameters, the new rows are parameters of their own, so a
             training stage can move the new rows alone: the source rows get no gradient, do not
             move and hold no optimiser state (ramen.training.staging). The lookup takes each
             token's row from the part that holds it; the logits are those of the parts side by
             side. Extended tables with output rows of their own for a tied source (a rule of
             their own for the new output rows: ramen.initializers.extension) untie the whole
             head: the source's output rows become a parameter of their own, a copy of its input
             rows at the start, and the export is untied.

The input rows are looked up here and the logits computed here, so what the source's own forward
does around its backbone is done here too, as its config says (ramen.modeling.layouts: Gemma's
sqrt(d)-scaled embeddings, Gemma 2/3's soft-capped logits); a source that does something else is
refused. Logits are computed only at positions with a target (no padding), a chunk of them at a
time (:meth:`BilingualCausalLM.next_token_loss`). Each language side exports as a
standard ``AutoModelForCausalLM`` directory of the source's architecture (an extended vocabulary:
one table of the extended size, the same model for every language), with special token ids taken
from that side's own tokenizer by string.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from ramen.errors import ConfigError
from ramen.modeling import lora
from ramen.modeling.export import export_side
from ramen.modeling.sources import output_layer, source_layout, transformer_blocks

IGNORE_INDEX = -100
EXTEND_SETTING = "variants.<variant>.vocabulary"
EXTEND_REMEDY = "rerun the initialisation of the new rows"
# The causal loss computes logits a chunk of positions at a time, each chunk's fp32 logits at most
# this many bytes (a 144k-token vocabulary: 233 positions): an 8B source's whole-vocabulary logits
# at 2,048 positions hold GiBs per language. A chunk's matmul is still large enough to keep a GPU
# busy. ramen.training.memory plans the same chunk (no torch there).
LOGIT_CHUNK_BYTES = 128 * 2 ** 20


def logit_chunk(vocabulary: int) -> int:
    """Positions per chunk of the causal loss for a vocabulary of ``vocabulary`` rows."""
    return max(1, LOGIT_CHUNK_BYTES // (4 * vocabulary))


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden`` against ``labels`` over the logits ``F.linear(hidden, W, b)``
    of the vocabulary's parts side by side (``head``: W, b of each part, b None: no bias), soft-capped
    at ``cap`` (None: not), ``chunk`` positions at a time; under autocast the matmuls and the cap at
    its precision, as ``BilingualCausalLM.logits`` under autocast.

    Forward computes each chunk's gradients as well and keeps only them: the weights' and biases'
    added in place into one fp32 buffer each, the states' into their rows. A chunk's logits die
    with it and nothing is recomputed (checkpointing each chunk instead recomputes the head and sums
    a weight-sized gradient per chunk, out of place: several copies of the output rows' gradient)."""

    @staticmethod
    def forward(ctx, hidden, labels, chunk, cap, *head):
        device = hidden.device.type
        cast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        wanted = ctx.needs_input_grad
        grad_hidden = torch.zeros_like(hidden) if wanted[0] else None
        grad_head = [torch.zeros_like(t) if t is not None and wanted[4 + i] else None for i, t in enumerate(head)]
        head = [t if t is None or cast is None else t.to(cast) for t in head]
        weights, biases = head[0::2], head[1::2]
        sizes = [weight.shape[0] for weight in weights]
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(device, enabled=False):
            for start in range(0, len(labels), chunk):
                states, targets = hidden[start:start + chunk], labels[start:start + chunk]
                inputs = states if cast is None else states.to(cast)
                logits = [F.linear(inputs, w, b) for w, b in zip(weights, biases)]
                logits = logits[0] if len(logits) == 1 else torch.cat(logits, dim=-1)
                if cap is not None:
                    logits = torch.tanh(logits / cap) * cap
                grad = torch.log_softmax(logits.float(), dim=-1)
                rows = torch.arange(len(targets), device=hidden.device)
                total -= grad[rows, targets].sum()
                grad.exp_()[rows, targets] -= 1  # d(sum of -log p)/d logits: softmax - one-hot
                if cap is not None:  # d(cap tanh(x / cap))/dx = 1 - (capped / cap)^2
                    grad.mul_(1 - (logits.float() / cap) ** 2)
                del logits
                grad_bias = grad
                if cast is not None:
                    grad = grad.to(cast)
                for index, part in enumerate(torch.split(grad, sizes, dim=-1)):
                    if grad_hidden is not None:
                        grad_hidden[start:start + chunk] += part @ weights[index]
                    if grad_head[2 * index] is not None:  # in place: no weight-sized temporary in fp32
                        if cast is None:
                            grad_head[2 * index].addmm_(part.t(), inputs)
                        else:
                            grad_head[2 * index] += part.t() @ inputs
                    if grad_head[2 * index + 1] is not None:
                        offset = sum(sizes[:index])
                        grad_head[2 * index + 1] += grad_bias[:, offset:offset + sizes[index]].sum(0)
        ctx.grads = (grad_hidden, grad_head)
        ctx.count = len(labels)
        return total / len(labels)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output):
        grad_hidden, grad_head = ctx.grads
        del ctx.grads
        scale = grad_output / ctx.count
        for grad in [grad_hidden, *grad_head]:
            if grad is not None:
                grad.mul_(scale.to(grad.dtype))
        return grad_hidden, None, None, None, *grad_head


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


def untie_output_layer(model: nn.Module) -> None:
    """Give a tied causal LM output rows of their own, a copy of its input table; its config says so,
    so that an export of it is untied too."""
    head = model.get_output_embeddings()
    head.weight = nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.config.tie_word_embeddings = False


def _check_source_rows(name: str, given: torch.Tensor, source: torch.Tensor, first: int) -> None:
    if given.shape[0] < first or given.shape[1:] != source.shape[1:]:
        raise ConfigError(EXTEND_SETTING, f"the extended {name} has shape {tuple(given.shape)}, the source's first "
                          f"{first} rows have {tuple(source[:first].shape)}", EXTEND_REMEDY)
    if not torch.equal(given[:first].to(source.dtype), source[:first].detach()):
        raise ConfigError(EXTEND_SETTING, f"the first {first} rows of the extended {name} are not the source's",
                          "initialise the new rows from this source model (ramen.initializers.extension)")


class BilingualCausalLM(nn.Module):
    """Shared transformer blocks over a vocabulary per language (``replace``: the constructor) or
    one extended vocabulary (``extend``: :meth:`extended`)."""

    def __init__(self, source_lm: nn.Module, source_lang: str, foreign: Mapping[str, ForeignTables] | None = None):
        super().__init__()
        self.source_lang = source_lang
        self.lm = source_lm
        # What the source's own forward does besides its backbone (ramen.modeling.layouts): the
        # lookup and the logits here are done by hand, so they must do it too.
        self.layout = source_layout(source_lm)
        _, bias, self.tied = output_layer(source_lm)
        self.has_bias = bias is not None
        # replace: each foreign language's tables (add_language).
        self.foreign_embeddings = nn.ModuleDict()
        self.foreign_output = nn.ParameterDict()
        self.foreign_bias = nn.ParameterDict()
        # extend: the rows after the source's ``first`` and the streams that read them (extended).
        self.first: int | None = None
        self._streams: list[str] = []
        for name in ("new_embeddings", "new_output", "new_bias"):
            self.register_parameter(name, None)
        for lang, tables in (foreign or {}).items():
            self.add_language(lang, tables)

    @classmethod
    def extended(cls, source_lm: nn.Module, tables: ForeignTables, first: int,
                 languages: Sequence[str] = ("en", "xx")) -> BilingualCausalLM:
        """A causal LM whose vocabulary is the source's (ids below ``first``) plus new rows.

        ``tables``: the extended input table, output rows (None: tied, as the source; given for a
        tied source: the head is untied) and output bias (None: the source has none), each with the
        source's rows first, unchanged (checked). ``languages``: the text streams it trains on
        (e.g. English and the foreign language); they all read the one vocabulary.
        """
        if tables.output is not None and output_layer(source_lm)[2]:
            untie_output_layer(source_lm)
        model = cls(source_lm, languages[0])
        model.first, model._streams = int(first), list(languages)
        table = source_lm.get_input_embeddings().weight
        if table.shape[0] < model.first:
            raise ConfigError(EXTEND_SETTING, f"the source model has {table.shape[0]} rows but its tokenizer "
                              f"{model.first} tokens", "use the tokenizer saved with the source model")
        model._check_layout(tables, EXTEND_SETTING, "the extended tables", EXTEND_REMEDY)
        rows, bias, _ = output_layer(source_lm)
        for name, given, source in (("input table", tables.embeddings, table), ("output rows", tables.output, rows),
                                    ("output bias", tables.bias, bias)):
            if given is not None:
                _check_source_rows(name, given, source, model.first)
        model.new_embeddings = nn.Parameter(tables.embeddings[model.first:].detach().clone().float())
        if tables.output is not None:
            model.new_output = nn.Parameter(tables.output[model.first:].detach().clone().float())
        if tables.bias is not None:
            model.new_bias = nn.Parameter(tables.bias[model.first:].detach().clone().float())
        return model

    @property
    def config(self):
        return self.lm.config

    @property
    def extends(self) -> bool:
        """Whether the vocabulary is the source's extended (one for every language)."""
        return self.first is not None

    @property
    def languages(self) -> list[str]:
        if self.extends:
            return list(self._streams)
        return [self.source_lang, *self.foreign_embeddings.keys()]

    def _check_layout(self, tables: ForeignTables, setting: str, what: str, remedy: str) -> None:
        """Raise unless ``tables`` has the model's layout: the hidden size, output rows exactly where
        the head is untied, a bias exactly where the source's output layer has one, one row count."""
        hidden = self.lm.config.hidden_size
        rows = tables.embeddings.shape[0]
        if tables.embeddings.dim() != 2 or tables.embeddings.shape[1] != hidden:
            raise ConfigError(setting, f"embeddings {tuple(tables.embeddings.shape)} do not fit hidden size {hidden}")
        if self.tied != (tables.output is None):
            raise ConfigError(setting, "the source " + ("ties" if self.tied else "does not tie") + " its output "
                              f"layer to its input table, {what} " + ("do not" if self.tied else "do"), remedy)
        if self.has_bias != (tables.bias is not None):
            raise ConfigError(setting, "the source's output layer " + ("has" if self.has_bias else "has no")
                              + f" bias, {what} " + ("have none" if self.has_bias else "have one"), remedy)
        if tables.output is not None and tables.output.shape != tables.embeddings.shape:
            raise ConfigError(setting, f"output rows {tuple(tables.output.shape)} and embeddings "
                              f"{tuple(tables.embeddings.shape)} differ", remedy)
        if tables.bias is not None and tables.bias.shape != (rows,):
            raise ConfigError(setting, f"bias {tuple(tables.bias.shape)} does not fit {rows} rows", remedy)

    def add_language(self, lang: str, tables: ForeignTables) -> None:
        """Add ``lang``'s tables (a replaced vocabulary); each must match the source's layout (tied or
        not, bias or not)."""
        if self.extends:
            raise ValueError("an extended vocabulary is every language's: it takes no table of its own")
        self._check_layout(tables, "variants.<variant>.init", f"{lang}'s initial tables",
                           "rerun the init rule for this language")
        self.foreign_embeddings[lang] = nn.Embedding.from_pretrained(tables.embeddings.detach().clone().float(),
                                                                     freeze=False)
        if tables.output is not None:
            self.foreign_output[lang] = nn.Parameter(tables.output.detach().clone().float())
        if tables.bias is not None:
            self.foreign_bias[lang] = nn.Parameter(tables.bias.detach().clone().float())

    # --- per-language tables ----------------------------------------------------------------

    def vocabulary_parts(self, lang: str) -> list[ForeignTables]:
        """``lang``'s vocabulary-sized tensors in id order, in the parts that hold them (``output``
        None: tied): a replaced vocabulary's own, one part; an extended one's source rows (views of
        the source's parameters, ``first`` rows), then its new rows."""
        table = self.lm.get_input_embeddings().weight
        rows, bias, _ = output_layer(self.lm)
        if self.extends:
            first = self.first
            return [ForeignTables(table[:first], None if self.tied else rows[:first],
                                  None if bias is None else bias[:first]),
                    ForeignTables(self.new_embeddings, self.new_output, self.new_bias)]
        if lang == self.source_lang:
            return [ForeignTables(table, None if self.tied else rows, bias)]
        return [ForeignTables(self.foreign_embeddings[lang].weight, self.foreign_output.get(lang),
                              self.foreign_bias.get(lang))]

    def tables(self, lang: str) -> ForeignTables:
        """``lang``'s whole vocabulary's tensors: a replaced vocabulary's parameters, an extended
        one's parts joined (copies)."""
        parts = self.vocabulary_parts(lang)
        if len(parts) == 1:
            return parts[0]
        return ForeignTables(*(None if pieces[0] is None else torch.cat(pieces) for pieces in
                               zip(*((part.embeddings, part.output, part.bias) for part in parts))))

    def vocabulary_size(self, lang: str) -> int:
        return sum(part.embeddings.shape[0] for part in self.vocabulary_parts(lang))

    def input_embeddings(self, lang: str) -> nn.Embedding:
        """A replaced vocabulary's input table of ``lang``."""
        return self.lm.get_input_embeddings() if lang == self.source_lang else self.foreign_embeddings[lang]

    def _scaled(self, rows: torch.Tensor) -> torch.Tensor:
        """Input rows as the source's embedding module hands them on (Gemma: times sqrt(d), in the
        table's dtype, as its module does); the source's module is never called, so every table
        of every language is scaled alike."""
        if self.layout.embed_scale is None:
            return rows
        return rows * torch.tensor(self.layout.embed_scale, device=rows.device).to(rows.dtype)

    def embed(self, ids: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The input rows of each language's ids (same length), joined along the batch."""
        if not self.extends:
            rows = [F.embedding(lang_ids, self.input_embeddings(lang).weight, self.input_embeddings(lang).padding_idx)
                    for lang, lang_ids in ids.items()]
            return self._scaled(torch.cat(rows))
        # One lookup in the one vocabulary, each token's row from the part that holds it: no
        # gradient reaches the other part.
        ids = torch.cat(list(ids.values()))
        table = self.lm.get_input_embeddings()
        padding = table.padding_idx if table.padding_idx is not None and table.padding_idx < self.first else None
        source = F.embedding(ids.clamp(max=self.first - 1), table.weight, padding)
        if not self.new_embeddings.shape[0]:
            return self._scaled(source)
        new = F.embedding((ids - self.first).clamp(min=0), self.new_embeddings)
        return self._scaled(torch.where((ids >= self.first).unsqueeze(-1), new, source))

    # --- parameter groups (what staged training freezes and trains) ------------------------

    def blocks(self) -> nn.ModuleList:
        return transformer_blocks(self.lm)

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role, named as the masked-LM model's: ``encoder`` the shared stack (blocks,
        final norm, learned positions), ``head`` the untied output rows (a tied source's untied copy
        too) and biases of the source and of each replaced vocabulary, ``source_embeddings`` the
        source's input table (with its output rows when tied), ``foreign_embeddings`` each replaced
        vocabulary's input table (with its output rows when tied) or every row of an extension's new
        tokens (input rows, and untied output rows and bias where the model has them), plus
        ``block:<i>`` for each block (``bottom:k``/``top:k`` select them by count), and ``lora`` the
        adapters once added (:meth:`add_adapters`), in no other group. A stage of
        ``foreign_embeddings`` alone trains the new rows and leaves every source row as it is."""
        table = self.lm.get_input_embeddings().weight
        rows, bias, _ = output_layer(self.lm)
        head = [] if self.tied else [rows, *self.foreign_output.values()]
        if bias is not None:
            head += [bias, *self.foreign_bias.values()]
        taken = {id(table)} | {id(param) for param in head}
        new = [param for param in (self.new_embeddings, self.new_output, self.new_bias) if param is not None]
        groups = {"encoder": [param for param in self.lm.parameters() if id(param) not in taken], "head": head,
                  "source_embeddings": [table],
                  "foreign_embeddings": [e.weight for e in self.foreign_embeddings.values()] + new}
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

    def _passes(self, batches: Mapping[str, CausalBatch]) -> Iterator[dict[str, torch.Tensor]]:
        """Every language's windows through the shared stack, in one pass when their lengths agree:
        each pass's hidden states by language."""
        langs = list(batches)
        lengths = {batches[lang].input_ids.shape[1] for lang in langs}
        for group in [langs] if len(lengths) == 1 else [[lang] for lang in langs]:
            embeds = self.embed({lang: batches[lang].input_ids for lang in group})
            attention = torch.cat([batches[lang].attention_mask for lang in group])
            out = self.lm.base_model(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
            yield dict(zip(group, torch.split(out, [batches[lang].input_ids.shape[0] for lang in group])))

    def hidden_states(self, batches: Mapping[str, CausalBatch]) -> dict[str, torch.Tensor]:
        return {lang: states for hidden in self._passes(batches) for lang, states in hidden.items()}

    def head(self, lang: str) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """The output rows and bias (None: none) of each part of ``lang``'s vocabulary, in id order."""
        return [(part.embeddings if part.output is None else part.output, part.bias)
                for part in self.vocabulary_parts(lang)]

    def logits(self, lang: str, hidden: torch.Tensor) -> torch.Tensor:
        """Logits over ``lang``'s vocabulary for hidden states (any leading shape)."""
        logits = [F.linear(hidden, rows, bias) for rows, bias in self.head(lang)]
        logits = logits[0] if len(logits) == 1 else torch.cat(logits, dim=-1)
        cap = self.layout.softcap
        if cap is not None:  # as the source's forward caps them (Gemma 2/3: final_logit_softcapping)
            logits = torch.tanh(logits / cap) * cap
        return logits

    def forward(self, batches: Mapping[str, CausalBatch]) -> dict[str, torch.Tensor]:
        """Mean next-token cross-entropy per language."""
        losses = {}
        for hidden in self._passes(batches):
            for lang, states in hidden.items():
                labels = batches[lang].labels
                positions = labels != IGNORE_INDEX
                losses[lang] = self.next_token_loss(lang, states[positions], labels[positions])
        return losses

    def next_token_loss(self, lang: str, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy of ``hidden`` (targets, d) against ``labels`` over ``lang``'s vocabulary,
        :func:`logit_chunk` positions at a time (:class:`ChunkedCrossEntropy`): one chunk's logits
        exist at a time, in forward and backward."""
        if not len(labels):  # the mean of no targets (NaN), as cross_entropy has it
            return F.cross_entropy(self.logits(lang, hidden).float(), labels)
        size = logit_chunk(self.vocabulary_size(lang))
        head = self.head(lang)
        tensors = [tensor for pair in head for tensor in pair]
        if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in [hidden, *tensors]):
            return ChunkedCrossEntropy.apply(hidden, labels, size, self.layout.softcap, *tensors)
        total = sum(F.cross_entropy(self.logits(lang, states).float(), targets, reduction="sum")
                    for states, targets in zip(hidden.split(size), labels.split(size)))
        return total / len(labels)

    # --- export -----------------------------------------------------------------------------

    def export_language(self, lang: str, tokenizer, out_dir: str | os.PathLike) -> None:
        """Save ``lang``'s side as a standard ``AutoModelForCausalLM`` directory with its tokenizer
        (atomic).

        The architecture is the source's, its table ``lang``'s vocabulary (an extended one: one
        table of the extended size, output rows tied or not, bias or not, as the source); special
        token ids are those of ``tokenizer``'s own BOS/EOS/PAD strings (a new vocabulary numbers
        them differently from the source's).
        """
        from transformers import AutoModelForCausalLM

        tables = self.tables(lang)
        rows = tables.embeddings.shape[0]
        if self.extends and len(tokenizer) > rows:
            raise ConfigError(EXTEND_SETTING, f"the tokenizer has {len(tokenizer)} tokens, the model {rows} rows",
                              "export with the extended tokenizer the model was initialised for")
        config = copy.deepcopy(self.lm.config)
        config.vocab_size = rows
        ids = special_token_ids(tokenizer)
        for role in ("bos", "eos", "pad"):
            setattr(config, f"{role}_token_id", ids.get(role))
        output_rows, bias, _ = output_layer(self.lm)
        vocabulary = [self.lm.get_input_embeddings().weight, output_rows] + ([bias] if bias is not None else [])
        generation = getattr(self.lm, "generation_config", None)

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
