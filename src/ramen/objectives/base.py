"""What every training objective shares: settings, translation-pair batches, batch mixing,
language embeddings, the encoder passes and the export of a trained side.

An objective is the module bilingual training (ramen.training.trainer.train) optimises and
checkpoints: it holds the bilingual model and any parameters of its own
(language embeddings, cross-lingual attention, a generator), draws each step's
batches and returns one loss per stream, and exports each language's side. Streams are
the monolingual languages and, for objectives on translation pairs, ``pair_<lang>`` for
each side of a pair. RAMEN's plain masked-LM is the objective ``mlm`` (ramen.objectives.mlm).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ramen.vocab.encode import TokenStream
from ramen.errors import ConfigError
from ramen.modeling.bilingual import IGNORE_INDEX, BilingualMaskedLM, MaskedBatch
from ramen.objectives import uses_pairs
from ramen.objectives.contract import TrainingObjective
from ramen.objectives.focal import AdaptiveFocal, FocalSettings
from ramen.training.batches import make_batch, mask_tokens, step_rng
from ramen.glue import settings_from

log = logging.getLogger(__name__)

PAIRS = "pairs"  # the batch key of translation pairs
PAIR_STREAM = 1000  # RNG stream offset of pair batches, apart from the languages' streams


@dataclass
class RtdSettings:
    weight: float = 50.0  # lambda of L_G + lambda * L_D
    generator_layers: int | None = None  # None: a third of the discriminator's layers (at least one)
    rescale_init: bool = False  # scale each generator layer's output projections by 1/sqrt(2l)


@dataclass
class RelativePositionSettings:
    gated: bool = False  # XLM-E's gated relative position bias in every self-attention
    buckets: int = 32  # T5 buckets of the relative distance, half per direction
    max_distance: int = 128  # distances from here on share the last bucket

    def __post_init__(self):
        if self.buckets < 4 or self.buckets % 2:
            raise ConfigError("objectives.relative_position.buckets", f"{self.buckets} buckets",
                              "give an even number of at least 4 (half per direction, a quarter exact)")
        if self.max_distance <= self.buckets // 4:
            raise ConfigError("objectives.relative_position.max_distance", f"{self.max_distance} is not beyond "
                              f"the {self.buckets // 4} exact distances", "give a larger max_distance")


@dataclass
class ObjectiveSettings:
    language_embeddings: bool = True  # for objectives on translation pairs
    sampling_alpha: float | None = None  # monolingual batch shares p ~ m^alpha (None: equal)
    source_share: float | None = None  # the source language's share of a monolingual batch (None: as above)
    decomposed_share: bool = False  # DA-share: CA reuses the layer's FFN and LayerNorms
    focal: FocalSettings = field(default_factory=FocalSettings)
    rtd: RtdSettings = field(default_factory=RtdSettings)
    relative_position: RelativePositionSettings = field(default_factory=RelativePositionSettings)

    @classmethod
    def from_config(cls, values: Mapping, setting: str = "objectives") -> "ObjectiveSettings":
        """The settings of the ``objectives`` section, or of a variant's overrides at ``setting``
        (the workflow's one parser, :func:`ramen.glue.settings_from`)."""
        return settings_from(cls, values, setting)


@dataclass
class BatchShape:
    """The training settings that shape batches (from ramen.training.trainer.TrainSettings)."""

    @classmethod
    def of(cls, settings) -> "BatchShape":
        return cls(settings.batch_size, settings.seq_len, settings.mask_prob, settings.seed,
                   settings.grad_accumulation)

    batch_size: int
    seq_len: int
    mask_prob: float
    seed: int
    grad_accumulation: int = 1


@dataclass
class PairBatch:
    """Translation pairs: each side a [CLS] sentence [SEP] batch of its own vocabulary, row i with row i."""

    source: MaskedBatch
    foreign: MaskedBatch

    def apply(self, function) -> "PairBatch":
        return PairBatch(self.source.apply(function), self.foreign.apply(function))

    def targets(self) -> int:
        return self.source.targets() + self.foreign.targets()

    def tokens(self) -> int:
        return self.source.tokens() + self.foreign.tokens()


@dataclass
class PairedStreams:
    """Line-aligned encoded translation pairs: sentence i of ``source`` translates sentence i of ``foreign``."""

    source: TokenStream
    foreign: TokenStream

    def __post_init__(self):
        if self.source.num_sentences != self.foreign.num_sentences:
            raise ConfigError("parallel", f"{self.source.num_sentences} source but {self.foreign.num_sentences} "
                              "foreign sentences in the encoded pairs", "rerun the encode_pairs rule")


def sentence_batch(stream: TokenStream, rows: np.ndarray, special, rng: np.random.Generator,
                   max_len: int, mask_prob: float) -> MaskedBatch:
    """[CLS] sentence [SEP] for the chosen sentences, cut to ``max_len``, padded to the longest, masked."""
    bodies = [stream.ids[stream.offsets[row]:stream.offsets[row + 1]][:max_len - 2] for row in rows]
    length = max(len(body) for body in bodies) + 2
    input_ids = np.full((len(rows), length), special.pad, dtype=np.int64)
    maskable = np.zeros((len(rows), length), dtype=bool)
    attention = np.zeros((len(rows), length), dtype=np.int64)
    for index, body in enumerate(bodies):
        input_ids[index, 0] = special.cls
        input_ids[index, 1:1 + len(body)] = body
        input_ids[index, 1 + len(body)] = special.sep
        maskable[index, 1:1 + len(body)] = True
        attention[index, :2 + len(body)] = 1
    masked, labels = mask_tokens(input_ids, maskable, special, rng, mask_prob)
    return MaskedBatch(torch.from_numpy(masked), torch.from_numpy(attention), torch.from_numpy(labels))


def make_pair_batch(pairs: PairedStreams, specials: tuple, rng: np.random.Generator, count: int,
                    seq_len: int, mask_prob: float) -> PairBatch:
    """``count`` random translation pairs, each side at most ``seq_len`` tokens, masked on both sides."""
    rows = rng.integers(0, pairs.source.num_sentences, size=count)
    return PairBatch(sentence_batch(pairs.source, rows, specials[0], rng, seq_len, mask_prob),
                     sentence_batch(pairs.foreign, rows, specials[1], rng, seq_len, mask_prob))


def language_shares(sizes: Mapping[str, int], total: int, alpha: float | None,
                    source_share: float | None = None) -> dict[str, int]:
    """Sequences per language in a monolingual batch of ``total``: equal, or p ~ m^alpha (XLM-E), or
    ``source_share`` for the first language (the source's) and the rest shared equally; by largest
    remainder, at least one each."""
    langs = list(sizes)
    if source_share is not None and len(langs) > 1:
        weights = np.asarray([source_share] + [(1 - source_share) / (len(langs) - 1)] * (len(langs) - 1))
    elif alpha is None:
        weights = np.ones(len(langs))
    else:
        weights = np.asarray([float(sizes[lang]) for lang in langs]) ** alpha
    exact = total * weights / weights.sum()
    counts = np.maximum(np.floor(exact).astype(int), 1)
    for index in np.argsort(-(exact - np.floor(exact)), kind="stable"):
        if counts.sum() >= total:
            break
        counts[index] += 1
    return dict(zip(langs, counts.tolist()))


class Objective(TrainingObjective):
    """Masked-LM losses over monolingual batches and, when ``uses_pairs``, translation-pair batches.

    Monolingual and translation batches alternate (Guo et al., §4.2.1): odd steps
    train on monolingual text, even steps on translation pairs.
    """

    name = "base"

    @property
    def uses_pairs(self) -> bool:
        return uses_pairs(self.name)

    def __init__(self, model: BilingualMaskedLM, streams: Mapping[str, TokenStream], specials: Mapping,
                 shape: BatchShape, settings: ObjectiveSettings, pairs: PairedStreams | None = None):
        super().__init__()
        if streams and self.uses_pairs and pairs is None:
            raise ConfigError("variants.*.objective", f"objective '{self.name}' trains on translation pairs "
                              "but none were given", "configure `parallel` for this language")
        self.model = model
        self.streams, self.specials, self.shape, self.settings = dict(streams), dict(specials), shape, settings
        self.pairs = pairs if self.uses_pairs else None
        self.focal = AdaptiveFocal(self.stream_names(), settings.focal)
        self.language_embeddings = None
        if self.uses_pairs and settings.language_embeddings:
            # Zero at the start: the pretrained encoder sees exactly its usual input; folded into
            # each language's table on export (ramen.objectives.base.Objective.export_language).
            self.language_embeddings = nn.Embedding(len(model.languages), model.mlm.config.hidden_size)
            nn.init.zeros_(self.language_embeddings.weight)
        self.step = 0
        self._mono_counts = {}
        if streams:
            self._mono_counts = language_shares({lang: s.num_tokens for lang, s in self.streams.items()},
                                                shape.batch_size * len(self.streams), settings.sampling_alpha,
                                                settings.source_share)
            log.info("objective %s: monolingual sequences per batch %s%s", self.name, self._mono_counts,
                     "; monolingual and translation batches alternate" if self.uses_pairs else "")

    @classmethod
    def build(cls, model: BilingualMaskedLM, streams: Mapping[str, TokenStream], specials: Mapping,
              shape: BatchShape, settings: ObjectiveSettings, pairs: PairedStreams | None = None) -> "Objective":
        """The objective training ``model`` (converted as its settings ask: :func:`trained_model`)."""
        return cls(trained_model(model, settings), streams, specials, shape, settings, pairs)

    @classmethod
    def for_export(cls, model: BilingualMaskedLM, settings: ObjectiveSettings) -> "Objective":
        """The objective's modules without training data: load one of its training checkpoints into
        it, then export the sides exactly as its training does (the checkpoint curves, ramen.tasks.curves)."""
        return cls(trained_model(model, settings), {}, {}, None, settings)

    # --- streams and batches ---------------------------------------------------------------

    @property
    def foreign_lang(self) -> str:
        return next(lang for lang in self.model.languages if lang != self.model.source_lang)

    def stream_names(self) -> list[str]:
        names = list(self.model.languages)
        if self.uses_pairs:
            names += [f"pair_{lang}" for lang in (self.model.source_lang, self.foreign_lang)]
        return names

    def batch_key(self, stream: str) -> str:
        return PAIRS if stream.startswith("pair_") else stream

    def begin_step(self, step: int) -> None:
        self.step = step  # focal loss switches by step

    def step_batches(self, step: int, micro: int) -> dict:
        """A step's batches: translation pairs on even steps of a pair objective, else every language."""
        accumulation = self.shape.grad_accumulation
        if self.uses_pairs and step % 2 == 0:
            rng = step_rng(self.shape.seed, step, PAIR_STREAM + micro)
            specials = (self.specials[self.model.source_lang], self.specials[self.foreign_lang])
            return {PAIRS: make_pair_batch(self.pairs, specials, rng, self.shape.batch_size // accumulation,
                                           self.shape.seq_len, self.shape.mask_prob)}
        return {lang: make_batch(stream, self.specials[lang], step_rng(self.shape.seed, step, index * 1000 + micro),
                                 max(1, self._mono_counts[lang] // accumulation), self.shape.seq_len,
                                 self.shape.mask_prob)
                for index, (lang, stream) in enumerate(self.streams.items())}

    # --- encoder passes ---------------------------------------------------------------------

    def embed(self, lang: str, input_ids: torch.Tensor) -> torch.Tensor:
        embeds = self.model.input_embeddings(lang)(input_ids)
        if self.language_embeddings is not None:
            embeds = embeds + self.language_embeddings.weight[self.model.languages.index(lang)]
        return embeds

    def encode_monolingual(self, encoder: nn.Module, batches: Mapping[str, MaskedBatch],
                           inputs: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Every language's sequences through ``encoder`` in one pass (``inputs`` overrides input ids)."""
        langs = list(batches)
        ids = {lang: (inputs or {}).get(lang, batches[lang].input_ids) for lang in langs}
        embeds = torch.cat([self.embed(lang, ids[lang]) for lang in langs])
        attention = torch.cat([batches[lang].attention_mask for lang in langs])
        hidden = encoder(inputs_embeds=embeds, attention_mask=attention).last_hidden_state
        return dict(zip(langs, torch.split(hidden, [ids[lang].shape[0] for lang in langs])))

    def pair_inputs(self, pair: PairBatch, source_ids: torch.Tensor | None = None,
                    foreign_ids: torch.Tensor | None = None):
        """Embeddings, positions (restarting for the foreign side, as in XLM), attention and side of
        the concatenated pair."""
        source, foreign = self.model.source_lang, self.foreign_lang
        source_ids = pair.source.input_ids if source_ids is None else source_ids
        foreign_ids = pair.foreign.input_ids if foreign_ids is None else foreign_ids
        embeds = torch.cat([self.embed(source, source_ids), self.embed(foreign, foreign_ids)], dim=1)
        lengths = (source_ids.shape[1], foreign_ids.shape[1])
        device = embeds.device
        positions = torch.cat([torch.arange(lengths[0], device=device), torch.arange(lengths[1], device=device)])
        positions = positions.expand(len(source_ids), -1)
        attention = torch.cat([pair.source.attention_mask, pair.foreign.attention_mask], dim=1)
        side = torch.cat([torch.zeros(lengths[0], dtype=torch.long, device=device),
                          torch.ones(lengths[1], dtype=torch.long, device=device)]).expand(len(source_ids), -1)
        return embeds, positions, attention, side

    def encode_pair(self, encoder: nn.Module, pair: PairBatch, **ids) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden states of each side of a concatenated pair under the encoder's full (mixed) attention."""
        embeds, positions, attention, _ = self.pair_inputs(pair, **ids)
        hidden = encoder(inputs_embeds=embeds, attention_mask=attention, position_ids=positions).last_hidden_state
        return hidden.split([pair.source.input_ids.shape[1], pair.foreign.input_ids.shape[1]], dim=1)

    # --- losses ------------------------------------------------------------------------------

    def masked_loss(self, stream: str, lang: str, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        positions = labels != IGNORE_INDEX
        logits = self.model.masked_logits(lang, hidden, positions)
        return self.focal(stream, logits, labels[positions], self.step)

    def forward(self, batches: Mapping) -> dict[str, torch.Tensor]:
        losses = {}
        monolingual = {key: batch for key, batch in batches.items() if key != PAIRS}
        if monolingual:
            losses.update(self.monolingual_losses(monolingual))
        if PAIRS in batches:
            losses.update(self.pair_losses(batches[PAIRS]))
        return losses

    def monolingual_losses(self, batches: Mapping[str, MaskedBatch]) -> dict[str, torch.Tensor]:
        hidden = self.encode_monolingual(self.model.mlm.base_model, batches)
        return {lang: self.masked_loss(lang, lang, hidden[lang], batch.labels) for lang, batch in batches.items()}

    def pair_losses(self, pair: PairBatch) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # --- what the training loop asks (ramen.objectives.contract) -----------------------------

    def parameter_groups(self) -> dict[str, list[nn.Parameter]]:
        """The model's groups; the objective's own parameters train with the encoder."""
        groups = self.model.parameter_groups()
        model_params = {id(p) for p in self.model.parameters()}
        own = [p for p in self.parameters() if id(p) not in model_params]
        return {**groups, "encoder": groups["encoder"] + own}

    def compile_encoder(self) -> None:
        """torch.compile the shared encoder in place (parameter names and checkpoints stay as they are)."""
        self.model.mlm.base_model.compile()

    def metrics(self) -> dict[str, str]:
        """Extra metric columns: the streams trained with focal loss and the step each switched at."""
        if not self.settings.focal.enabled:
            return {}
        return {"focal": " ".join(f"{stream}@{step}" for stream, step in self.focal.switched().items())}

    def export_language(self, lang: str, tokenizer, out_dir) -> None:
        """Export ``lang``'s side as a standard masked LM, its language embedding folded into its table.

        Adding the same vector to every row changes the input exactly as the training-time
        language embedding did, and shifts all of a position's output logits equally (the output
        layer is tied), so predicted distributions are unchanged.
        """
        if self.language_embeddings is None:
            self.model.export_language(lang, tokenizer, out_dir)
            return
        table = self.model.input_embeddings(lang).weight
        shift = self.language_embeddings.weight[self.model.languages.index(lang)].detach()
        with torch.no_grad():
            table += shift
            try:
                self.model.export_language(lang, tokenizer, out_dir)
            finally:
                table -= shift


def trained_model(model: BilingualMaskedLM, settings: ObjectiveSettings) -> BilingualMaskedLM:
    """The bilingual model an objective trains: ``model``, converted to carry the gated relative
    position bias when the settings turn it on (training and checkpoint export both start here)."""
    if settings.relative_position.gated:
        return with_gated_relative_position(model, settings.relative_position)
    return model


def with_gated_relative_position(model: BilingualMaskedLM, settings: RelativePositionSettings) -> BilingualMaskedLM:
    """The same bilingual model with XLM-E's gated relative position bias in every self-attention
    (ramen.modeling.modeling_ramen_bert), zero at the start: it computes what ``model`` computes until trained."""
    from ramen.modeling.architectures import gated_bert

    foreign = {lang: (model.input_embeddings(lang).weight, model.output_bias(lang))
               for lang in model.languages if lang != model.source_lang}
    gated = gated_bert(model.mlm, settings.buckets, settings.max_distance)
    return BilingualMaskedLM(gated, model.source_lang, foreign)


def output_scale(layer_number: int) -> float:
    """XLM-E's initialisation: block l's output projections scaled by 1/sqrt(2l) (l from 1)."""
    return 1.0 / math.sqrt(2 * layer_number)
