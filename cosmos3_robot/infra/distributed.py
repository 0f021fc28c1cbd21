"""Data parallelism applied from outside: the model code stays single-device (docs/design.md, "Training stages" and "Layout").

    torchrun --nproc_per_node N -m cosmos3_robot.cli train ...

Every rank reads the same *global* batch from the data source (deterministic given the epoch) and
keeps its contiguous shard of rows, so rank r of N trains on rows [r·B/N, (r+1)·B/N). The wrapped
module is the trainer's loss module (whose `forward` runs the whole stage: Reasoner, task heads,
loss), so DDP/FSDP hooks see one forward per micro-batch:

  * "ddp":  DistributedDataParallel (gloo on CPU, nccl on CUDA), find_unused_parameters because a
            mode may leave a projection unused (e.g. no action tokens in "video" mode);
  * "fsdp": FSDP2 `fully_shard` per MoT layer and at the root; the layer methods the model calls
            instead of `forward` (`reason`, `generate`) are registered as FSDP forward methods.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(backend: str = "auto") -> DistInfo:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); otherwise single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(device=torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    return DistInfo(rank, world, local, torch.device(f"cuda:{local}" if cuda else "cpu"))


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def shard_rows(obj: Any, batch: int, start: int, stop: int) -> Any:
    """Rows [start, stop) of every tensor (or list/dict/dataclass of tensors) whose first dim is `batch`."""
    if isinstance(obj, Tensor):
        return obj[start:stop] if obj.ndim and obj.shape[0] == batch else obj
    if isinstance(obj, list | tuple):
        return type(obj)(shard_rows(x, batch, start, stop) for x in obj)
    if isinstance(obj, dict):
        return {k: shard_rows(v, batch, start, stop) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(
            obj,
            **{
                f.name: shard_rows(getattr(obj, f.name), batch, start, stop)
                for f in dataclasses.fields(obj)
                if f.init
            },
        )
    return obj


def rank_rows(batch: int, info: DistInfo) -> tuple[int, int]:
    if batch % info.world_size:
        raise ValueError(
            f"the global batch ({batch}) must divide evenly over {info.world_size} ranks; change data.batch_size"
        )
    per = batch // info.world_size
    return info.rank * per, (info.rank + 1) * per


def wrap(module: nn.Module, strategy: str, info: DistInfo) -> nn.Module:
    """Apply DDP or FSDP2 to `module` (the trainer's loss module) after construction."""
    if not info.enabled:
        return module
    if strategy == "ddp":
        ids = [info.device.index] if info.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(module, device_ids=ids, find_unused_parameters=True)
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        model = module.model
        for layer in model.layers:
            fully_shard(layer)
            for method in ("reason", "generate"):
                register_fsdp_forward_method(layer, method)
        fully_shard(module)
        return module
    raise ValueError(f"unknown distributed strategy {strategy!r}; choose 'ddp' or 'fsdp'")


def all_reduce_sum(x: Tensor, info: DistInfo) -> Tensor:
    """The sum over ranks, on x's own device (NCCL reduces on the rank's device only)."""
    if info.enabled:
        y = x.to(info.device, copy=True)
        dist.all_reduce(y, op=dist.ReduceOp.SUM)
        x = y.to(x.device)
    return x


def broadcast_from_main(x: Tensor, info: DistInfo) -> Tensor:
    """Rank 0's value of x on every rank, on x's own device."""
    if info.enabled:
        y = x.to(info.device, copy=True)
        dist.broadcast(y, src=0)
        x = y.to(x.device)
    return x


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def full_tensor(t: Tensor) -> Tensor:
    """A DTensor (FSDP2 shard) gathered to a plain tensor; plain tensors pass through."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
