"""The bilingual masked LM: one shared encoder, one embedding table and tied output layer per language.

The source checkpoint (any Hugging Face masked LM of the BERT or RoBERTa family)
supplies the encoder, the MLM head transform and the English table. Each foreign
language adds its own input embeddings; its output layer is tied to them and has
its own bias. Logits are computed only at masked positions: the full
vocabulary-sized output at every position dominates a CPU step otherwise.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ramen.errors import ConfigError
from ramen.modeling import lora
from ramen.modeling.architectures import register_architectures, save_pretrained_with_code
from ramen.modeling.export import export_side

IGNORE_INDEX = -100


class RobertaHeadTransform(nn.Module):
    """RoBERTa's LM head without its decoder: dense, GELU, LayerNorm."""

    def __init__(self, lm_head: nn.Module):
        super().__init__()
        self.dense = lm_head.dense
        self.layer_norm = lm_head.layer_norm

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(F.gelu(self.dense(hidden)))


def split_mlm_head(mlm: nn.Module) -> tuple[nn.Module, nn.Parameter]:
    """The head's position-wise transform and its output bias, for the supported families."""
    if hasattr(mlm, "cls") and hasattr(mlm.cls, "predictions"):
        return mlm.cls.predictions.transform, mlm.cls.predictions.bias
    if hasattr(mlm, "lm_head") and hasattr(mlm.lm_head, "dense"):
        return RobertaHeadTransform(mlm.lm_head), mlm.lm_head.bias
    raise ConfigError("source.model", f"unsupported masked-LM head in {type(mlm).__name__}",
                      "use a BERT- or RoBERTa-family masked LM checkpoint")


def load_source_mlm(model_dir: str | os.PathLike) -> nn.Module:
    """Load a masked LM from a local directory; a missing MLM head is freshly initialised."""
    from transformers import AutoModelForMaskedLM
    from transformers.utils import logging as hf_logging

    register_architectures()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # a missing head is expected for encoder-only checkpoints
    try:
        return AutoModelForMaskedLM.from_pretrained(model_dir, attn_implementation="sdpa")
    finally:
        hf_logging.set_verbosity(verbosity)


@dataclass
class MaskedBatch:
    input_ids: torch.Tensor  # (batch, length)
    attention_mask: torch.Tensor  # (batch, length)
    labels: torch.Tensor  # (batch, length), IGNORE_INDEX where not masked

    def apply(self, function) -> "MaskedBatch":
        """The same batch with ``function`` applied to every tensor (moving, pinning, sharding)."""
        return MaskedBatch(function(self.input_ids), function(self.attention_mask), function(self.labels))

    def targets(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())

    def tokens(self) -> int:
        return int(self.attention_mask.sum())


