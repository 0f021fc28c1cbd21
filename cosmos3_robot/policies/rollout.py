"""Closed-loop episodes of any policy in any registered env, measured one way for every policy.

    policy = WorldModelPolicy(WorldModel.from_folder("runs/reach/model"), execute=4)
    for ep in run_episodes("cosmos3_robot/Reach-v0", policy, episodes=50, seed=1000):
        print(ep.seed, ep.success, ep.steps)

A policy is anything with `reset()`, `act(obs, task) -> action` and, optionally, `seed(env_seed)`
(called after `reset()`), `prepare(task)` (called once the episode's instruction is known, before the
first action; timed on its own as the episode's `setup_ms`, not as part of the first chunk's latency;
returning False means it had nothing to run)
and `chunks`: what it planned at each re-plan (the step it planned at, the latency, and the future
frames it imagined).
`WorldModelPolicy` (our model) and `LeRobotPolicy` (a LeRobot checkpoint: ACT, Diffusion Policy)
both fit, so baselines and our model are rolled out by the same code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from cosmos3_robot.encoders.state_estimator import StateEstimator
from cosmos3_robot.policies.runners import PolicyRunner, SamplingConfig
from cosmos3_robot.policies.world_model import WorldModel


@dataclass
class Chunk:
    """One re-plan: at env step `step`, `latency_ms` to plan; the imagined future frames (uint8
    (K, H, W, 3), frame k at step + 1 + k) where the policy predicts them."""

    step: int
    latency_ms: float
    imagined: np.ndarray | None = None


class Policy(Protocol):
    chunks: list[Chunk]

    def reset(self) -> None: ...

    def act(self, obs: dict, task: str) -> np.ndarray: ...


@dataclass
class Episode:
    seed: int
    task: str
    success: bool
    steps: int
    ret: float
    frames: np.ndarray  # uint8 (steps + 1, H, W, 3): the observation before each step, then the last
    actions: np.ndarray  # (steps, A)
    chunks: list[Chunk] = field(default_factory=list)
    setup_ms: float | None = None  # the policy's `prepare(task)`; None where it has none or it ran nothing

    def chunk_errors(self) -> list[dict]:
        """Per re-plan: PSNR of the imagined future frames against the realised ones (those the
        episode reached), per frame ahead."""
        from cosmos3_robot.eval.metrics import psnr

        out = []
        for c in self.chunks:
            if c.imagined is None:
                continue
            real = self.frames[c.step + 1 : c.step + 1 + len(c.imagined)]
            if len(real) == 0:
                continue
            per_frame = [psnr(c.imagined[k], real[k]) for k in range(len(real))]
            out.append({"step": c.step, "psnr_db_per_frame_ahead": per_frame})
        return out


class WorldModelPolicy:
    """Our model in policy mode: an action chunk (and the frames it expects) every `execute` steps."""

    def __init__(self, world: WorldModel, execute: int = 4, sampling: SamplingConfig | None = None,
                 imagine: bool = False, ensemble: float | None = None,
                 estimator: StateEstimator | None = None, mode: str | None = None):  # fmt: skip
        self.runner = PolicyRunner(
            world,
            execute=execute,
            sampling=sampling or SamplingConfig(),
            ensemble=ensemble,
            estimator=estimator,
            mode=mode,
        )
        self.imagine = imagine  # decode the predicted future frames of every chunk (for recordings)
        self.chunks: list[Chunk] = []
        self._step = 0

    def reset(self) -> None:
        self.runner.reset()
        self.chunks, self._step = [], 0

    def prepare(self, task: str) -> bool:
        """The instruction's Reasoner pass, once per episode before the first observation is acted on;
        False when there is none to run (a model that shows its Reasoner the frame runs its pass in
        every plan instead)."""
        return self.runner.prepare(task) is not None

    def act(self, obs: dict, task: str) -> np.ndarray:
        planning = self.runner.needs_plan()
        action = self.runner.act(obs, task)
        if planning:
            imagined = self.runner.imagined_frames() if self.imagine else None
            self.chunks.append(Chunk(self._step, self.runner.last_plan_ms, imagined))
        self._step += 1
        return action


def start_episode(policy: Policy, seed: int) -> None:
    """Reset `policy` for the episode with env seed `seed`; a stochastic policy draws from that seed."""
    policy.reset()
    if callable(getattr(policy, "seed", None)):
        policy.seed(seed)


def run_episode(env, policy: Policy, seed: int) -> Episode:
    obs, info = env.reset(seed=seed)
    start_episode(policy, seed)
    task = env.unwrapped.task
    setup_ms = None
    if callable(getattr(policy, "prepare", None)):
        t0 = time.perf_counter()
        ran = policy.prepare(task)
        setup_ms = None if ran is False else (time.perf_counter() - t0) * 1e3
    frames, actions = [obs["pixels"]], []
    done, success, ret = False, False, 0.0
    while not done:
        action = np.asarray(policy.act(obs, task), dtype=np.float32)
        if not np.all(np.isfinite(action)):
            raise FloatingPointError(
                f"the policy returned a non-finite action {action} at step {len(actions)} (seed {seed}); "
                "its weights or inputs hold NaN"
            )
        obs, reward, terminated, truncated, info = env.step(action)
        frames.append(obs["pixels"])
        actions.append(action)
        ret += float(reward)
        success = success or bool(info.get("is_success", False))
        done = terminated or truncated
    return Episode(
        seed=seed,
        task=task,
        success=success,
        steps=len(actions),
        ret=ret,
        frames=np.stack(frames),
        actions=np.stack(actions),
        chunks=list(getattr(policy, "chunks", [])),
        setup_ms=setup_ms,
    )


def run_episodes(
    env_id: str, policy: Policy, episodes: int, seed: int = 0, image_size: int = 128, control_hz: int | None = None,
    skip: int = 0,
) -> Iterator[Episode]:  # fmt: skip
    """Episodes `skip`..`episodes - 1` with env seeds `seed + e`, one at a time (the env is closed
    when the iterator is)."""
    from cosmos3_robot.envs import make_env

    kwargs = {"image_size": image_size} | ({"control_hz": control_hz} if control_hz else {})
    env = make_env(env_id, **kwargs)
    try:
        for e in range(skip, episodes):
            yield run_episode(env, policy, seed + e)
    finally:
        env.close()
