"""Shared machinery of our MuJoCo tasks: config, control rate, offscreen rendering, observations.

Conventions follow what LeRobot's `lerobot-eval` expects of a Gymnasium env (see
`lerobot/envs/utils.py` and the gym_pusht features map):

    obs = {"pixels": (H, W, 3) uint8,            -> observation.image
           "agent_pos": (S,) float32,            -> observation.state
           "environment_state": (E,) float32}    -> observation.environment_state
    info["is_success"]: bool;  env.task / env.task_description: str;  render_mode "rgb_array";
    metadata["render_fps"] = control rate in Hz (= the action sample rate of recorded data).

Physics runs at `PHYSICS_HZ`; one env step holds the action for PHYSICS_HZ / control_hz substeps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import resources
from typing import Any

import gymnasium as gym

# Headless by default: MuJoCo picks its GL backend when it is first imported. A user's choice wins.
os.environ.setdefault("MUJOCO_GL", "egl")
import mujoco  # noqa: E402
import numpy as np
from gymnasium import spaces

PHYSICS_HZ = 300  # matches `timestep` in assets/*.xml; divisible by 10, 15, 20, 30, 50, 60 Hz
STATE_BOUND = 1e4  # finite observation bounds (the Gymnasium checker flags infinite ones)


@dataclass
class EnvConfig:
    """Settings every task shares. `episode_seconds=None` takes the task's default."""

    image_size: int = 128
    control_hz: int = 10
    episode_seconds: float | None = None

    def __post_init__(self) -> None:
        if not 16 <= self.image_size <= 512:
            raise ValueError(f"image_size={self.image_size}: choose a value in [16, 512] (e.g. 96 or 128)")
        if self.control_hz <= 0 or PHYSICS_HZ % self.control_hz != 0:
            raise ValueError(
                f"control_hz={self.control_hz} must divide the physics rate {PHYSICS_HZ} Hz "
                "(use one of 10, 12, 15, 20, 25, 30, 50, 60, 100)"
            )
        if self.episode_seconds is not None and self.episode_seconds <= 0:
            raise ValueError(f"episode_seconds={self.episode_seconds} must be > 0")


def load_mjcf(asset: str) -> mujoco.MjModel:
    xml = resources.files("cosmos3_robot.envs").joinpath("assets", asset).read_text()
    return mujoco.MjModel.from_xml_string(xml)


class MujocoTaskEnv(gym.Env):
    """Base class: subclasses implement `_sample_task`, `_agent_pos`, `_environment_state`,
    `_apply_action`, `_success` and `_distance`, and set `ASSET`, `DEFAULT_EPISODE_SECONDS`,
    `STATE_DIM`, `ENV_STATE_DIM`, `ACTION_DIM`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    ASSET: str = ""
    DEFAULT_EPISODE_SECONDS: float = 5.0
    STATE_DIM: int = 0
    ENV_STATE_DIM: int = 0
    ACTION_DIM: int = 0
    STATE_NAMES: list[str] = []
    ENV_STATE_NAMES: list[str] = []
    ACTION_NAMES: list[str] = []

    def __init__(
        self,
        render_mode: str | None = "rgb_array",
        image_size: int = 128,
        control_hz: int = 10,
        episode_seconds: float | None = None,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode={render_mode!r}: only 'rgb_array' is supported (offscreen)")
        self.config = EnvConfig(image_size, control_hz, episode_seconds)
        self.render_mode = render_mode
        self.control_hz = self.config.control_hz
        self.episode_seconds = self.config.episode_seconds or self.DEFAULT_EPISODE_SECONDS
        self.max_steps = int(round(self.episode_seconds * self.control_hz))
        # instance-level metadata so that several rates can coexist in one process
        self.metadata = {**type(self).metadata, "render_fps": self.control_hz}
        self.model = load_mjcf(self.ASSET)
        self.data = mujoco.MjData(self.model)
        self.n_substeps = PHYSICS_HZ // self.control_hz
        self._renderer: mujoco.Renderer | None = None
        self._camera = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, "top")
        size = self.config.image_size
        self.observation_space = spaces.Dict(
            {
                "pixels": spaces.Box(0, 255, (size, size, 3), np.uint8),
                "agent_pos": spaces.Box(-STATE_BOUND, STATE_BOUND, (self.STATE_DIM,), np.float32),
                "environment_state": spaces.Box(-STATE_BOUND, STATE_BOUND, (self.ENV_STATE_DIM,), np.float32),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (self.ACTION_DIM,), np.float32)
        self.task = ""
        self.task_description = ""
        self._steps = 0
        self._pixels: np.ndarray | None = None

    MIN_START_DISTANCE = 0.0  # a reset redraws a start closer than this to success

    # ---- subclass hooks -------------------------------------------------------------------
    def _sample_task(self, rng: np.random.Generator) -> str:  # returns the instruction
        raise NotImplementedError

    def _agent_pos(self) -> np.ndarray:
        raise NotImplementedError

    def _environment_state(self) -> np.ndarray:
        raise NotImplementedError

    def _apply_action(self, action: np.ndarray) -> None:
        raise NotImplementedError

    def _distance(self) -> float:
        raise NotImplementedError

    def _success(self) -> bool:
        raise NotImplementedError

    # ---- gymnasium API --------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # A start at the goal is an episode that is over before it begins: draw again (rarely twice).
        for _ in range(100):
            mujoco.mj_resetData(self.model, self.data)
            self.task = self._sample_task(self.np_random)
            mujoco.mj_forward(self.model, self.data)
            if self._distance() >= self.MIN_START_DISTANCE:
                break
        self.task_description = self.task
        self._steps = 0
        return self._observation(), self._info()

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64).reshape(self.ACTION_DIM), -1.0, 1.0)
        self._apply_action(action)
        mujoco.mj_step(self.model, self.data, nstep=self.n_substeps)
        self._steps += 1
        success = self._success()
        obs = self._observation()
        reward = float(-self._distance() + (1.0 if success else 0.0))
        truncated = self._steps >= self.max_steps and not success
        return obs, reward, success, truncated, self._info(success)

    def render(self):
        if self._pixels is None:
            self._pixels = self._render_pixels()
        return self._pixels.copy()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ---- helpers --------------------------------------------------------------------------
    @property
    def time_s(self) -> float:
        """Seconds since reset (steps / control rate)."""
        return self._steps / self.control_hz

    def _render_pixels(self) -> np.ndarray:
        if self._renderer is None:
            size = self.config.image_size
            self._renderer = mujoco.Renderer(self.model, size, size)
            flags = self._renderer.scene.flags
            for flag in (
                mujoco.mjtRndFlag.mjRND_SHADOW,
                mujoco.mjtRndFlag.mjRND_REFLECTION,
                mujoco.mjtRndFlag.mjRND_SKYBOX,
            ):
                flags[flag] = False  # speed: nothing in these scenes needs them
        self._renderer.update_scene(self.data, camera=self._camera)
        return self._renderer.render().copy()

    def _observation(self) -> dict[str, np.ndarray]:
        self._pixels = self._render_pixels()
        return {
            "pixels": self._pixels.copy(),
            "agent_pos": self._agent_pos().astype(np.float32),
            "environment_state": self._environment_state().astype(np.float32),
        }

    def _info(self, success: bool = False) -> dict[str, Any]:
        return {"is_success": bool(success), "distance": float(self._distance()), "task": self.task}
