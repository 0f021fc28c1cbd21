"""Reach: a planar 2-link arm moves its fingertip onto the target of the named colour.

Two coloured targets are placed per seed (goal + distractor), so the instruction matters:
"move the fingertip to the red target". Action: joint velocity commands in [-1, 1]
(scaled to ±MAX_JOINT_SPEED rad/s). Success: fingertip within SUCCESS_RADIUS of the goal.
"""

from __future__ import annotations

import mujoco
import numpy as np

from cosmos3_robot.envs.base import MujocoTaskEnv

COLOURS: dict[str, tuple[float, float, float, float]] = {
    "red": (0.9, 0.1, 0.1, 1.0),
    "green": (0.1, 0.75, 0.2, 1.0),
    "blue": (0.15, 0.3, 0.95, 1.0),
    "yellow": (0.95, 0.85, 0.1, 1.0),
}
MAX_JOINT_SPEED = 4.0  # rad/s at |action| = 1
SUCCESS_RADIUS = 0.02  # m


class ReachEnv(MujocoTaskEnv):
    ASSET = "reach.xml"
    DEFAULT_EPISODE_SECONDS = 5.0
    STATE_DIM = 4
    ENV_STATE_DIM = 6
    ACTION_DIM = 2
    STATE_NAMES = ["shoulder_pos", "elbow_pos", "shoulder_vel", "elbow_vel"]
    ENV_STATE_NAMES = ["goal_x", "goal_y", "distractor_x", "distractor_y", "fingertip_x", "fingertip_y"]
    ACTION_NAMES = ["shoulder_vel_cmd", "elbow_vel_cmd"]
    MIN_START_DISTANCE = 3 * SUCCESS_RADIUS  # never an episode that is over before it starts

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        m = self.model
        self._tip = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, "fingertip")
        self._goal_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "goal")
        self._distractor_geom = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_GEOM, "distractor")
        self.goal_colour = "red"

    def _sample_target(self, rng: np.random.Generator) -> np.ndarray:
        r = rng.uniform(0.07, 0.22)
        a = rng.uniform(-np.pi, np.pi)
        return np.array([r * np.cos(a), r * np.sin(a)])

    def _sample_task(self, rng: np.random.Generator) -> str:
        names = list(COLOURS)
        goal_c, other_c = rng.choice(len(names), size=2, replace=False)
        self.goal_colour = names[goal_c]
        goal = self._sample_target(rng)
        other = self._sample_target(rng)
        while np.linalg.norm(other - goal) < 0.08:
            other = self._sample_target(rng)
        self.data.mocap_pos[0, :2] = goal
        self.data.mocap_pos[1, :2] = other
        self.model.geom_rgba[self._goal_geom] = COLOURS[names[goal_c]]
        self.model.geom_rgba[self._distractor_geom] = COLOURS[names[other_c]]
        self.data.qpos[0] = rng.uniform(-np.pi, np.pi)
        self.data.qpos[1] = rng.uniform(-2.5, 2.5)
        return f"move the fingertip to the {self.goal_colour} target"

    @property
    def goal_xy(self) -> np.ndarray:
        return self.data.mocap_pos[0, :2].copy()

    @property
    def fingertip_xy(self) -> np.ndarray:
        return self.data.site_xpos[self._tip, :2].copy()

    def fingertip_jacobian(self) -> np.ndarray:
        """(2, 2) d(fingertip xy)/d(q)."""
        jacp = np.zeros((3, self.model.nv))
        mujoco.mj_jacSite(self.model, self.data, jacp, None, self._tip)
        return jacp[:2, :2]

    def _agent_pos(self) -> np.ndarray:
        return np.concatenate([self.data.qpos[:2], self.data.qvel[:2]])

    def _environment_state(self) -> np.ndarray:
        return np.concatenate([self.data.mocap_pos[0, :2], self.data.mocap_pos[1, :2], self.fingertip_xy])

    def _apply_action(self, action: np.ndarray) -> None:
        self.data.ctrl[:2] = action * MAX_JOINT_SPEED

    def _distance(self) -> float:
        return float(np.linalg.norm(self.fingertip_xy - self.goal_xy))

    def _success(self) -> bool:
        return self._distance() < SUCCESS_RADIUS

    @staticmethod
    def success_from_env_state(env_state: np.ndarray) -> np.ndarray:
        """(..., 6) recorded `observation.environment_state` -> (...,) bool: the env's own success rule."""
        s = np.asarray(env_state, dtype=np.float64)
        return np.linalg.norm(s[..., 4:6] - s[..., 0:2], axis=-1) < SUCCESS_RADIUS
