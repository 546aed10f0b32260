"""The memory a training job needs per GPU, planned from the source's ``config.json`` and the
training settings before any job runs (the job graph calls it: no torch here).

Every parameter tensor of the trained model is listed with its shape and its parameter group
(:func:`model_weights`: the source's tensors as its layout builds them, the foreign language's
table, output rows and bias, LoRA's adapters), so the groups a run trains resolve exactly as the
trainer resolves them (:mod:`ramen.training.staging`). Per process (rank) the plan holds:

exact (what the trainer allocates)
    parameters   fp32 master weights of every trained tensor (4 B each); frozen ones at
                 ``training.frozen_dtype`` (:func:`frozen_bytes`: fp32, bf16, or NF4 for the
                 blocks' linear weights, ramen.modeling.frozen_layout)
    gradients    fp32, trainable tensors only (4 B)
    optimizer    AdamW's exp_avg and exp_avg_sq (8 B per trainable value) and its ``step``, a
                 0-dim fp32 tensor per trainable tensor (4 B)
    Staged training plans the union of the stages' groups: the optimiser holds them all (DDP gives
    each a gradient at every update; one process only the stage's, never more). Under
    ``sharding: fsdp`` (FSDP2) each tensor is split on dim 0 over the processes, dim 0 padded up
    to a multiple of them: a rank holds ceil(rows / processes) rows of every tensor.

estimated (not exact; `make gpu-check` sets them against a GPU's peak)
    ddp_buckets     DDP's gradient buckets: a second fp32 copy of the trainable gradients
    weight_copies   the low-precision copies of weights that matmuls keep for backward under
                    autocast (every block's, or one block's with activation checkpointing, and
                    the output layers'); under FSDP the gathered parameters of one block and of
                    the root (the tables and output layers) at the compute precision, and the
                    full fp32 gradients of the larger of the two before their reduce-scatter (an
                    objective that runs blocks in parts, BLOCKS_RUN_IN_PARTS: all in the root,
                    whose checkpointing never recomputes them)
    activations     what backward needs of each block (per token; see :func:`block_activation_bytes`),
                    or each block's input alone plus one block recomputed under activation
                    checkpointing; attention is flash / memory-efficient (no sequence-squared term)
    logits          a masked LM: the fp32 log-probabilities of every language's targets, plus one
                    language's logits and their gradients at a time; a causal LM: one chunk of
                    positions' logits, log-probabilities and their gradients (LOGIT_CHUNK_BYTES),
                    and the trained output rows' gradients that its forward makes, held till
                    backward beyond the exact gradients (extended vocabulary, grad accumulation)
    cuda_context    the CUDA context and kernel workspaces (on a GPU)

A plan above resources.gpu_memory_gb is refused by :mod:`ramen.training.memory_advice`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ramen.data.checkpoint_headers import BYTE_ALPHABET
from ramen.errors import ConfigError
from ramen.modeling.frozen_layout import nf4_bytes
from ramen.training.settings import TrainSettings, resolved_precision
from ramen.training.staging import parse_stages, resolve, union_of_stages

GIB = 1024 ** 3
GB = 1000 ** 3  # resources.gpu_memory_gb counts as cards are sold: a limit of 80 is 74.5 GiB
FP32 = 4
CUDA_CONTEXT = GIB
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
GPT2_LIKE = ("gpt2",)
BERT_LIKE = ("bert", "roberta", "xlm-roberta")
EXACT_PARTS = ("parameters", "gradients", "optimizer")
ESTIMATED_PARTS = ("ddp_buckets", "weight_copies", "activations", "logits", "cuda_context")
PARTS = EXACT_PARTS + ESTIMATED_PARTS
LIMIT_KEY = "resources.gpu_memory_gb"
# The causal loss's chunk (ramen.modeling.causal, which this module cannot import: torch): each
# chunk's fp32 logits at most this many bytes. A chunk holds its logits at the compute precision
# and up to this many fp32 copies (the logits cast, their log-probabilities turned gradient, the
# matmuls' temporaries): measured on the CPU, 3 at fp32 and 3.7 under bf16 autocast.
LOGIT_CHUNK_BYTES = 128 * 2 ** 20
CHUNK_LOGIT_COPIES = 4
# Objectives that run the parts of each block apart (tlm-da: intra- then cross-lingual attention,
# ramen.objectives.attention), never a block's own forward, which is where FSDP gathers a unit's
# weights and activation checkpointing wraps: ramen.training.sharding keeps their blocks in the
# root's unit.
BLOCKS_RUN_IN_PARTS = frozenset({"tlm-da"})


class NoShape(Exception):
    """A config.json whose parameter shapes this module does not derive (the plan says so)."""


@dataclass(frozen=True)
class Weight:
    """One parameter tensor of the trained model."""

    name: str
    shape: tuple[int, ...]
    group: str  # encoder, head, source_embeddings, foreign_embeddings or lora (ramen.training.settings)
    block: int | None = None  # the transformer block that holds it
    matmul: bool = False  # a matrix that a matmul reads (linear layers, output rows, tied tables)
    features: tuple[int, int] | None = None  # a block's linear layer: (inputs, outputs), what LoRA adapts

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def held(self, world: int) -> int:
        """The values one rank holds when the tensor is split on dim 0 over ``world`` ranks."""
        return -(-self.shape[0] // world) * math.prod(self.shape[1:])


@dataclass(frozen=True)
class SourceShape:
    """The shapes that fix a source's parameters, read from its config.json."""

    model_type: str
    layout: str  # llama, gpt2 or bert
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    positions: int = 0  # learned position embeddings (GPT-2, BERT)
    token_types: int = 0  # BERT's segment embeddings
    qkv_bias: bool = False
    output_bias: bool = False  # on the attention output projection (Llama's attention_bias)
    mlp_bias: bool = False
    qk_norm: bool = False  # Qwen3's per-head norms of queries and keys

    @classmethod
    def from_config(cls, config: Mapping) -> "SourceShape":
        model_type = str(config.get("model_type", ""))
        try:
            if model_type in LLAMA_LIKE:
                hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
                bias = bool(config.get("attention_bias", False))
                return cls(model_type, "llama", hidden, int(config["intermediate_size"]),
                           int(config["num_hidden_layers"]), heads,
                           int(config.get("num_key_value_heads") or heads),
                           int(config.get("head_dim") or hidden // heads), int(config["vocab_size"]),
                           bool(config.get("tie_word_embeddings", False)),
                           qkv_bias=bias or model_type == "qwen2", output_bias=bias and model_type != "qwen2",
                           mlp_bias=bool(config.get("mlp_bias", False)), qk_norm=model_type == "qwen3")
            if model_type in GPT2_LIKE:
                hidden, heads = int(config["n_embd"]), int(config["n_head"])
                return cls(model_type, "gpt2", hidden, int(config.get("n_inner") or 4 * hidden),
                           int(config["n_layer"]), heads, heads, hidden // heads, int(config["vocab_size"]),
                           bool(config.get("tie_word_embeddings", True)), positions=int(config["n_positions"]))
            if model_type in BERT_LIKE:
                hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
                return cls(model_type, "bert", hidden, int(config["intermediate_size"]),
                           int(config["num_hidden_layers"]), heads, heads, hidden // heads,
                           int(config["vocab_size"]), True, positions=int(config["max_position_embeddings"]),
                           token_types=int(config.get("type_vocab_size", 2)))
        except (KeyError, TypeError, ValueError) as error:
            raise NoShape(f"its config.json lacks or garbles {error}") from None
        raise NoShape(f"model type '{model_type}' has no shape formula here (planned: "
                      f"{', '.join(LLAMA_LIKE + GPT2_LIKE + BERT_LIKE)})")

    @property
    def masked(self) -> bool:
        return self.layout == "bert"

    def weights(self) -> list[Weight]:
        """The source model's parameters (a masked LM with its MLM head), grouped as the
        bilingual models group them."""
        d, i = self.hidden, self.intermediate
        weights = [Weight("embed_tokens", (self.vocab, d), "source_embeddings", matmul=self.tied)]
        if self.positions:
            weights.append(Weight("position_embeddings", (self.positions, d), "encoder"))
        if self.token_types:
            weights.append(Weight("token_type_embeddings", (self.token_types, d), "encoder"))
        if self.layout == "bert":
            weights += _norm("embeddings.LayerNorm", d, None, bias=True)
        for block in range(self.layers):
            weights += getattr(self, f"_{self.layout}_block")(block, d, i)
        if self.layout == "llama":
            weights.append(Weight("norm.weight", (d,), "encoder"))
        elif self.layout == "gpt2":
            weights += _norm("ln_f", d, None, bias=True)
        else:
            weights += [*_linear("head.transform.dense", d, d, None, "head", bias=True),
                        *_norm("head.transform.LayerNorm", d, None, bias=True, group="head"),
                        Weight("head.bias", (self.vocab,), "head")]
        if not self.tied:
            weights.append(Weight("lm_head", (self.vocab, d), "head", matmul=True))
        return weights

    def _llama_block(self, block: int, d: int, i: int) -> list[Weight]:
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        prefix = f"layers.{block}."
        weights = [*_linear(prefix + "self_attn.q_proj", d, q, block, bias=self.qkv_bias),
                   *_linear(prefix + "self_attn.k_proj", d, kv, block, bias=self.qkv_bias),
                   *_linear(prefix + "self_attn.v_proj", d, kv, block, bias=self.qkv_bias),
                   *_linear(prefix + "self_attn.o_proj", q, d, block, bias=self.output_bias)]
        if self.qk_norm:
            weights += _norm(prefix + "self_attn.q_norm", self.head_dim, block) + _norm(
                prefix + "self_attn.k_norm", self.head_dim, block)
        for name, inputs, outputs in (("gate_proj", d, i), ("up_proj", d, i), ("down_proj", i, d)):
            weights += _linear(prefix + "mlp." + name, inputs, outputs, block, bias=self.mlp_bias)
        return weights + _norm(prefix + "input_layernorm", d, block) + _norm(prefix + "post_attention_layernorm",
                                                                              d, block)

    def _gpt2_block(self, block: int, d: int, i: int) -> list[Weight]:
        prefix = f"h.{block}."  # Conv1D layers: weights stored (inputs, outputs)
        return [*_norm(prefix + "ln_1", d, block, bias=True),
                *_linear(prefix + "attn.c_attn", d, 3 * d, block, bias=True, conv1d=True),
                *_linear(prefix + "attn.c_proj", d, d, block, bias=True, conv1d=True),
                *_norm(prefix + "ln_2", d, block, bias=True),
                *_linear(prefix + "mlp.c_fc", d, i, block, bias=True, conv1d=True),
                *_linear(prefix + "mlp.c_proj", i, d, block, bias=True, conv1d=True)]

    def _bert_block(self, block: int, d: int, i: int) -> list[Weight]:
        prefix = f"layer.{block}."
        return [*_linear(prefix + "attention.self.query", d, d, block, bias=True),
                *_linear(prefix + "attention.self.key", d, d, block, bias=True),
                *_linear(prefix + "attention.self.value", d, d, block, bias=True),
                *_linear(prefix + "attention.output.dense", d, d, block, bias=True),
                *_norm(prefix + "attention.output.LayerNorm", d, block, bias=True),
                *_linear(prefix + "intermediate.dense", d, i, block, bias=True),
                *_linear(prefix + "output.dense", i, d, block, bias=True),
                *_norm(prefix + "output.LayerNorm", d, block, bias=True)]


def _linear(name: str, inputs: int, outputs: int, block: int | None, group: str = "encoder", *,
            bias: bool = False, conv1d: bool = False) -> list[Weight]:
    shape = (inputs, outputs) if conv1d else (outputs, inputs)
    weights = [Weight(name + ".weight", shape, group, block, matmul=True, features=(inputs, outputs))]
    return weights + ([Weight(name + ".bias", (outputs,), group, block)] if bias else [])


def _norm(name: str, size: int, block: int | None, *, bias: bool = False, group: str = "encoder") -> list[Weight]:
    return [Weight(name + ".weight", (size,), group, block)] + (
        [Weight(name + ".bias", (size,), group, block)] if bias else [])


LORA_TARGETS_KEY = "training.lora.target_modules"


def _names(module: str, target: str) -> bool:
    """peft's rule (the module's whole name or a dotted suffix of it, ramen.modeling.lora), where
    the model's names have a prefix these lack (``model.`` before ``layers.0.mlp.up_proj``): a
    target that goes on past the start of a name may name it."""
    return module == target or module.endswith("." + target) or target.endswith("." + module)


def lora_targets(weight: Weight, target_modules: Sequence[str]) -> bool:
    """Whether LoRA adapts a weight: a linear layer of a block that peft matches by module name."""
    if weight.features is None or weight.block is None:
        return False
    module = weight.name.removesuffix(".weight")
    return "all-linear" in target_modules or any(_names(module, target) for target in target_modules)


def check_lora_targets(shape: SourceShape, target_modules: Sequence[str], setting: str = LORA_TARGETS_KEY) -> None:
    """ConfigError naming ``setting`` for a target that names no linear layer of the blocks, as
    ramen.modeling.lora refuses it when the job adds the adapters (here before any job runs)."""
    layers = [weight.name.removesuffix(".weight") for weight in shape.weights()
              if weight.features is not None and weight.block is not None]
    unmatched = [target for target in target_modules
                 if target != "all-linear" and not any(_names(layer, target) for layer in layers)]
    if unmatched:
        leaves = sorted({layer.rsplit(".", 1)[-1] for layer in layers})
        raise ConfigError(setting, f"{unmatched} name no linear layer of the {shape.layers} transformer blocks "
                          f"of a {shape.model_type} source", f"choose from {leaves} or [all-linear]")


def model_weights(shape: SourceShape, foreign_rows: int | None, vocabulary: str = "replace",
                  lora=None) -> list[Weight]:
    """Every parameter of a training job's model: the source's, one foreign language's
    (``foreign_rows`` rows: its own table, or the new rows of an extended vocabulary; None: the
    source alone, as the head warm-up trains it) and, given ``lora`` (LoraSettings), the adapters
    of the block layers it targets."""
    d = shape.hidden
    weights = shape.weights()
    if foreign_rows is not None and vocabulary == "extend":
        # ramen.modeling.causal (extend): the new rows are parameters of their own, all in foreign_embeddings.
        weights.append(Weight("new_embeddings", (foreign_rows, d), "foreign_embeddings", matmul=shape.tied))
        if not shape.tied:
            weights.append(Weight("new_output", (foreign_rows, d), "foreign_embeddings", matmul=True))
    elif foreign_rows is not None:
        weights.append(Weight("foreign_embeddings", (foreign_rows, d), "foreign_embeddings", matmul=shape.tied))
        if not shape.tied:
            weights.append(Weight("foreign_output", (foreign_rows, d), "head", matmul=True))
        if shape.masked:
            weights.append(Weight("foreign_bias", (foreign_rows,), "head"))
    if lora is not None:
        for weight in list(weights):
            if lora_targets(weight, lora.target_modules):
                inputs, outputs = weight.features
                weights += [Weight(weight.name + ".lora_A", (lora.rank, inputs), "lora", weight.block, matmul=True),
                            Weight(weight.name + ".lora_B", (outputs, lora.rank), "lora", weight.block, matmul=True)]
    return weights


def frozen_bytes(weight: Weight, frozen_dtype: str) -> int:
    """Bytes of a weight no stage trains, held as ramen.modeling.frozen holds it."""
    if frozen_dtype == "fp32":
        return FP32 * weight.numel
    if frozen_dtype == "nf4" and weight.features is not None and weight.block is not None and len(weight.shape) == 2:
        return nf4_bytes(weight.numel)
    return 2 * weight.numel


def parameter_groups(weights: Sequence[Weight]) -> dict[str, list[Weight]]:
    """The weights by group name, ``block:<i>`` included, as ``parameter_groups()`` of the models."""
    groups: dict[str, list[Weight]] = {"encoder": [], "head": [], "source_embeddings": [], "foreign_embeddings": []}
    for weight in weights:
        groups.setdefault(weight.group, []).append(weight)
        # LoRA's adapters are in no other group (ramen.modeling.lora), though inside the blocks.
        if weight.block is not None and weight.group != "lora":
            groups.setdefault(f"block:{weight.block}", []).append(weight)
    return groups


def trained_weights(weights: Sequence[Weight], settings: TrainSettings) -> list[Weight]:
    """The weights the optimiser holds: the named groups, or the union of the stages'."""
    if not settings.steps:
        return []
    stages = parse_stages(settings.stages)
    names = union_of_stages(stages) if stages else settings.train
    return resolve(names, parameter_groups(weights), "training.stages" if stages else "training.train")


def foreign_vocabulary_rows(shape: SourceShape, vocabulary: str, bpe: Mapping) -> int:
    """The most rows the foreign side adds, from the ``bpe`` section: an extension's new tokens,
    or the new vocabulary's size (a decoder's byte-level BPE: the 256 bytes and the merges; a
    masked LM's: ``max_vocab_size``, else the source's size)."""
    if vocabulary == "extend":
        return int(bpe["extension_tokens"])
    limit = bpe.get("max_vocab_size")
    if shape.masked:
        return int(limit or shape.vocab)
    rows = BYTE_ALPHABET + int(bpe["merges"])
    return min(rows, int(limit)) if limit else rows


def plan_precision(precision: str, device: str) -> str:
    """The precision the plan takes a setting to mean on ``device``: the trainer's decision
    (:func:`ramen.training.settings.resolved_precision`) on a GPU that supports bf16. The plan runs
    with no GPU at hand, so it assumes one: ``auto`` on a GPU without bf16 (before Ampere) trains
    at fp32, with more activation memory than planned."""
    return resolved_precision(precision, device, bf16_supported=True)


def logit_chunk(vocabulary: int) -> int:
    """Positions per chunk of the causal loss, as ramen.modeling.causal.logit_chunk."""
    return max(1, LOGIT_CHUNK_BYTES // (FP32 * vocabulary))


def compute_bytes(precision: str, device: str) -> int:
    """Bytes per value of the forward's matmuls."""
    return FP32 if plan_precision(precision, device) == "fp32" else 2


def block_activation_bytes(shape: SourceShape, compute: int, lora=None) -> int:
    """Bytes one block keeps for backward per token at ``compute`` bytes per value (4: fp32,
    2: bf16/fp16 under autocast, where the residual stream and the norms stay fp32 and each
    linear layer fed an fp32 tensor keeps its own cast of it)."""
    d, i = shape.hidden, shape.intermediate
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    cast = compute if compute < FP32 else 0
    if shape.layout == "llama":
        # Two RMSNorms (fp32 input and normalised output each), casts for q/k/v and gate/up,
        # q, k, v and the attention output (SDPA's and o_proj's input), gate, SiLU, up, product.
        size = 16 * d + cast * 5 * d + compute * (3 * q + 2 * kv) + compute * 4 * i
        if shape.qk_norm:
            size += 8 * (q + kv)
    elif shape.layout == "gpt2":
        # LayerNorm inputs, their outputs (or casts), q/k/v, the attention output twice, c_fc's
        # output and GELU's, dropout masks.
        size = 8 * d + (2 * cast * d if cast else 8 * d) + compute * 5 * d + compute * 2 * i + 2 * d
    else:
        # Post-norm: the block input, casts for q/k/v and the intermediate layer, q/k/v, the
        # attention output twice, both LayerNorms' inputs and the first's output, the
        # intermediate layer's output and GELU's, dropout masks.
        size = 16 * d + cast * 4 * d + compute * 5 * d + compute * 2 * i + 2 * d
    if lora is not None:
        # Per adapted layer: A's output, and the input's own cast (or dropped-out copy and mask) for A.
        for weight in shape.weights():
            if weight.block == 0 and lora_targets(weight, lora.target_modules):
                inputs = weight.features[0]
                size += compute * lora.rank + (compute * inputs if cast or lora.dropout else 0) + (
                    inputs if lora.dropout else 0)
    return size


@dataclass
class Plan:
    """The memory of one process of a training job, by part (bytes), and the limit it must fit."""

    parameters: int  # values of the whole model
    trainable: int  # values the optimiser holds
    parts: dict[str, int]
    limit: int | None = None  # bytes; None: no limit

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def fits(self) -> bool:
        return self.limit is None or self.total <= self.limit

    def summary(self) -> str:
        parts = ", ".join(f"{name} {value / GIB:.1f}" for name, value in self.parts.items() if value)
        return f"{self.total / GIB:.1f} GiB ({parts})"


def plan_job(shape: SourceShape, settings: TrainSettings, *, foreign_rows: int | None, vocabulary: str = "replace",
             device: str = "cuda", limit_gb: float | None = None, output_init: str = "input",
             shard_one_process: bool = False, objective: str | None = None) -> Plan:
    """The plan of one training job's processes (all alike): ``foreign_rows`` as for
    :func:`model_weights`, ``limit_gb``: resources.gpu_memory_gb. ``output_init`` other than
    ``input`` on an extended tied source unties its head (ramen.modeling.causal): the output
    rows, old and new, become parameters of their own. ``shard_one_process``: FSDP's units over one
    process (as ``make gpu-check`` runs them), which the trainer never does on its own. ``objective``:
    the variant's (variants.<name>.objective); one of :data:`BLOCKS_RUN_IN_PARTS` keeps every block's
    weights gathered under FSDP and every block's activations under activation checkpointing.
    ``precision: auto`` is planned as bf16 on a CUDA ``device``: the plan assumes a GPU that supports
    bf16 (:func:`plan_precision`)."""
    if vocabulary == "extend" and output_init != "input" and shape.tied:
        shape = dataclasses.replace(shape, tied=False)
    lora = settings.lora if settings.uses_lora else None
    if lora is not None:  # adapters on no layer would be blamed on training.train's group lora
        check_lora_targets(shape, lora.target_modules)
    weights = model_weights(shape, foreign_rows, vocabulary, lora)
    trained = trained_weights(weights, settings)
    world = settings.processes
    # One process has nothing to shard: it trains as an unsharded run (ramen.training.sharding).
    sharded = settings.sharding == "fsdp" and (world > 1 or shard_one_process)
    in_parts = objective in BLOCKS_RUN_IN_PARTS
    held = {id(weight): weight.held(world) if sharded else weight.numel for weight in weights}
    trainable = sum(held[id(weight)] for weight in trained)
    compute = compute_bytes(settings.compute_precision, device)
    parts = dict.fromkeys(PARTS, 0)
    trained_ids = {id(weight) for weight in trained}
    frozen = [weight for weight in weights if id(weight) not in trained_ids]
    # Sharding holds frozen weights at fp32 (frozen_dtype is refused with it).
    parts["parameters"] = FP32 * trainable + sum(
        FP32 * held[id(weight)] if sharded else frozen_bytes(weight, settings.frozen_dtype) for weight in frozen)
    parts["gradients"] = FP32 * trainable
    parts["optimizer"] = 2 * FP32 * trainable + FP32 * len(trained)
    if device.startswith("cuda"):
        parts["cuda_context"] = CUDA_CONTEXT
    if trained:
        if world > 1 and not sharded:
            parts["ddp_buckets"] = FP32 * trainable
        checkpointing = settings.activation_checkpointing and not in_parts
        # Only fp32 weights are cast for the matmuls; an NF4 weight is dequantised one layer at a time.
        cast = weights if settings.frozen_dtype == "fp32" else trained
        parts["weight_copies"] = _weight_copies(shape, cast, trained, checkpointing, sharded, compute, in_parts) + (
            2 * max((weight.numel for weight in frozen if frozen_bytes(weight, "nf4") < 2 * weight.numel), default=0)
            if settings.frozen_dtype == "nf4" else 0)
        languages = 1 if foreign_rows is None else 2
        rows = settings.batch_size // settings.grad_accumulation // world  # per language and rank
        tokens = languages * rows * settings.seq_len
        per_block = block_activation_bytes(shape, compute, lora)
        kept = FP32 * shape.hidden if checkpointing else per_block
        # Every block's kept tensors, one block recomputed (or its gradients), the embeddings and the final norm.
        parts["activations"] = tokens * (shape.layers * kept + per_block + 16 * shape.hidden)
        # A masked LM computes logits at its masked positions only.
        share = settings.mask_prob if shape.masked else 1.0
        targets = math.ceil(rows * settings.seq_len * share)
        vocabularies = [shape.vocab] if foreign_rows is None else (
            [shape.vocab + foreign_rows] * 2 if vocabulary == "extend" else [shape.vocab, foreign_rows])
        logits = [targets * size for size in vocabularies]
        if shape.masked:
            parts["logits"] = FP32 * sum(logits) + (compute + 2 * FP32) * max(logits)
        else:  # the causal loss holds one chunk's logits at a time (its gradients made in forward)
            chunk = max(min(targets, logit_chunk(size)) * size for size in vocabularies)
            # Its gradients of the trained output rows and biases are made in forward and held till
            # backward: one set per language reading them (an extended vocabulary: every language),
            # beyond the gradients kept since the last update (grad accumulation) or the one set
            # that becomes them.
            head = sum(w.numel for w in trained if w.block is None and (w.matmul or w.name.endswith("bias")))
            sets = (len(vocabularies) - 1 if vocabulary == "extend" else 0) + (settings.grad_accumulation > 1)
            parts["logits"] = (compute + CHUNK_LOGIT_COPIES * FP32) * chunk + FP32 * head * sets
    limit = None if limit_gb is None else int(limit_gb * GB)
    return Plan(sum(weight.numel for weight in weights), sum(weight.numel for weight in trained), parts, limit)


def fsdp_units(shape: SourceShape, weights: Sequence[Weight], in_parts: bool = False) -> list[list[Weight]]:
    """The weights of each FSDP unit (ramen.training.sharding): the root's (every weight outside the
    blocks) first, then a unit per block; ``in_parts`` (:data:`BLOCKS_RUN_IN_PARTS`): the root's alone."""
    blocks: list[list[Weight]] = [[] for _ in range(shape.layers)]
    root = []
    for weight in weights:
        (root if in_parts or weight.block is None else blocks[weight.block]).append(weight)
    return [root] if in_parts else [root, *blocks]


def _weight_copies(shape: SourceShape, weights: Sequence[Weight], trained: Sequence[Weight], checkpointing: bool,
                   sharded: bool, compute: int, in_parts: bool = False) -> int:
    """Sharded: the root's gathered weights (it gathers once for forward and backward) and one
    block's, and the larger unit's full gradients before their reduce-scatter; else the cast
    copies matmuls keep under autocast, of every block (one when recomputed) and the root."""
    if sharded:
        # Every block's unit is alike: the first stands for the one gathered at a time.
        gathered = fsdp_units(shape, weights, in_parts)[:2]
        trained_ids = {id(weight) for weight in trained}
        unsharded = max(sum(w.numel for w in unit if id(w) in trained_ids) for unit in gathered)
        return compute * sum(w.numel for unit in gathered for w in unit) + FP32 * unsharded
    if compute == FP32:
        return 0
    blocks = [[weight for weight in weights if weight.block == block] for block in range(shape.layers)]
    root = [weight for weight in weights if weight.block is None]
    kept = blocks[:1] if checkpointing else blocks
    return compute * sum(w.numel for part in [*kept, root] for w in part if w.matmul)


# --- the plan as a table -----------------------------------------------------------------------

COLUMNS = ("rule", "job", "source", "parameters", "trainable", "processes", "sharding", "precision",
           "activation_checkpointing", *(f"{part}_gib" for part in PARTS), "total_gib", "limit_gib", "fits", "note")


def plan_row(rule: str, job: str, source: str, settings: TrainSettings | None, plan: Plan | None,
             device: str = "cuda", note: str = "") -> dict[str, str]:
    """One row of the table (``plan`` None: not planned, ``note`` says why)."""
    row = dict.fromkeys(COLUMNS, "")
    row.update(rule=rule, job=job, source=source, note=note)
    if settings is not None:
        row.update(processes=str(settings.processes), sharding=settings.sharding,
                   precision=plan_precision(settings.compute_precision, device),
                   activation_checkpointing=str(settings.activation_checkpointing).lower())
    if plan is not None:
        row.update(parameters=str(plan.parameters), trainable=str(plan.trainable),
                   total_gib=f"{plan.total / GIB:.3f}", fits="" if plan.limit is None else str(plan.fits).lower(),
                   limit_gib="" if plan.limit is None else f"{plan.limit / GIB:.3f}",
                   **{f"{part}_gib": f"{value / GIB:.3f}" for part, value in plan.parts.items()})
    return row


def format_rows(rows: Sequence[Mapping[str, str]]) -> list[str]:
    """Printable lines, jobs whose plans agree on one line (the languages of a variant)."""
    lines: dict[tuple, list[str]] = {}
    unplanned: dict[str, int] = {}
    for row in rows:
        if not row["total_gib"]:
            unplanned[row["note"]] = unplanned.get(row["note"], 0) + 1
            continue
        variant, _, lang = row["job"].rpartition("_")
        parts = " + ".join(f"{part} {float(row[part + '_gib']):.2f}" for part in PARTS if float(row[part + "_gib"]))
        limit = f" of {float(row['limit_gib']):.2f}" if row["limit_gib"] else ""
        text = f"{parts} = {float(row['total_gib']):.2f} GiB{limit}"
        lines.setdefault((row["rule"], variant or row["job"], text), []).append(lang if variant else "")
    return [f"  {rule} {job}{_languages(langs)}: {text}" for (rule, job, text), langs in lines.items()] + [
        f"  {count} training job{'s' if count > 1 else ''} not planned: {note}" for note, count in unplanned.items()]


def _languages(langs: Sequence[str]) -> str:
    if not any(langs):
        return ""
    return f"_{langs[0]}" if len(langs) == 1 else f"_{{{','.join(langs)}}}"
