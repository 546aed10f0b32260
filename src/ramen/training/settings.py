"""The settings of bilingual training and their checks, without torch: the job graph runs the same
checks on every variant's training section (``ramen.workflow.graph_checks``) that a training job
runs when it starts, so a batch that does not split is refused before any job, by its full key."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ramen.errors import ConfigError
from ramen.training.schedules import inverse_sqrt
from ramen.training.staging import check_stage_ends, parse_stages

# The groups of every model's parameters.
PARAMETER_GROUPS = ("encoder", "head", "source_embeddings", "foreign_embeddings")
# What ``train`` may also name: ``lora``, the low-rank adapters that naming it adds to the shared
# stack (LoraSettings); the export merges them.
TRAINABLE_GROUPS = (*PARAMETER_GROUPS, "lora")
# Settings that change which batches are drawn or how an update is computed: a resumed run
# with other values does not continue the checkpointed trajectory.
TRAJECTORY_SETTINGS = ("batch_size", "seq_len", "grad_accumulation", "seed", "mask_prob", "train", "peak_lr",
                       "init_lr", "warmup_steps", "weight_decay", "max_grad_norm", "precision", "stages",
                       "sharding", "lora", "frozen_dtype")
# Trajectory settings whose default leaves a run's id as it was before the setting existed.
OMITTED_AT_DEFAULT = {"stages": (), "sharding": "none", "lora": None, "frozen_dtype": "fp32"}
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
SHARDINGS = ("none", "fsdp")
# How weights that no stage trains are held (ramen.modeling.frozen): fp32, bf16, or nf4 (QLoRA's
# 4-bit NormalFloat for the blocks' linear weights, bf16 for the other frozen weights).
FROZEN_DTYPES = ("fp32", "bf16", "nf4")
# Groups whose parameters include the blocks' linear weights: a stage that trains one cannot hold them in nf4.
BLOCK_WEIGHT_GROUPS = ("encoder", "block:", "bottom:", "top:")


def check_precision(precision: str, setting: str) -> None:
    if precision not in PRECISIONS:
        raise ConfigError(setting, f"unknown precision '{precision}'", f"choose from {list(PRECISIONS)}")


def resolved_precision(precision: str, device: str, *, bf16_supported: bool) -> str:
    """The precision a ``precision`` setting means on ``device``: ``auto`` is bf16 on a CUDA device
    that supports it (``bf16_supported``), else fp32; the others mean themselves. Torch-free, so the
    trainer (ramen.training.precision, which asks torch) and the memory plan decide alike."""
    if precision == "auto":
        return "bf16" if device.startswith("cuda") and bf16_supported else "fp32"
    return precision


def check_accumulation(accumulation: int, setting: str) -> None:
    if not isinstance(accumulation, int) or accumulation < 1:
        raise ConfigError(setting, f"{accumulation!r}: the micro-batches per update must be a positive integer")


def training_key(name: str) -> str:
    return f"training.{name}"


@dataclass
class LoraSettings:
    """Low-rank adapters (peft) on the shared stack's linear layers, trained where a stage names ``lora``."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    # Module names as peft matches them; "all-linear": every linear layer of the blocks.
    target_modules: Sequence[str] = ("all-linear",)

    def __post_init__(self):
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigError("training.lora.rank", f"{self.rank!r}: the adapters' rank must be a positive integer")
        if self.alpha <= 0:
            raise ConfigError("training.lora.alpha", f"{self.alpha!r} must be positive")
        if not 0 <= self.dropout < 1:
            raise ConfigError("training.lora.dropout", f"{self.dropout!r} must be in [0, 1)")
        if isinstance(self.target_modules, str) or not self.target_modules:
            raise ConfigError("training.lora.target_modules", f"{self.target_modules!r}",
                              "list module names (q_proj, v_proj, ...) or [all-linear]")


