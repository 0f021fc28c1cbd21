"""Scripted experts with a `noise` knob, used to record demonstrations.

They read privileged simulator state from the unwrapped env (not the pixels): an expert is a
data source, not a policy under test. Each `act(obs)` returns an action in [-1, 1]; Gaussian
noise of std `noise` (in action units) is added before clipping.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from cosmos3_robot.envs import metaworld, push, reach


class Expert:
    def __init__(self, env: gym.Env, noise: float = 0.0, seed: int | None = None) -> None:
        if noise < 0:
            raise ValueError(f"noise={noise} must be >= 0 (std of Gaussian action noise)")
        self.env = env.unwrapped
        self.noise = noise
        self.rng = np.random.default_rng(seed)

    def clean_action(self) -> np.ndarray:
        raise NotImplementedError

    def act(self, obs: dict | None = None) -> np.ndarray:
        a = self.clean_action()
        if self.noise > 0:
            a = a + self.rng.normal(0.0, self.noise, size=a.shape)
        return np.clip(a, -1.0, 1.0).astype(np.float32)

    __call__ = act


class ReachExpert(Expert):
    """Operational-space P controller: fingertip velocity toward the goal mapped to joint
    velocities with damped least squares (robust at the straight-arm singularity)."""

    gain = 4.0  # 1/s
    max_tip_speed = 0.2  # m/s
    damping = 0.02

    def clean_action(self) -> np.ndarray:
        env: reach.ReachEnv = self.env
        err = env.goal_xy - env.fingertip_xy
        v = self.gain * err
        speed = np.linalg.norm(v)
        if speed > self.max_tip_speed:
            v *= self.max_tip_speed / speed
        J = env.fingertip_jacobian()
        qdot = J.T @ np.linalg.solve(J @ J.T + self.damping**2 * np.eye(2), v)
        return qdot / reach.MAX_JOINT_SPEED


class PushExpert(Expert):
    """Orbit the puck at a safe radius until the pusher is behind it (opposite the goal), then
    push along the puck→goal line with a lateral correction that keeps the contact on that line.
    Orbiting by angle (instead of switching between waypoints) cannot oscillate between modes."""

    gain = 4.0  # 1/s
    push_speed = 0.12  # m/s
    max_speed = 0.3  # m/s
    aligned = 0.35  # rad: behind the puck when the angle to the push line is below this
    max_orbit_step = 0.6  # rad per control step

    def clean_action(self) -> np.ndarray:
        env: push.PushEnv = self.env
        puck, pusher, goal = env.puck_xy, env.pusher_xy, env.goal_xy
        to_goal = goal - puck
        u = to_goal / max(np.linalg.norm(to_goal), 1e-6)
        perp = np.array([-u[1], u[0]])
        rel = pusher - puck
        theta = np.arctan2(rel[1], rel[0])
        dtheta = (np.arctan2(-u[1], -u[0]) - theta + np.pi) % (2 * np.pi) - np.pi
        if abs(dtheta) > self.aligned:
            radius = push.PUCK_RADIUS + push.PUSHER_RADIUS + 0.03
            nxt = theta + np.clip(dtheta, -self.max_orbit_step, self.max_orbit_step)
            target = puck + radius * np.array([np.cos(nxt), np.sin(nxt)])
            v = self.gain * (target - pusher)
        else:
            v = self.push_speed * u - self.gain * (rel @ perp) * perp
        speed = np.linalg.norm(v)
        if speed > self.max_speed:
            v *= self.max_speed / speed
        return v / push.MAX_SPEED


class MetaWorldExpert(Expert):
    """Meta-World's own scripted policy for the task, on its 39-D observation, at its own 80 Hz:
    each of our actions is the mean of the actions it takes through the coming step
    (`MetaWorldEnv.native_plan`), which our env holds for the step as it does any policy's.
    `native_rate=False` holds its action at our step's start instead (the ablation: its gains are
    then 8x too high at 10 Hz)."""

    def __init__(self, env: gym.Env, noise: float = 0.0, seed: int | None = None,
                 native_rate: bool = True) -> None:  # fmt: skip
        super().__init__(env, noise, seed)
        from metaworld.policies import ENV_POLICY_MAP

        self.policy = ENV_POLICY_MAP[self.env.task_name]()
        self.native_rate = native_rate

    def clean_action(self) -> np.ndarray:
        env: metaworld.MetaWorldEnv = self.env
        if not self.native_rate:
            return np.asarray(self.policy.get_action(env.raw_obs), dtype=np.float64)
        return env.native_plan(self.policy.get_action).mean(axis=0)


EXPERTS: dict[type, type[Expert]] = {
    reach.ReachEnv: ReachExpert,
    push.PushEnv: PushExpert,
    metaworld.MetaWorldEnv: MetaWorldExpert,
}


def make_expert(env: gym.Env, noise: float = 0.0, seed: int | None = None) -> Expert:
    """The scripted expert for `env` (any wrapper stack around one of our tasks)."""
    cls = EXPERTS.get(type(env.unwrapped))
    if cls is None:
        known = ", ".join(c.__name__ for c in EXPERTS)
        raise ValueError(f"no scripted expert for {type(env.unwrapped).__name__}; experts exist for: {known}")
    return cls(env, noise=noise, seed=seed)
