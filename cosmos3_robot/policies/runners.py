"""Env-facing runners over a `WorldModel`: policy (`act(obs)` with an action-chunk queue), the
inverse-dynamics labeller, and the forward-dynamics model as a learned simulator.

Each runner builds a `ClipBatch` in the geometry the model was trained on, asks the matching task
head to sample, and converts back to env units. The Reasoner runs once per request; only the
Generator runs per denoising step.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.encoders.state_estimator import StateEstimator
from cosmos3_robot.flow import make_sampler
from cosmos3_robot.policies.world_model import WorldModel
from cosmos3_robot.tasks import ReasonedPrompt, make_task


@dataclass
class SamplingConfig:
    steps: int = 10
    sampler: str = "euler"
    shift: float = 1.0
    seed: int = 0
    noise_scale: float = 1.0  # the starting noise's std: < 1 samples at a lower temperature

    def __post_init__(self) -> None:
        if self.steps <= 0:
            raise ValueError(f"SamplingConfig.steps must be > 0, got {self.steps}")
        if not (np.isfinite(self.noise_scale) and self.noise_scale >= 0):
            raise ValueError(
                f"SamplingConfig.noise_scale must be a finite number >= 0, got {self.noise_scale}"
            )
        make_sampler(self.sampler)  # validates the name


def check_obs(obs: dict, task: str, state_keys: list[str] = ()) -> None:
    """Raise, in the caller's terms, unless `obs` is an env observation with pixels (and `state_keys`,
    e.g. `agent_pos`, for a state-conditioned model) and `task` a text."""
    if not isinstance(obs, dict) or "pixels" not in obs:
        keys = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
        raise ValueError(
            f"obs must be an env observation dict with a 'pixels' image (H, W, 3) uint8, got {keys}"
        )
    shape = tuple(np.shape(obs["pixels"]))
    if len(shape) != 3 or shape[-1] not in (3, 4):
        raise ValueError(
            f"obs['pixels'] must be one RGB image (H, W, 3) uint8, as the env renders it; got shape {shape}"
        )
    missing = [k for k in state_keys if k not in obs]
    if missing:
        raise ValueError(
            f"this model is conditioned on state: obs needs {', '.join(map(repr, missing))} (the env "
            f"observation its training data recorded), got keys {sorted(obs)}"
        )
    if not isinstance(task, str):
        raise ValueError(f"task must be the instruction text (a str), got {task!r}")


@dataclass
class PolicyRunner:
    """Closed-loop policy: every `execute` env steps, sample an action chunk from the current frame.

    `act(obs, task)` takes a Gymnasium observation dict (`pixels` H×W×3 uint8) and returns one action.

    With `estimator` (a `StateEstimator` of one of the model's state keys, e.g. the simulator's
    `environment_state`) that part of the state is read off the current frame and the instruction at
    every plan; the observation's own value for it is dropped unread.

    `mode` is the task head it samples: `policy` (actions and the future frames, which
    `imagined_frames` shows) or `action_policy` (actions alone, fewer tokens per step); None = the
    model's own (`WorldModel.policy_mode`).

    With `ensemble=m` it re-plans at every step and averages, for the current step, the actions of
    every chunk that covers it, the oldest weighted most: w_i = exp(-m·i), i = 0 for the oldest
    (ACT's temporal ensembling, Zhao et al. 2023); `execute` is then unused.
    """

    world: WorldModel
    execute: int = 4  # actions taken from each sampled chunk before re-planning
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    ensemble: float | None = None
    estimator: StateEstimator | None = None
    mode: str | None = None

    def __post_init__(self) -> None:
        g = self.world.geometry
        self.mode = self.mode or self.world.policy_mode
        self.world.check_policy_mode(self.mode)
        if self.estimator is not None:
            check_estimator(self.estimator, self.world)
        if self.world.actions is None:
            raise ValueError("PolicyRunner needs a world model trained with actions")
        if not 1 <= self.execute <= g.num_actions:
            raise ValueError(f"execute={self.execute} must lie in [1, {g.num_actions}] (the chunk length)")
        if g.action_step != 1:
            raise ValueError(
                f"the model predicts one action every {g.action_step} dataset frames; a closed-loop "
                "policy needs one per env step (train with action_hz = the dataset fps)"
            )
        if self.ensemble is not None:
            check_ensemble(self.ensemble)
        self.queue: deque[np.ndarray] = deque()
        self.plans: list[tuple[int, np.ndarray]] = []  # (step planned at, chunk), for ensembling
        self.t = 0  # env steps since reset
        self.last_plan_ms = 0.0  # wall time of the latest `plan` called by `act`
        self.generator = torch.Generator().manual_seed(self.sampling.seed)
        self._reasoned: tuple[str, ReasonedPrompt] | None = None  # the task text, reasoned once
        self._last_video: Tensor | None = None  # latents of the last plan (observed + imagined)

    def reset(self) -> None:
        self.queue.clear()
        self.plans, self.t = [], 0
        self._reasoned = None

    def needs_plan(self) -> bool:
        return self.ensemble is not None or not self.queue

    def add_plan(self, chunk: np.ndarray) -> None:
        """A chunk (Na, A) planned at the current step."""
        if self.ensemble is None:
            self.queue.extend(chunk[: self.execute])
        else:
            self.plans.append((self.t, chunk))

    def next_action(self) -> np.ndarray:
        """The action of the current step (from the queue, or ensembled over the live chunks)."""
        if self.ensemble is None:
            action = self.queue.popleft()
        else:
            self.plans = [(s, c) for s, c in self.plans if self.t - s < len(c)]
            preds = np.stack([c[self.t - s] for s, c in self.plans])  # oldest first
            w = np.exp(-self.ensemble * np.arange(len(preds)))
            action = (w[:, None] * preds).sum(0) / w.sum()
        self.t += 1
        return np.asarray(action, dtype=np.float32)

    def prepare(self, task: str) -> ReasonedPrompt | None:
        """The instruction's Reasoner pass, run once per task (until `reset` or another task) and
        reused by every plan under it; None for a model that shows its Reasoner the frame (each plan
        then runs its own pass). Called before the first observation is acted on, the pass is not
        part of the first plan's latency (`rollout.run_episode` times it on its own)."""
        if self.world.reads_frames:
            return None
        if self._reasoned is None or self._reasoned[0] != task:
            self._reasoned = (task, self.world.reasoned_text(task))
        return self._reasoned[1]

    def plan(self, pixels: np.ndarray, task: str, state: np.ndarray | None = None) -> np.ndarray:
        """One frame (H, W, 3) uint8 (+ the state (S,) at it, for a state-conditioned model) -> an
        action chunk (Na, A) in env units.

        The Reasoner reads only the task text, so it runs once per task (`prepare`, here on the
        first plan unless called before) and its cache serves the following plans."""
        self.world.require_state(state, "a policy plan")
        frames = torch.as_tensor(np.ascontiguousarray(pixels))[None, None]  # (1, 1, H, W, 3)
        state = None if state is None else np.asarray(state)[None]
        batch = self.world.clip_batch(
            [task], self.world.encode_frames(frames), obs_frames=1, state=state, frames=frames[:, 0]
        )
        if self.world.reads_frames:  # the Reasoner reads this frame: its pass is this plan's own
            reasoned = self.world.reasoned(batch)
        else:
            reasoned = self.prepare(task)
        out = sample_mode(self.world, self.mode, batch, self.sampling, self.generator, reasoned)
        self._last_video = out["video"] if self.mode == "policy" else None
        actions = self.world.raw_actions(out["action"])[0]
        if not np.all(np.isfinite(actions)):
            raise FloatingPointError(
                "the model produced non-finite actions: its weights or the observation hold NaN/inf"
            )
        return actions

    def imagined_frames(self) -> np.ndarray | None:
        """The future frames the last plan predicted, uint8 (K, H, W, 3), frame k one env step
        after frame k - 1; None before the first plan, when clip frames are not env steps, or in the
        `action_policy` mode (it imagines none)."""
        if self._last_video is None or self.world.geometry.frame_step != 1:
            return None
        frames = self.world.decode_latents(self._last_video)[0, 1:]  # (K, 3, H, W) after the observed
        return frames.permute(0, 2, 3, 1).numpy()

    def act(self, obs: dict, task: str) -> np.ndarray:
        keys = self.world.state_obs_keys
        if self.estimator is not None:
            estimated = self.estimator.config.obs_key
            obs = {k: v for k, v in obs.items() if k != estimated}  # never read, even by mistake
            keys = [k for k in keys if k != estimated]
        check_obs(obs, task, keys)
        if self.needs_plan():
            t0 = time.perf_counter()
            if self.estimator is not None:
                obs[estimated] = self.estimator.estimate(obs["pixels"], task)
            chunk = self.plan(obs["pixels"], task, self.world.obs_state(obs))
            self.last_plan_ms = (time.perf_counter() - t0) * 1e3
            self.add_plan(chunk)
        return self.next_action()


def check_ensemble(weight: float) -> None:
    """Refuse a temporal-ensembling weight that is not a finite decay >= 0 (ours and ACT's alike)."""
    if not (np.isfinite(weight) and weight >= 0):
        raise ValueError(f"ensemble={weight} must be a finite weight decay >= 0 (ACT uses 0.01)")


def check_estimator(estimator: StateEstimator, world: WorldModel) -> None:
    """Refuse, before any episode, an estimator of a state the model does not read or of frames of
    another size than the model's."""
    c = estimator.config
    if c.obs_key not in world.state_obs_keys:
        have = world.state.key if world.state is not None else "no state"
        raise ValueError(
            f"the state estimator estimates {c.state_key}, but the model is conditioned on {have}; train the "
            f"model with +data.options.state_key including {c.state_key}, or drop the estimator"
        )
    if c.image_size != world.geometry.image_size:
        raise ValueError(
            f"the state estimator reads {c.image_size} px frames and the model {world.geometry.image_size} px; "
            "train both on the same dataset"
        )


def sample_mode(
    world: WorldModel,
    mode: str,
    batch,
    sampling: SamplingConfig,
    generator: torch.Generator | None = None,
    prompt: ReasonedPrompt | None = None,
) -> dict[str, Tensor]:
    """Sample `mode` with `sampling`; noise from `generator`, else a fresh one seeded by sampling.seed;
    the instruction (and shown frame) from `prompt` when it is already reasoned."""
    return make_task(mode).sample(
        world.model,
        batch,
        make_sampler(sampling.sampler),
        sampling.steps,
        shift=sampling.shift,
        generator=generator if generator is not None else torch.Generator().manual_seed(sampling.seed),
        prompt=prompt if prompt is not None else world.reasoned(batch),
        noise_scale=sampling.noise_scale,
    )


@dataclass
class InverseDynamicsLabeller:
    """Action-free video -> actions. Clips of the trained length are labelled one after another."""

    world: WorldModel
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def label_clip(self, frames: Tensor, task: str) -> np.ndarray:
        """frames uint8 (T, H, W, 3) with T = the trained clip length -> the actions the frames show
        (ClipGeometry.visible_actions, A)."""
        g = self.world.geometry
        if frames.shape[0] != g.num_frames:
            raise ValueError(
                f"a clip must have {g.num_frames} frames (the trained clip length), got {frames.shape[0]}"
            )
        latents = self.world.encode_frames(frames[None])
        batch = self.world.clip_batch([task], latents, obs_frames=g.latent_frames, frames=frames[:1])
        out = sample_mode(self.world, "inverse_dynamics", batch, self.sampling)
        return self.world.raw_actions(out["action"])[0, : g.visible_actions]


@dataclass
class LearnedSimulator:
    """Forward dynamics: the current frame + an action chunk -> the future frames."""

    world: WorldModel
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def predict(self, frames: Tensor, actions: Tensor, task: str, state=None) -> Tensor:
        """frames uint8 (B, T_obs, H, W, 3) observed; actions raw (B, Na, A); state raw (B, S) at the
        first frame (state-conditioned models) -> latents (B, C, T_lat, h, w)."""
        self.world.require_state(state, "forward dynamics")
        latents = self.world.encode_frames(frames)
        batch = self.world.clip_batch(
            [task] * frames.shape[0],
            latents,
            actions=actions,
            obs_frames=latents.shape[2],
            state=state,
            frames=frames[:, 0],
        )
        return sample_mode(self.world, "forward_dynamics", batch, self.sampling)["video"]
