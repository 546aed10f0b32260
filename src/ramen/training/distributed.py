"""Several processes (torchrun, one per GPU): a process's place in the job, joining the process
group, DDP, and each process's share of a step's micro-batches, weighted so that DDP's average of
the processes' gradients is the gradient of the whole batch's mean loss."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from ramen.errors import ConfigError


@dataclass
class Processes:
    """This process's place in a torchrun job (rank 0 of 1 without one)."""

    rank: int = 0
    world: int = 1
    control: object = None  # a gloo group for CPU-side agreement (stop flags, barriers)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def any(self, flag: bool) -> bool:
        """True on every process when ``flag`` is true on any (a signal may reach them at different steps)."""
        if self.world == 1:
            return flag
        import torch.distributed as dist

        value = torch.tensor([int(flag)])
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self.control)
        return bool(value.item())

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier(group=self.control)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
        return tensor

    def same(self, value: int, what: str) -> None:
        """Fail loudly when processes disagree (e.g. on the step they resumed from)."""
        if self.world == 1:
            return
        import torch.distributed as dist

        values = torch.tensor([value, -value])
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.control)
        if int(values[0]) != -int(values[1]):
            raise RuntimeError(f"processes disagree on {what}: from {-int(values[1])} to {int(values[0])}")


def join_processes(distributed: bool, device: str, setting: str = "training.distributed"
                   ) -> tuple[Processes, str]:
    """Join torchrun's process group when started by it; return this process's place and device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Processes(), device
    if not distributed:
        raise ConfigError(setting, f"started by torchrun with {world} processes but distributed "
                          "training is off", "set training.gpus in the workflow, or distributed: true")
    import torch.distributed as dist

    cuda = device.startswith("cuda")
    if cuda:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if cuda else "gloo")
    control = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
    return Processes(rank=dist.get_rank(), world=dist.get_world_size(), control=control), device


def is_main_process() -> bool:
    """False on torchrun's processes other than rank 0 (they write no files)."""
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def wrap_ddp(model: nn.Module, device: str) -> nn.Module:
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    # The model's buffers (position ids) are constants: no need to broadcast them before every forward.
    options = inspect.signature(DistributedDataParallel).parameters
    buffers = {"forward_sync_buffers": False} if "forward_sync_buffers" in options else {"broadcast_buffers": False}
    device_ids = [torch.device(device).index] if device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=device_ids, **buffers)


# --- the batches of a step ---------------------------------------------------------------------

def shard_batch(batch, rank: int, world: int):
    """Rows ``rank::world`` of a batch (anything with ``apply``): each process's share."""
    if world == 1:
        return batch
    return batch.apply(lambda tensor: tensor[rank::world])


@dataclass
class MicroBatch:
    """This process's share of one micro-step, ready for the model."""

    batches: dict  # by batch key: a language, or an objective's own key (translation pairs)
    weights: dict[str, float]  # this share's targets / the whole micro-step's, times the world size
    tokens: int  # non-padding tokens of the whole micro-step (all processes)


def prepare_step(make_batches: Callable[[int, int], Mapping], step: int, accumulation: int = 1, rank: int = 0,
                 world: int = 1, pin: bool = False) -> list[MicroBatch]:
    """Every micro-batch of a step for one process (a pure function of its arguments).

    ``make_batches(step, micro)`` draws the whole micro-step's batches by key; each batch has
    ``apply(function)``, ``targets()`` (the tokens its loss averages over) and ``tokens()``.
    """
    micros = []
    for micro in range(accumulation):
        full = make_batches(step, micro)
        batches, weights = {}, {}
        for key, batch in full.items():
            share = shard_batch(batch, rank, world)
            if world > 1:
                # A process's mean loss weighted by its share of the targets, so that DDP's average
                # of the processes' gradients is the gradient of the whole micro-step's mean loss.
                weights[key] = share.targets() * world / batch.targets()
            else:
                weights[key] = 1.0
            if pin:
                share = share.apply(torch.Tensor.pin_memory)
            batches[key] = share
        micros.append(MicroBatch(batches, weights, sum(b.tokens() for b in full.values())))
    return micros
