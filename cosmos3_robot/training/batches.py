"""What the trainer needs to know about a batch, whichever data source made it.

A batch is a `ClipBatch` (Generator stage) or a text batch (Reasoner stage: `input_ids`, `lengths`,
`labels`, optional ViT inputs in `reason_kwargs`). Text batches are duck-typed so that the trainer
never imports the data pipeline (and its LeRobot / video dependencies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Protocol

from cosmos3_robot.tasks import ClipBatch

from .distributed import shard_rows

IGNORE = -100  # label of positions without loss (prompt, padding)


class DataSource(Protocol):
    """What the trainer reads: `training.data.GeneratorData`, `reasoner_data.ReasonerData`,
    `synthetic.SyntheticData`."""

    def train_batches(self, epoch: int) -> Iterator[Any]: ...

    def val_batches(self) -> list[Any]: ...

    def state(self) -> dict[str, Any]: ...


def is_text(batch: Any) -> bool:
    """A TextBatch (duck-typed: the data module is imported by nobody here)."""
    return hasattr(batch, "labels") and hasattr(batch, "input_ids") and not isinstance(batch, ClipBatch)


def batch_size(batch: Any) -> int:
    return int(batch.input_ids.shape[0])


def shard_batch(batch: Any, b: int, start: int, stop: int) -> Any:
    """Rows [start, stop) of a global batch. A TextBatch's ViT patches (N, patch_dim) are split by
    each image's grid (t·h·w patches per sample), not by their first dimension."""
    if start == 0 and stop == b:
        return batch
    kw = getattr(batch, "reason_kwargs", None) or {}
    if "pixel_values" in kw and "image_grid_thw" in kw:
        per = kw["image_grid_thw"].prod(-1).tolist()
        lo, hi = sum(per[:start]), sum(per[:stop])
        rest = {k: v for k, v in kw.items() if k not in ("pixel_values", "image_grid_thw")}
        out = shard_rows(dataclasses.replace(batch, reason_kwargs=rest), b, start, stop)
        pix = {"pixel_values": kw["pixel_values"][lo:hi], "image_grid_thw": kw["image_grid_thw"][start:stop]}
        return dataclasses.replace(out, reason_kwargs={**out.reason_kwargs, **pix})
    return shard_rows(batch, b, start, stop)


def count_tokens(batch: Any, patch: int) -> int:
    """Tokens the model processes for a batch: prompt tokens (+ Generator tokens for clips)."""
    n = int(batch.lengths.sum())
    if isinstance(batch, ClipBatch):
        b = batch.batch
        if batch.video is not None:
            _, _, t, h, w = batch.video.shape
            n += b * t * (h // patch) * (w // patch)
        if batch.action is not None:
            n += b * batch.action.shape[1]
        if batch.audio is not None:
            n += b * batch.audio.shape[1]
    return n
