"""Action transforms: per-dataset normalisation, padding to a shared width, embodiment ids.

Robots with different action spaces share one model: each dataset's actions (N, D) are
normalised with that dataset's statistics, zero-padded to the model's fixed `action_width` with a
boolean mask saying which entries are real, and tagged with an integer embodiment id (the model
keeps one action projection per embodiment, as C3 does). The transform is a saveable,
json-able object that travels with the checkpoint and is applied outside the model, symmetric
for inputs (`encode`) and outputs (`decode`).

    raw (..., D) ──normalise──► (..., D) in ≈[-1, 1] ──pad──► (..., W), mask (W,)   [encode]
    model output (..., W) ──drop padding──► (..., D) ──unnormalise──► raw (..., D)  [decode]

Both normalisation modes are one affine map y = (x - center) / scale, evaluated in float64:
    mean_std: center = mean,              scale = std
    min_max:  center = (max + min) / 2,   scale = (max - min) / 2   (maps [min, max] to [-1, 1])
A dimension that never moves (scale below `eps`) gets scale 1, so it maps to x - center (≈ 0)
instead of dividing by zero, and stays invertible.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor

NORM_MODES = ("mean_std", "min_max")


def _vec(value: Any, name: str) -> list[float]:
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    if arr.size == 0 or not np.isfinite(arr).all():
        raise ValueError(f"action statistic {name!r} must be a non-empty finite vector, got {value!r}")
    return [float(v) for v in arr]


@dataclass
class ActionNormalizer:
    """Per-dimension affine normalisation of one dataset's actions; exactly invertible.

    Build it with `fit(actions)` or `from_stats(stats)` (LeRobot's `meta.stats["action"]` works).
    `normalize` / `unnormalize` compute in float64 and return the input's dtype, so the round trip
    is exact up to float64 rounding (≈1e-16 relative) for float64 input and to float32 rounding
    for float32 input.
    """

    mode: str
    center: list[float]
    scale: list[float]
    eps: float = 1e-6

    def __post_init__(self) -> None:
        if self.mode not in NORM_MODES:
            raise ValueError(f"ActionNormalizer.mode must be one of {NORM_MODES}, got {self.mode!r}")
        self.center = _vec(self.center, "center")
        self.scale = _vec(self.scale, "scale")
        if len(self.center) != len(self.scale):
            raise ValueError(f"center has {len(self.center)} dims but scale has {len(self.scale)}")
        if min(self.scale) <= 0:
            raise ValueError("ActionNormalizer.scale must be > 0 in every dimension")

    @property
    def dim(self) -> int:
        return len(self.center)

    @classmethod
    def from_stats(cls, stats: dict[str, Any], mode: str = "min_max", eps: float = 1e-6) -> ActionNormalizer:
        """From statistics {mean, std} or {min, max} (extra keys are ignored)."""
        if mode == "mean_std":
            center = np.asarray(_vec(stats["mean"], "mean"))
            spread = np.asarray(_vec(stats["std"], "std"))
        elif mode == "min_max":
            lo, hi = np.asarray(_vec(stats["min"], "min")), np.asarray(_vec(stats["max"], "max"))
            if (hi < lo).any():
                raise ValueError("action stats have max < min in some dimension")
            center, spread = (hi + lo) / 2, (hi - lo) / 2
        else:
            raise ValueError(f"mode must be one of {NORM_MODES}, got {mode!r}")
        scale = np.where(spread < eps, 1.0, spread)
        return cls(mode=mode, center=center.tolist(), scale=scale.tolist(), eps=eps)

    @classmethod
    def fit(cls, actions: Tensor | np.ndarray, mode: str = "min_max", eps: float = 1e-6) -> ActionNormalizer:
        """Statistics of actions (N, D) (or (..., D), flattened)."""
        a = torch.as_tensor(actions, dtype=torch.float64).reshape(-1, torch.as_tensor(actions).shape[-1])
        stats = {
            "mean": a.mean(0),
            "std": a.std(0, unbiased=False),
            "min": a.amin(0),
            "max": a.amax(0),
        }
        return cls.from_stats({k: v.numpy() for k, v in stats.items()}, mode=mode, eps=eps)

    def _check(self, x: Tensor) -> None:
        if x.shape[-1] != self.dim:
            raise ValueError(f"actions have {x.shape[-1]} dims on the last axis but this normaliser has {self.dim}")

    def normalize(self, actions: Tensor) -> Tensor:
        self._check(actions)
        x = actions.to(torch.float64)
        center = torch.tensor(self.center, dtype=torch.float64, device=x.device)
        scale = torch.tensor(self.scale, dtype=torch.float64, device=x.device)
        return ((x - center) / scale).to(actions.dtype)

    def unnormalize(self, normalized: Tensor) -> Tensor:
        self._check(normalized)
        y = normalized.to(torch.float64)
        center = torch.tensor(self.center, dtype=torch.float64, device=y.device)
        scale = torch.tensor(self.scale, dtype=torch.float64, device=y.device)
        return (y * scale + center).to(normalized.dtype)

    def state_dict(self) -> dict[str, Any]:
        """Plain json-able dict; Python floats round-trip through json exactly."""
        return {"mode": self.mode, "center": list(self.center), "scale": list(self.scale), "eps": self.eps}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ActionNormalizer:
        return cls(**state)


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
    width: the model's shared action width (padding target); normalizer: this dataset's statistics.
    """

    name: str
    embodiment_id: int
    width: int
    normalizer: ActionNormalizer

    def __post_init__(self) -> None:
        if self.embodiment_id < 0:
            raise ValueError(f"embodiment_id must be >= 0, got {self.embodiment_id}")
        if self.normalizer.dim > self.width:
            raise ValueError(
                f"dataset {self.name!r} has {self.normalizer.dim} action dims but the action width is "
                f"{self.width}; raise the width to at least {self.normalizer.dim}"
            )

    @property
    def dim(self) -> int:
        return self.normalizer.dim

    def encode(self, actions: Tensor) -> tuple[Tensor, Tensor]:
        """Raw actions (..., D) -> normalised, padded (..., width) and the mask (width,)."""
        return pad_actions(self.normalizer.normalize(actions), self.width)

    def decode(self, padded: Tensor) -> Tensor:
        """Model actions (..., width) -> raw actions (..., D); the padded entries are dropped."""
        return self.normalizer.unnormalize(unpad_actions(padded, self.dim))

    def state_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "embodiment_id": self.embodiment_id,
            "width": self.width,
            "normalizer": self.normalizer.state_dict(),
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> ActionTransform:
        state = dict(state)
        state["normalizer"] = ActionNormalizer.from_state_dict(state["normalizer"])
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