@dataclass
class TrainSettings:
    steps: int
    batch_size: int  # sequences per language per update (the paper's batch is half English, half foreign)
    seq_len: int = 128
    peak_lr: float = 1e-4
    init_lr: float = 1e-7
    warmup_steps: int = 4000
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    mask_prob: float = 0.15
    grad_accumulation: int = 1
    train: Sequence[str] = ("encoder", "head", "foreign_embeddings")
    # Staged training (ramen.training.staging): [{until, train}, ...], the groups each range of
    # updates trains; when given it replaces ``train``.
    stages: Sequence[Mapping] = ()
    seed: int = 0
    log_every: int = 10
    checkpoint_every: int = 0  # 0: only at the end and on SIGTERM/SIGUSR1
    keep_last: int = 2
    keep_every: int = 0  # also keep every M-th step's checkpoint (0: none)
    threads: int = 0
    precision: str = "auto"  # auto: bf16 on a GPU that supports it, else fp32; fp16 adds loss scaling
    compile: bool = False  # torch.compile the shared encoder
    gpus: int = 1  # processes (GPUs) per node; the workflow starts torchrun when gpus x nodes > 1
    nodes: int = 1  # nodes of one training job (torchrun under srun with a rendezvous when > 1)
    distributed: bool = False  # join torchrun's process group (the launcher sets it when gpus x nodes > 1)
    # fsdp: parameters, gradients and optimiser state sharded over the processes (FSDP2, per block)
    sharding: str = "none"
    activation_checkpointing: bool = False  # recompute each block's activations in backward
    lora: LoraSettings = field(default_factory=LoraSettings)
    # The weights no stage trains: fp32 (as trained ones), bf16 or nf4 (ramen.modeling.frozen).
    frozen_dtype: str = "fp32"

    def __post_init__(self):
        check_train_settings(asdict(self))

    def learning_rate(self, step: int) -> float:
        """Linear warm-up from ``init_lr`` to ``peak_lr``, then inverse square root decay (§3.3)."""
        return inverse_sqrt(step, self.peak_lr, self.warmup_steps, self.init_lr)

    def trajectory(self) -> dict:
        """The settings that fix the trajectory (not its length, logging or checkpointing)."""
        values = asdict(self)
        # LoRA's settings matter only when a stage trains the adapters.
        values["lora"] = values["lora"] if self.uses_lora else None
        # Runs at a newer setting's default keep the run ids they had before it existed.
        return {name: values[name] for name in TRAJECTORY_SETTINGS
                if name not in OMITTED_AT_DEFAULT or values[name] != OMITTED_AT_DEFAULT[name]}

    @property
    def uses_lora(self) -> bool:
        return uses_lora(self.train, self.stages)

    @property
    def processes(self) -> int:
        return self.gpus * self.nodes

    @property
    def compute_precision(self) -> str:
        """The precision the forward runs at: frozen weights below fp32 run it under bf16 autocast,
        on the CPU too (mixed fp32/bf16 matmuls need it)."""
        return "bf16" if self.frozen_dtype != "fp32" else self.precision


def uses_lora(train: Sequence[str], stages: Sequence[Mapping] | None) -> bool:
    """Whether ``train`` (or, when given, a stage) names the ``lora`` group."""
    if stages:
        return any("lora" in (stage.get("train") or ()) for stage in stages)
    return "lora" in train


