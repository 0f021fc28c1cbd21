"""Gymnasium/MuJoCo tasks, registered on import under the `cosmos3_robot/` namespace.

    import gymnasium as gym, cosmos3_robot.envs
    env = gym.make("cosmos3_robot/Push-v0", image_size=96, control_hz=15)

Envs never import policies (docs/design.md, "Layout"; tests/test_layering.py): they expose observations, a success signal and the
control rate (`env.metadata["render_fps"]`, Hz) that becomes the action sample rate.
"""

from __future__ import annotations

import gymnasium as gym

from cosmos3_robot.envs.base import PHYSICS_HZ, EnvConfig, MujocoTaskEnv
from cosmos3_robot.envs.experts import Expert, MetaWorldExpert, PushExpert, ReachExpert, make_expert
from cosmos3_robot.envs.metaworld import NATIVE_HZ, NATIVE_MAX_STEPS, MetaWorldEnv
from cosmos3_robot.envs.metaworld import TASKS as METAWORLD_TASKS
from cosmos3_robot.envs.metaworld import env_id as metaworld_env_id
from cosmos3_robot.envs.push import PushEnv
from cosmos3_robot.envs.reach import ReachEnv

NAMESPACE = "cosmos3_robot"
# id -> (entry point, default episode steps at 10 Hz); gym.make(..., max_episode_steps=N) overrides
_ENVS: dict[str, tuple[str, int]] = {
    f"{NAMESPACE}/Reach-v0": ("cosmos3_robot.envs.reach:ReachEnv", 50),
    f"{NAMESPACE}/Push-v0": ("cosmos3_robot.envs.push:PushEnv", 100),
}
ENV_IDS: list[str] = list(_ENVS)
# Meta-World v3 tasks (envs/metaworld.py): id -> task; their time limit is Meta-World's 500 native steps.
METAWORLD_IDS: dict[str, str] = {metaworld_env_id(t): t for t in METAWORLD_TASKS}
ALL_ENV_IDS: list[str] = ENV_IDS + list(METAWORLD_IDS)  # what `record` and `rollout` accept
# The world model as a simulator (`policies/learned_env.py`), registered by name: `gym.make(LEARNED_ID,
# model=DIR, env=ID)`. The entry point is a string, so importing the envs imports no model code.
LEARNED_ID = f"{NAMESPACE}/Learned-v0"


def register_envs() -> None:
    for env_id, (entry_point, steps) in _ENVS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point, max_episode_steps=steps)
    for env_id, task in METAWORLD_IDS.items():
        if env_id not in gym.registry:
            gym.register(
                id=env_id,
                entry_point="cosmos3_robot.envs.metaworld:MetaWorldEnv",
                kwargs={"task": task},
                max_episode_steps=NATIVE_MAX_STEPS // (NATIVE_HZ // 10),  # at the default 10 Hz
            )
    if LEARNED_ID not in gym.registry:  # its time limit is the real env's, applied inside
        gym.register(id=LEARNED_ID, entry_point="cosmos3_robot.policies.learned_env:LearnedEnv")


def make_env(env_id: str, **kwargs) -> gym.Env:
    """`gym.make` with the time limit scaled to the control rate (`episode_seconds` of the task)."""
    if env_id not in gym.registry:
        raise ValueError(f"unknown env {env_id!r}; registered cosmos3 envs: {', '.join(ALL_ENV_IDS)}")
    env = gym.make(env_id, **kwargs)
    steps = env.unwrapped.max_steps
    env.close()
    return gym.make(env_id, max_episode_steps=steps, **kwargs)


register_envs()

__all__ = [
    "ALL_ENV_IDS",
    "ENV_IDS",
    "LEARNED_ID",
    "PHYSICS_HZ",
    "EnvConfig",
    "Expert",
    "METAWORLD_IDS",
    "MetaWorldEnv",
    "MetaWorldExpert",
    "MujocoTaskEnv",
    "PushEnv",
    "PushExpert",
    "ReachEnv",
    "ReachExpert",
    "make_env",
    "make_expert",
    "register_envs",
]
