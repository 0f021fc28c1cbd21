"""Saveable, invertible per-key normalisation (state, action, ...), built from LeRobot stats.

    norm = Normalizer.from_lerobot_stats(dataset.meta.stats, {"action": "mean_std"})
    z = norm.normalize("action", a);  a == norm.unnormalize("action", z)
    json.dump(norm.state_dict(), f);  Normalizer.from_state_dict(json.load(f))

It lives next to the weights, never inside the model (STYLE.md: saveable transforms).
Works on numpy arrays and torch tensors of shape (..., D).

A joined key, `"observation.state+observation.environment_state"`, names the concatenation of its
parts along the last axis (`key_parts`); `joined_stats` gives it the parts' statistics side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

MODES = ("mean_std", "min_max", "identity")
KEY_JOIN = "+"


def key_parts(key: str) -> list[str]:
    """The dataset keys a (possibly joined) key concatenates, in order: "a+b" -> ["a", "b"]."""
    parts = key.split(KEY_JOIN)
    if not all(parts) or len(set(parts)) != len(parts):
        raise ValueError(
            f"key {key!r}: a joined key lists distinct dataset keys separated by {KEY_JOIN!r}, "
            "e.g. 'observation.state+observation.environment_state'"
        )
    return parts


def joined_stats(stats: dict[str, dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """LeRobot `meta.stats` plus an entry for a joined `key`: its parts' mean/std/min/max concatenated
    (each part keeps its own statistics). A plain key returns `stats` as it is."""
    parts = key_parts(key)
    if len(parts) == 1:
        return stats
    missing = [p for p in parts if p not in stats]
    if missing:
        raise ValueError(f"no stats for {missing} (of {key!r}); the dataset has stats for {sorted(stats)}")
    names = ("mean", "std", "min", "max")
    joined = {
        n: np.concatenate([np.asarray(stats[p][n], dtype=np.float64).reshape(-1) for p in parts])
        for n in names
    }
    return {**stats, key: joined}


@dataclass
class KeyStats:
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray

    def __post_init__(self) -> None:
        for name in ("mean", "std", "min", "max"):
            arr = np.asarray(getattr(self, name), dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"stat {name!r} has non-finite values {arr}; recompute the dataset stats")
            setattr(self, name, arr)
        if not (self.mean.shape == self.std.shape == self.min.shape == self.max.shape):
            raise ValueError("mean/std/min/max must have the same length")


@dataclass
class Normalizer:
    """`modes[key]` is one of MODES: mean_std -> (x - mean) / std; min_max -> [-1, 1] from [min, max]."""

    stats: dict[str, KeyStats]
    modes: dict[str, str] = field(default_factory=dict)
    eps: float = 1e-6

    def __post_init__(self) -> None:
        for key, mode in self.modes.items():
            if mode not in MODES:
                raise ValueError(f"mode {mode!r} for key {key!r}: choose one of {MODES}")
            if key not in self.stats:
                raise ValueError(
                    f"mode given for {key!r} but no stats for it; stats have {sorted(self.stats)}"
                )
        for key in self.stats:
            self.modes.setdefault(key, "mean_std")

    @classmethod
    def from_lerobot_stats(
        cls,
        stats: dict[str, dict[str, Any]],
        modes: dict[str, str] | None = None,
        keys: list[str] | None = None,
    ) -> Normalizer:
        """From `LeRobotDataset.meta.stats` (meta/stats.json). `keys` defaults to the keys of `modes`,
        or state + action when both are None."""
        modes = dict(modes or {})
        keys = keys or list(modes) or [k for k in ("observation.state", "action") if k in stats]
        out = {}
        for key in keys:
            if key not in stats:
                raise ValueError(f"no stats for key {key!r}; the dataset has stats for {sorted(stats)}")
            s = stats[key]
            missing = [n for n in ("mean", "std", "min", "max") if n not in s]
            if missing:
                raise ValueError(f"stats of {key!r} lack {missing}; recompute stats with LeRobot")
            out[key] = KeyStats(*(np.asarray(s[n]) for n in ("mean", "std", "min", "max")))
        return cls(out, {k: modes.get(k, "mean_std") for k in keys})

    def _params(self, key: str, x) -> tuple[Any, Any]:
        if key not in self.stats:
            raise KeyError(f"no normalisation stats for {key!r}; known keys: {sorted(self.stats)}")
        s, mode = self.stats[key], self.modes[key]
        if mode == "mean_std":
            shift, scale = s.mean, np.maximum(s.std, self.eps)
        elif mode == "min_max":  # map [min, max] -> [-1, 1]
            shift, scale = (s.max + s.min) / 2, np.maximum((s.max - s.min) / 2, self.eps)
        else:
            shift, scale = np.zeros_like(s.mean), np.ones_like(s.mean)
        if x.shape[-1] != shift.shape[0]:
            raise ValueError(f"{key!r}: last dim {x.shape[-1]} does not match stats dim {shift.shape[0]}")
        if isinstance(x, np.ndarray):
            return shift.astype(x.dtype), scale.astype(x.dtype)
        import torch

        return (
            torch.as_tensor(shift, dtype=x.dtype, device=x.device),
            torch.as_tensor(scale, dtype=x.dtype, device=x.device),
        )

    def normalize(self, key: str, x):
        shift, scale = self._params(key, x)
        return (x - shift) / scale

    def unnormalize(self, key: str, x):
        shift, scale = self._params(key, x)
        return x * scale + shift

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable."""
        return {
            "eps": self.eps,
            "modes": dict(self.modes),
            "stats": {
                k: {n: getattr(s, n).tolist() for n in ("mean", "std", "min", "max")}
                for k, s in self.stats.items()
            },
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> Normalizer:
        stats = {
            k: KeyStats(**{n: np.asarray(v[n]) for n in ("mean", "std", "min", "max")})
            for k, v in state["stats"].items()
        }
        return cls(stats, dict(state["modes"]), float(state.get("eps", 1e-6)))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.state_dict(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> Normalizer:
        return cls.from_state_dict(json.loads(Path(path).read_text()))
