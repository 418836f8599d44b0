"""Where a run executes: the device check, DDP under ``torchrun`` and the few collective operations.

Every process draws the same global batch and keeps its slice (see :mod:`.trainer`), so the only
communication besides DDP's gradient all-reduce is the mean of the logged loss and the gathering of
every rank's RNG state for a checkpoint.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from attnscope.devices import check_device  # noqa: F401  (the trainer checks --device through here)


@dataclass
class Dist:
    """This process's place in the job (rank 0 of 1 without torchrun)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed(device: str) -> Dist:
    """DDP under torchrun (gloo on CPU, nccl on CUDA); a single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if str(device).startswith("cuda") else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size())


def gather_rng(d: Dist):
    """Every rank's torch RNG state stacked [world, n] (ranks drop out differently)."""
    import torch

    mine = torch.get_rng_state()
    if d.world == 1:
        return mine[None]
    import torch.distributed as dist

    out = [None] * d.world
    dist.all_gather_object(out, mine)
    return torch.stack(out)


def mean_across(x, d: Dist):
    """The mean of the tensor ``x`` over all ranks, left on its device (``x`` itself in one process)."""
    if d.world == 1:
        return x
    import torch.distributed as dist

    t = x.detach().clone()
    dist.all_reduce(t)
    return t / d.world
