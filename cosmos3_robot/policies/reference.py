"""Reference policies for a benchmark's floor: what success needs no learning at all.

    RandomPolicy(action_dim)  uniform actions in [-1, 1]^A, seeded by the episode's env seed
    ZeroPolicy(action_dim)    the zero action every step (the arm stays where it starts)
    OpenLoopExpert(env_id, noise)
                              the scripted expert's plan for the episode's seed, replayed blind
                              with Gaussian noise of std `noise` added to every action

All fit `policies.rollout.Policy`: `rollout --policy random|zero` measures the first two on the
same seeds and by the same code as a trained policy. OpenLoopExpert never reads its observations: it
takes the same actions in any simulator, the real one or a learned one, which makes a family of
them at rising noise a graded set of policies for judging a learned simulator (`benchmark
imagination`).
"""

from __future__ import annotations

import numpy as np

from cosmos3_robot.envs import make_env, make_expert


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


class OpenLoopExpert:
    """The clean scripted expert's actions for the episode's env seed, computed in a private copy
    of the real env at `seed()`, then replayed whatever the observations show, each action plus
    N(0, noise^2) drawn from numpy's generator seeded [s, 2] and clipped to [-1, 1]. The plan ends
    where the expert's episode ended (success or the time limit); after it, the zero action.
    Deterministic per seed."""

    def __init__(
        self, env_id: str, noise: float, image_size: int = 64, control_hz: int | None = None
    ) -> None:
        if not (np.isfinite(noise) and noise >= 0):
            raise ValueError(f"noise={noise} must be a finite std >= 0 in action units")
        self.noise = float(noise)
        kwargs = {"image_size": image_size} | ({"control_hz": control_hz} if control_hz else {})
        self._env = make_env(env_id, **kwargs)
        self.action_dim = int(self._env.action_space.shape[0])
        self.chunks: list = []
        self.plan = np.zeros((0, self.action_dim), np.float32)
        self._t = 0

    def seed(self, seed: int) -> None:
        env = self._env
        env.reset(seed=seed)
        expert = make_expert(env, noise=0.0)
        plan, done = [], False
        while not done:
            a = expert.act()
            plan.append(a)
            _, _, terminated, truncated, _ = env.step(a)
            done = terminated or truncated
        noise = np.random.default_rng([seed, 2]).normal(0.0, 1.0, (len(plan), self.action_dim)) * self.noise
        self.plan = np.clip(np.stack(plan) + noise, -1.0, 1.0).astype(np.float32)
        self._t = 0

    def reset(self) -> None:
        self.chunks = []
        self._t = 0

    def act(self, obs: dict, task: str) -> np.ndarray:
        t, self._t = self._t, self._t + 1
        return self.plan[t] if t < len(self.plan) else np.zeros(self.action_dim, np.float32)

    def close(self) -> None:
        self._env.close()