class BilingualMaskedLM(nn.Module):
    """Shared encoder over per-language embedding tables, with tied per-language output layers."""

    def __init__(self, source_mlm: nn.Module, source_lang: str,
                 foreign: Mapping[str, tuple[torch.Tensor, torch.Tensor]] | None = None):
        super().__init__()
        self.source_lang = source_lang
        self.mlm = source_mlm
        self.head_transform, self._source_bias = split_mlm_head(source_mlm)
        self.foreign_embeddings = nn.ModuleDict()
        self.foreign_bias = nn.ParameterDict()
        for lang, (embeddings, bias) in (foreign or {}).items():
            self.add_language(lang, embeddings, bias)

    @property
    def languages(self) -> list[str]:
        return [self.source_lang, *self.foreign_embeddings.keys()]

    def add_language(self, lang: str, embeddings: torch.Tensor, bias: torch.Tensor) -> None:
        hidden = self.mlm.config.hidden_size
        if embeddings.dim() != 2 or embeddings.shape[1] != hidden or bias.shape != embeddings.shape[:1]:
            raise ConfigError("variants.<variant>.init", f"{lang}'s initial embeddings {tuple(embeddings.shape)} and "
                              f"bias {tuple(bias.shape)} do not fit hidden size {hidden}",
                              "rerun the init rule for this language")
        self.foreign_embeddings[lang] = nn.Embedding.from_pretrained(embeddings.detach().clone().float(),
                                                                     freeze=False)
        self.foreign_bias[lang] = nn.Parameter(bias.detach().clone().float())

    def input_embeddings(self, lang: str) -> nn.Embedding:
        if lang == self.source_lang:
            return self.mlm.get_input_embeddings()
        return self.foreign_embeddings[lang]

    def output_bias(self, lang: str) -> nn.Parameter:
        return self._source_bias if lang == self.source_lang else self.foreign_bias[lang]

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters by role, so training can freeze or train each role; ``lora`` the adapters once
        added (:meth:`add_adapters`), in no other group."""
        source_table = self.mlm.get_input_embeddings().weight
        head = [p for p in self.head_transform.parameters()]
        head_ids = {id(p) for p in head} | {id(self._source_bias)}
        encoder = [p for p in self.mlm.base_model.parameters()
                   if p is not source_table and id(p) not in head_ids]
        return lora.adapter_groups({
            "encoder": encoder,
            "head": head + [self._source_bias] + list(self.foreign_bias.values()),
            "source_embeddings": [source_table],
            "foreign_embeddings": [e.weight for e in self.foreign_embeddings.values()],
        }, self.mlm)

    def add_adapters(self, *, rank: int, alpha: float, dropout: float, target_modules: Sequence[str],
                     seed: int) -> list[str]:
        """LoRA adapters on the encoder layers' linear layers that ``target_modules`` names
        (ramen.modeling.lora; the head's transform keeps none): the group ``lora``, merged into the
        encoder on export and saved beside it."""
        # BERT and RoBERTa (ramen-bert too) keep their layers in encoder.layer.
        return lora.add_adapters(self.mlm, self.mlm.base_model.encoder.layer, rank=rank, alpha=alpha,
                                 dropout=dropout, target_modules=target_modules, seed=seed)

    def encode(self, batches: Mapping[str, MaskedBatch]) -> dict[str, torch.Tensor]:
        """Run all languages' sequences through the shared encoder in one pass."""
        langs = list(batches)
        embeds = torch.cat([self.input_embeddings(lang)(batches[lang].input_ids) for lang in langs])
        attention = torch.cat([batches[lang].attention_mask for lang in langs])
        hidden = self.mlm.base_model(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
        sizes = [batches[lang].input_ids.shape[0] for lang in langs]
        return dict(zip(langs, torch.split(hidden, sizes)))

    def masked_logits(self, lang: str, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits over ``lang``'s vocabulary at the selected positions only."""
        transformed = self.head_transform(hidden[positions])
        return F.linear(transformed, self.input_embeddings(lang).weight, self.output_bias(lang))

    def forward(self, batches: Mapping[str, MaskedBatch]) -> dict[str, torch.Tensor]:
        """Mean masked-token cross-entropy per language."""
        hidden = self.encode(batches)
        losses = {}
        for lang, batch in batches.items():
            positions = batch.labels != IGNORE_INDEX
            logits = self.masked_logits(lang, hidden[lang], positions)
            losses[lang] = F.cross_entropy(logits.float(), batch.labels[positions])
        return losses

    def export_language(self, lang: str, tokenizer, out_dir: str | os.PathLike) -> None:
        """Save ``lang``'s side as a standard Hugging Face masked-LM directory with its tokenizer (a
        ``ramen-bert`` model carries its modeling file: ramen.modeling.architectures)."""
        from transformers import AutoModelForMaskedLM

        embeddings = self.input_embeddings(lang).weight.detach()
        bias = self.output_bias(lang).detach()
        config = copy.deepcopy(self.mlm.config)
        config.vocab_size = embeddings.shape[0]
        config.pad_token_id = tokenizer.pad_token_id
        for attribute in ("bos_token_id", "eos_token_id"):
            token = getattr(tokenizer, attribute.replace("_id", ""), None)
            if token is not None:
                setattr(config, attribute, tokenizer.convert_tokens_to_ids(token))
        config.architectures = [type(self.mlm).__name__]
        register_architectures()

        def fill(exported):
            exported.get_input_embeddings().weight.copy_(embeddings)
            exported.get_output_embeddings().weight = exported.get_input_embeddings().weight
            _, exported_bias = split_mlm_head(exported)
            exported_bias.copy_(bias)
            if getattr(exported.get_output_embeddings(), "bias", None) is not None:
                exported.get_output_embeddings().bias = exported_bias

        export_side(self.mlm, config, [self.mlm.get_input_embeddings().weight, self._source_bias],
                    AutoModelForMaskedLM.from_config, fill, tokenizer, out_dir, lang, save=save_pretrained_with_code)