def check_train_settings(values: Mapping, key: Callable[[str], str] = training_key) -> None:
    """Check training settings together; ``key`` names a setting by its full config path (the job
    graph passes ``variants.<v>.training.<name>`` for what a variant overrides)."""
    train, seq_len, gpus = values.get("train", TrainSettings.train), values.get("seq_len", 128), values.get("gpus", 1)
    nodes, sharding = values.get("nodes", 1), values.get("sharding", "none")
    batch_size, accumulation = values["batch_size"], values.get("grad_accumulation", 1)
    unknown = set(train) - set(TRAINABLE_GROUPS)
    if unknown:
        raise ConfigError(key("train"), f"unknown parameter groups {sorted(unknown)}",
                          f"choose from {list(TRAINABLE_GROUPS)}")
    if seq_len < 8:
        raise ConfigError(key("seq_len"), f"{seq_len} is too short")
    check_precision(values.get("precision", "auto"), key("precision"))
    check_accumulation(accumulation, key("grad_accumulation"))
    if gpus < 1:
        raise ConfigError(key("gpus"), f"{gpus}: at least one process is needed")
    if not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(key("nodes"), f"{nodes!r}: at least one node is needed")
    if sharding not in SHARDINGS:
        raise ConfigError(key("sharding"), f"unknown sharding '{sharding}'", f"choose from {list(SHARDINGS)}")
    if sharding == "fsdp" and values.get("precision") == "fp16":
        # FSDP2 shards hold no fp16 loss scaler state; bf16 needs no scaling.
        raise ConfigError(key("precision"), f"fp16 (loss scaling) is not supported with {key('sharding')}: fsdp",
                          "use bf16 or fp32, or sharding: none")
    check_frozen_dtype(values, key)
    if batch_size % accumulation:
        raise ConfigError(key("grad_accumulation"), f"{key('batch_size')}: {batch_size} does not split into "
                          f"{accumulation} equal micro-steps", "make batch_size a multiple of grad_accumulation")
    processes = gpus * nodes
    if (batch_size // accumulation) % processes:
        where = f"{gpus} GPUs" if nodes == 1 else f"{nodes} nodes x {gpus} GPUs"
        raise ConfigError(key("nodes" if nodes > 1 else "gpus"), f"{batch_size // accumulation} sequences per "
                          f"language and micro-step ({key('batch_size')} / {key('grad_accumulation')}) do not split "
                          f"evenly over {where}", "make batch_size / grad_accumulation a multiple of gpus x nodes")


def check_frozen_dtype(values: Mapping, key: Callable[[str], str] = training_key) -> None:
    """What ``frozen_dtype`` cannot do, refused by its key."""
    frozen = values.get("frozen_dtype", "fp32")
    if frozen not in FROZEN_DTYPES:
        raise ConfigError(key("frozen_dtype"), f"unknown frozen dtype '{frozen}'", f"choose from {list(FROZEN_DTYPES)}")
    if frozen == "fp32":
        return
    if values.get("precision", "auto") in ("fp32", "fp16"):
        # Frozen low-precision weights meet fp32 activations only under bf16 autocast.
        raise ConfigError(key("frozen_dtype"), f"{frozen} frozen weights run the forward in bf16, "
                          f"{key('precision')} is {values['precision']}", "set precision: bf16 or auto, "
                          "or frozen_dtype: fp32")
    if values.get("sharding", "none") == "fsdp":
        # ramen.training.sharding shards fp32 weights only (each unit's all-gather at one dtype).
        raise ConfigError(key("frozen_dtype"), f"{frozen} frozen weights are not sharded ({key('sharding')}: fsdp)",
                          "use frozen_dtype: fp32 with fsdp, or sharding: none")
    if frozen != "nf4":
        return
    if values.get("gpus", 1) * values.get("nodes", 1) > 1:
        raise ConfigError(key("frozen_dtype"), "nf4 weights are not replicated over processes (DDP broadcasts "
                          "plain tensors)", "train nf4 on one GPU (gpus: 1, nodes: 1), or use frozen_dtype: bf16")
    stages = values.get("stages") or ()
    groups = [group for stage in stages for group in (stage.get("train") or ())] if stages else list(
        values.get("train", TrainSettings.train))
    if not uses_lora(values.get("train", TrainSettings.train), stages):
        raise ConfigError(key("frozen_dtype"), "nf4 freezes the blocks' linear weights, and no stage trains "
                          "LoRA adapters over them", "add lora to training.train (or a stage), or use bf16")
    trained = sorted({group for group in groups if group.startswith(BLOCK_WEIGHT_GROUPS)})
    if trained:
        raise ConfigError(key("frozen_dtype"), f"nf4 blocks' linear weights cannot train, yet "
                          f"{key('stages') if stages else key('train')} trains {trained}",
                          "train them through lora, or use frozen_dtype: bf16")


def check_training_sections(shared: Mapping, overrides: Mapping[str, Mapping | None], section: str = "training") -> None:
    """A training section of the config (``training``, ``head_warmup``) and every variant's
    settings (the section with the variant's override on top), checked as their training jobs
    will check them; a problem names the key the value comes from."""
    runs = {None: None, **overrides}
    for variant, override in runs.items():
        override = override or {}

        def key(name: str, variant=variant, override=override) -> str:
            return f"variants.{variant}.training.{name}" if name in override else f"{section}.{name}"

        values = {**shared, **override}
        check_train_settings(values, key)
        if section == "head_warmup" and uses_lora(values.get("train", ()), values.get("stages")):
            # The warm-up trains the source's own head; it adds no adapters.
            raise ConfigError(key("stages") if values.get("stages") else key("train"),
                              "the head warm-up trains no LoRA adapters", "name lora in training.train instead")
        # The stages' own checks, which the job makes once the model is built; the group names
        # are the model's, so only the job checks those.
        check_stage_ends(parse_stages(values.get("stages"), key("stages")), values["steps"], key("stages"))
