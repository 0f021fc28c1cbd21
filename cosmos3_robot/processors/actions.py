"""Action transforms: per-dataset normalisation, padding to a shared width, embodiment ids.

Robots with different action spaces share one model: each dataset's actions (N, D) are
normalised with that dataset's statistics, zero-padded to the model's fixed `action_width` with a
boolean mask saying which entries are real, and tagged with an integer embodiment id (the model
keeps one action projection per embodiment, as C3 does). The transform is a saveable,
json-able object that travels with the checkpoint and is applied outside the model, symmetric
for inputs (`encode`) and outputs (`decode`).

    raw (..., D) ──normalise──► (..., D) in ≈[-1, 1] ──pad──► (..., W), mask (W,)   [encode]
    model output (..., W) ──drop padding──► (..., D) ──unnormalise──► raw (..., D)  [decode]

Normalisation is `processors.normalize.Normalizer` (one affine map per key: mean_std, or min_max
onto [-1, 1]); this module only evaluates it in float64, so that `decode(encode(a))` returns `a`
up to float64 rounding (≈1e-16 relative) for float64 actions and to float32 rounding for float32
actions, whatever the magnitude of the statistics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.processors.normalize import KeyStats, Normalizer

ACTION_KEY = "action"


def action_normalizer(
    actions: Tensor | np.ndarray, mode: str = "min_max", key: str = ACTION_KEY
) -> Normalizer:
    """A `Normalizer` for `key` fitted on actions (N, D) (or (..., D), flattened)."""
    a = np.asarray(torch.as_tensor(actions).detach().cpu(), dtype=np.float64)
    a = a.reshape(-1, a.shape[-1])
    stats = KeyStats(mean=a.mean(0), std=a.std(0), min=a.min(0), max=a.max(0))
    return Normalizer({key: stats}, {key: mode})


def pad_actions(actions: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Zero-pad actions (..., D) to (..., width); mask (width,) is True on the D real entries."""
    dim = actions.shape[-1]
    if dim > width:
        raise ValueError(
            f"actions have {dim} dims but the model's action width is {width}; raise the model's "
            f"action width to at least {dim}"
        )
    padded = actions.new_zeros(*actions.shape[:-1], width)
    padded[..., :dim] = actions
    mask = torch.zeros(width, dtype=torch.bool, device=actions.device)
    mask[:dim] = True
    return padded, mask


def unpad_actions(padded: Tensor, dim: int) -> Tensor:
    """Inverse of `pad_actions`: the first `dim` entries of the last axis."""
    if dim > padded.shape[-1]:
        raise ValueError(f"cannot take {dim} action dims from a padded width of {padded.shape[-1]}")
    return padded[..., :dim]


@dataclass
class ActionTransform:
    """Everything the model needs to know about one dataset's actions (saved with the checkpoint).

    name: the dataset (LeRobot repo id) or robot; embodiment_id: index of its action projection;
    width: the model's shared action width (padding target); normalizer: this dataset's
    statistics (`processors.normalize.Normalizer`), read under `key`.
    """

    name: str
    embodiment_id: int
    width: int
    normalizer: Normalizer
    key: str = ACTION_KEY

    def __post_init__(self) -> None:
        if self.embodiment_id < 0:
            raise ValueError(f"embodiment_id must be >= 0, got {self.embodiment_id}")
        if self.key not in self.normalizer.stats:
            raise ValueError(
                f"the normaliser has no stats for {self.key!r}; it has {sorted(self.normalizer.stats)}"
            )
        if self.dim > self.width:
            raise ValueError(
                f"dataset {self.name!r} has {self.dim} {self.key} dims but the model's {self.key} width is "
                f"{self.width}; raise the width to at least {self.dim}"
            )

    @classmethod
    def fit(
        cls, name: str, embodiment_id: int, width: int, actions: Tensor, mode: str = "min_max"
    ) -> ActionTransform:
        return cls(name, embodiment_id, width, action_normalizer(actions, mode))

    @property
    def dim(self) -> int:
        return int(self.normalizer.stats[self.key].mean.shape[0])

    def normalize(self, actions: Tensor) -> Tensor:
        """(..., D) raw -> (..., D) normalised; float64 arithmetic, the input's dtype out."""
        self._check(actions)
        return self.normalizer.normalize(self.key, actions.to(torch.float64)).to(actions.dtype)

    def unnormalize(self, normalized: Tensor) -> Tensor:
        self._check(normalized)
        return self.normalizer.unnormalize(self.key, normalized.to(torch.float64)).to(normalized.dtype)

    def _check(self, x: Tensor) -> None:
        if x.shape[-1] != self.dim:
            raise ValueError(
                f"{self.key} has {x.shape[-1]} dims on the last axis but {self.name!r} has {self.dim}"
            )

    def encode(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Raw actions (..., D) -> normalised, padded (..., width) and the mask (width,)."""
        return pad_actions(self.normalize(actions), self.width)

    def decode(self, padded: Tensor) -> Tensor:
        """Model actions (..., width) -> raw actions (..., D); the padded entries are dropped."""
        return self.unnormalize(unpad_actions(padded, self.dim))

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "embodiment_id": self.embodiment_id,
            "width": self.width,
            "key": self.key,
            "normalizer": self.normalizer.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ActionTransform:
        state = dict(state)
        state["normalizer"] = Normalizer.from_state_dict(state["normalizer"])
        return cls(**state)


@dataclass
class EmbodimentRegistry:
    """Stable name -> embodiment id map (ids in order of first registration), saved with the model."""

    ids: dict[str, int] = field(default_factory=dict)

    def id_for(self, name: str) -> int:
        """The id of `name`, registering it with the next free id the first time it is seen."""
        if name not in self.ids:
            self.ids[name] = len(self.ids)
        return self.ids[name]

    def check_fits(self, num_embodiments: int) -> None:
        if len(self.ids) > num_embodiments:
            raise ValueError(
                f"{len(self.ids)} embodiments are registered ({sorted(self.ids)}) but the model has "
                f"{num_embodiments} action projections; raise the model's num_embodiments"
            )

    def state_dict(self) -> dict[str, int]:
        return dict(self.ids)

    @classmethod
    def from_state_dict(cls, state: dict[str, int]) -> EmbodimentRegistry:
        ids = {str(k): int(v) for k, v in state.items()}
        if sorted(ids.values()) != list(range(len(ids))):
            raise ValueError(f"embodiment ids must be 0..N-1 without gaps, got {ids}")
        return cls(ids)

    def to_json(self) -> str:
        return json.dumps(self.ids, sort_keys=True)
