"""The world model as a simulator: a Gymnasium env whose observations are the model's predicted frames.

    env = gymnasium.make("cosmos3_robot/Learned-v0", model="runs/reach/model", env="cosmos3_robot/Reach-v0")
    obs, info = env.reset(seed=0)       # a real first frame: the real env's reset, rendered
    obs, reward, terminated, truncated, info = env.step(action)   # the frame the model imagines next

Each step runs forward dynamics once: the current frame is the observed latent frame, the action
is the clip's first action (held for the rest of the clip's actions, which the model needs but
which come after the frame used), and the decoded frame one env step ahead becomes the new
observation. Observations stay in imagination from the first step on: the real env is only used
for its reset, its spaces, its task text and its time limit. Success is judged in imagination when
the model folder holds a success probe (`success_probe/`, `cosmos3-robot train-probe`): an imagined
frame it calls a success sets `info["is_success"]`, reward 1 and `terminated`; without one, reward
is 0, `terminated` False and `is_success` absent. `truncated` comes at the real env's time limit.
Sampling noise is seeded by the reset seed, so a seeded episode repeats exactly.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces

from cosmos3_robot.policies.runners import SamplingConfig, sample_mode
from cosmos3_robot.policies.world_model import WorldModel


class LearnedEnv(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, model: str, env: str, steps: int = 10, render_mode: str | None = "rgb_array"):
        from cosmos3_robot.envs import make_env

        self.world = WorldModel.from_folder(model)
        if self.world.actions is None:
            raise ValueError(f"{model} was trained without actions: it cannot simulate their effect")
        if self.world.needs_state:
            raise ValueError(
                f"{model} is conditioned on proprioceptive state, which a learned simulator does not predict "
                "(it imagines pixels only); use a model trained without state (model.state_dim=null)"
            )
        self.world.check_env(env)
        g = self.world.geometry
        if g.frame_step != 1 or g.action_step != 1:
            raise ValueError("a learned simulator needs a model whose clip frames and actions are env steps")
        self.real = make_env(env, image_size=g.image_size, control_hz=int(g.fps))
        self.max_steps = int(self.real.unwrapped.max_steps)
        self.sampling = SamplingConfig(steps=steps)
        self.render_mode = render_mode
        self.metadata = {**self.metadata, "render_fps": int(g.fps)}
        self.action_space = self.real.action_space
        size = g.image_size
        self.observation_space = spaces.Dict({"pixels": spaces.Box(0, 255, (size, size, 3), np.uint8)})
        self.task = ""
        self._frame: np.ndarray | None = None
        self._steps = 0
        self._gen = torch.Generator().manual_seed(0)
        from pathlib import Path

        from cosmos3_robot.policies.success_probe import PROBE_DIR, SuccessProbe

        probe_dir = Path(model) / PROBE_DIR
        self.probe = SuccessProbe.load(probe_dir) if probe_dir.exists() else None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, _ = self.real.reset(seed=seed)
        self.task = self.real.unwrapped.task
        self._frame = obs["pixels"]
        self._steps = 0
        self._gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
        return {"pixels": self._frame.copy()}, {"task": self.task, "imagined": False}

    def step(self, action):
        if self._frame is None:
            raise RuntimeError("call reset() before step()")
        action = np.clip(np.asarray(action, dtype=np.float32).reshape(self.action_space.shape), -1.0, 1.0)
        g = self.world.geometry
        self._frame = self._imagine(np.repeat(action[None], g.num_actions, axis=0))[0]  # one env step ahead
        self._steps += 1
        truncated = self._steps >= self.max_steps
        info = {"task": self.task, "imagined": True}
        success = False
        if self.probe is not None:
            success = bool(self.probe.predict(self.world, self._frame[None])[0])
            info["is_success"] = success
        return {"pixels": self._frame.copy()}, float(success), success, truncated and not success, info

    def rollout_plan(self, seed: int, plan: np.ndarray) -> tuple[bool, int]:
        """(success, steps) of an open-loop action plan (T, A) in imagination, a clip at a time.

        From the real reset frame of `seed`, forward dynamics predicts the clip's future frames
        from the plan's next actions (zeros past its end); the success probe judges each frame in
        turn, and the clip's last frame starts the next clip. One sample per clip instead of one
        per step, with the actions of every step, as the model was trained (`step` holds one
        action over the clip because it cannot see the actions to come)."""
        if self.probe is None:
            raise ValueError(
                "judging success in imagination needs a success probe: run `cosmos3-robot train-probe`"
            )
        g = self.world.geometry
        plan = np.clip(np.asarray(plan, dtype=np.float32).reshape(-1, *self.action_space.shape), -1.0, 1.0)
        padded = np.concatenate([plan, np.zeros((self.max_steps + g.num_actions, plan.shape[1]), np.float32)])
        self.reset(seed=seed)
        while self._steps < self.max_steps:
            frames = self._imagine(padded[self._steps : self._steps + g.num_actions])
            frames = frames[: self.max_steps - self._steps]
            hits = self.probe.predict(self.world, frames)
            if hits.any():
                return True, self._steps + int(np.argmax(hits)) + 1
            self._steps += len(frames)
            self._frame = frames[-1]
        return False, self._steps

    def _imagine(self, actions: np.ndarray) -> np.ndarray:
        """The clip's future frames (num_frames - 1, H, W, 3) uint8 after the current frame, given
        the clip's actions (num_actions, A): one forward-dynamics sample, decoded."""
        latents = self.world.encode_frames(torch.from_numpy(self._frame)[None, None])
        batch = self.world.clip_batch(
            [self.task],
            latents,
            actions=torch.from_numpy(actions[None]),
            obs_frames=1,
            frames=self._frame[None],
        )
        video = sample_mode(self.world, "forward_dynamics", batch, self.sampling, generator=self._gen)[
            "video"
        ]
        return self.world.decode_latents(video)[0, 1:].permute(0, 2, 3, 1).numpy()

    def render(self):
        return None if self._frame is None else self._frame.copy()

    def close(self):
        self.real.close()
