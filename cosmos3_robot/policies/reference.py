"""Reference policies for a benchmark's floor: what success needs no learning at all.

    RandomPolicy(action_dim)  uniform actions in [-1, 1]^A, seeded by the episode's env seed
    ZeroPolicy(action_dim)    the zero action every step (the arm stays where it starts)

Both fit `policies.rollout.Policy`, so `rollout --policy random|zero` measures them on the same
seeds and by the same code as a trained policy.
"""

from __future__ import annotations

import numpy as np


class RandomPolicy:
    """Uniform random actions; episode with env seed s draws from numpy's generator seeded [s, 1]."""

    def __init__(self, action_dim: int) -> None:
        self.action_dim = action_dim
        self.chunks: list = []
        self._rng = np.random.default_rng(0)

    def seed(self, seed: int) -> None:
        self._rng = np.random.default_rng([seed, 1])

    def reset(self) -> None:
        self.chunks = []

    def act(self, obs: dict, task: str) -> np.ndarray:
        return self._rng.uniform(-1.0, 1.0, self.action_dim).astype(np.float32)


class ZeroPolicy:
    """The zero action at every step."""

    def __init__(self, action_dim: int) -> None:
        self.action_dim = action_dim
        self.chunks: list = []

    def reset(self) -> None:
        self.chunks = []

    def act(self, obs: dict, task: str) -> np.ndarray:
        return np.zeros(self.action_dim, dtype=np.float32)
