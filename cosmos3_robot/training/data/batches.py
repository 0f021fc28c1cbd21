"""What the trainer needs to know about a batch, whichever data source made it.

A batch is a `ClipBatch` (Generator stage) or a `TextBatch` (Reasoner stage: `input_ids`,
`lengths`, `labels`, optional ViT inputs in `reason_kwargs`). Both are defined without the data
pipeline, so the trainer never imports it (and its LeRobot / video dependencies).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from torch import Tensor

from cosmos3_robot.infra.distributed import shard_rows
from cosmos3_robot.processors.data_state import DataState
from cosmos3_robot.tasks import ClipBatch

IGNORE = -100  # label of positions without loss (prompt, padding)


class DataSource(Protocol):
    """What the trainer reads: `generator_data.GeneratorData`, `reasoner_data.ReasonerData`,
    `synthetic.SyntheticData`."""

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        """The epoch's batches from the `start`-th on (a resumed run), the same ones whatever `start`."""
        ...

    def val_batches(self) -> list[Any]: ...

    def state(self) -> DataState: ...


@dataclass
class TextBatch:
    """A Reasoner batch: prompt (+ image) -> answer, next-token labels on the answer only.

    labels[b, t] is the token at t + 1 when that token belongs to the answer (its EOS included),
    else -100; so `cross_entropy(logits[b, t], labels[b, t])` over all t is the answer's NLL.

    `reason_kwargs` is empty for text-only batches. With images it holds the ViT inputs
    (`pixel_values` (N, patch_dim), `image_grid_thw` (B, 3)), which are not MoT.reason arguments:
    the ViT is trained in this stage, so it must run inside the training step. Call
    `reasoner_inputs(model, vit)` for the full keyword arguments of `MoT.reason` in both cases.
    """

    input_ids: Tensor  # (B, L) right-padded
    lengths: Tensor  # (B,)
    labels: Tensor  # (B, L)
    reason_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def batch(self) -> int:
        return self.input_ids.shape[0]

    @property
    def has_images(self) -> bool:
        return "pixel_values" in self.reason_kwargs

    def to(self, device) -> TextBatch:
        kw = {k: v.to(device) if isinstance(v, Tensor) else v for k, v in self.reason_kwargs.items()}
        return replace(
            self,
            input_ids=self.input_ids.to(device),
            lengths=self.lengths.to(device),
            labels=self.labels.to(device),
            reason_kwargs=kw,
        )

    def reasoner_inputs(self, model, vit=None) -> dict[str, Any]:
        """Keyword arguments of `model.reason(...)` (add `logits=True` etc. as needed)."""
        from cosmos3_robot.encoders.vision_inputs import reasoner_kwargs

        return reasoner_kwargs(model, vit, self.input_ids, self.lengths, self.reason_kwargs)


def is_text(batch: Any) -> bool:
    return isinstance(batch, TextBatch)


def batch_size(batch: Any) -> int:
    return int(batch.input_ids.shape[0])


def shard_batch(batch: Any, b: int, start: int, stop: int) -> Any:
    """Rows [start, stop) of a global batch. ViT patches (N, patch_dim), a TextBatch's
    `reason_kwargs` or a ClipBatch's shown frames (`images`), are split by each image's grid
    (t·h·w patches per sample, one image per sample), not by their first dimension."""
    if start == 0 and stop == b:
        return batch
    from cosmos3_robot.encoders.vision_inputs import select_images

    name = "reason_kwargs" if isinstance(batch, TextBatch) else "images"
    kw = getattr(batch, name, None) or {}
    if "pixel_values" in kw and "image_grid_thw" in kw:
        out = shard_rows(dataclasses.replace(batch, **{name: {}}), b, start, stop)
        return dataclasses.replace(out, **{name: select_images(kw, list(range(start, stop)))})
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
        if batch.state is not None:
            n += b * batch.state.shape[1]
    return n
