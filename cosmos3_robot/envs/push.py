"""Push: a disc pusher pushes a puck onto the named corner pad of a walled table.

Instruction: "push the puck to the top left corner" (top = +y, left = -x in the top-down image).
The goal pad is tinted green; the puck starts near the centre, the pusher anywhere clear of it,
so the expert must first go around the puck. Action: pusher velocity in [-1, 1]
(scaled to ±MAX_SPEED m/s). Success: puck centre within SUCCESS_RADIUS of the pad centre.
"""

from __future__ import annotations

import mujoco
import numpy as np

from cosmos3_robot.envs.base import MujocoTaskEnv

CORNERS: dict[str, tuple[float, float]] = {
    "top left": (-0.2, 0.2),
    "top right": (0.2, 0.2),
    "bottom left": (-0.2, -0.2),
    "bottom right": (0.2, -0.2),
}
MAX_SPEED = 0.4  # m/s at |action| = 1
SUCCESS_RADIUS = 0.04  # m
PUCK_RADIUS = 0.03
PUSHER_RADIUS = 0.02
PAD_IDLE_RGBA = (0.7, 0.7, 0.7, 1.0)
PAD_GOAL_RGBA = (0.3, 0.8, 0.35, 1.0)


class PushEnv(MujocoTaskEnv):
    ASSET = "push.xml"
    DEFAULT_EPISODE_SECONDS = 10.0
    STATE_DIM = 4
    ENV_STATE_DIM = 6
    ACTION_DIM = 2
    STATE_NAMES = ["pusher_x", "pusher_y", "pusher_vx", "pusher_vy"]
    ENV_STATE_NAMES = ["puck_x", "puck_y", "goal_x", "goal_y", "pusher_x", "pusher_y"]
    ACTION_NAMES = ["pusher_vx_cmd", "pusher_vy_cmd"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pads = {
            name: mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_GEOM, "pad_" + name.replace(" ", "_"))
            for name in CORNERS
        }
        self.goal_name = "top left"
        self._goal = np.array(CORNERS[self.goal_name])

    def _sample_task(self, rng: np.random.Generator) -> str:
        names = list(CORNERS)
        self.goal_name = names[int(rng.integers(len(names)))]
        self._goal = np.array(CORNERS[self.goal_name])
        for name, gid in self._pads.items():
            self.model.geom_rgba[gid] = PAD_GOAL_RGBA if name == self.goal_name else PAD_IDLE_RGBA
        puck = rng.uniform(-0.08, 0.08, size=2)
        pusher = rng.uniform(-0.22, 0.22, size=2)
        while np.linalg.norm(pusher - puck) < 0.09:
            pusher = rng.uniform(-0.22, 0.22, size=2)
        self.data.qpos[:] = np.concatenate([pusher, puck])  # pusher_x, pusher_y, puck_x, puck_y
        return f"push the puck to the {self.goal_name} corner"

    @property
    def goal_xy(self) -> np.ndarray:
        return self._goal.copy()

    @property
    def puck_xy(self) -> np.ndarray:
        return self.data.qpos[2:4].copy()

    @property
    def pusher_xy(self) -> np.ndarray:
        return self.data.qpos[0:2].copy()

    def _agent_pos(self) -> np.ndarray:
        return np.concatenate([self.data.qpos[0:2], self.data.qvel[0:2]])

    def _environment_state(self) -> np.ndarray:
        return np.concatenate([self.puck_xy, self._goal, self.pusher_xy])

    def _apply_action(self, action: np.ndarray) -> None:
        self.data.ctrl[:2] = action * MAX_SPEED

    def _distance(self) -> float:
        return float(np.linalg.norm(self.puck_xy - self._goal))

    def _success(self) -> bool:
        return self._distance() < SUCCESS_RADIUS

    @staticmethod
    def success_from_env_state(env_state: np.ndarray) -> np.ndarray:
        """(..., 6) recorded `observation.environment_state` -> (...,) bool: the env's own success rule."""
        s = np.asarray(env_state, dtype=np.float64)
        return np.linalg.norm(s[..., 0:2] - s[..., 2:4], axis=-1) < SUCCESS_RADIUS
