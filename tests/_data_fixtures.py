"""Helpers shared by test_envs / test_datasets / test_record (not a conftest: tests/conftest.py
belongs to another owner). Import with `from tests._data_fixtures import ...`."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SMALL_IMAGE = 32  # px: keeps env rendering + video encoding fast in tests


def record_small(
    root: Path,
    env_id: str = "cosmos3_robot/Reach-v0",
    episodes: int = 2,
    fps: int = 10,
    image_size: int = SMALL_IMAGE,
    capture: list | None = None,
    **kwargs,
):
    """Record with the real recorder; `capture` (a list) receives (episode_seed, obs) per frame."""
    from cosmos3_robot.envs import make_expert
    from cosmos3_robot.envs.record import record_dataset

    factory = None
    if capture is not None:

        def factory(env, seed):
            expert = make_expert(env, noise=0.1, seed=seed)

            def policy(obs):
                capture.append((seed, {k: v.copy() for k, v in obs.items()}))
                return expert.act(obs)

            return policy

    return record_dataset(
        env_id,
        root,
        episodes,
        fps=fps,
        image_size=image_size,
        policy_factory=factory,
        progress=False,
        **kwargs,
    )


def write_tiny_dataset(
    root: Path,
    lengths: list[int],
    fps: int = 10,
    nan_in: tuple[int, int] | None = None,
    with_state: bool = True,
):
    """A hand-made LeRobot dataset (32x32 video; SVT-AV1 crashes on 16x16) with given episode lengths; `nan_in=(episode, frame)`
    puts a NaN in that action."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    features = {
        "observation.image": {
            "dtype": "video",
            "shape": (32, 32, 3),
            "names": ["height", "width", "channels"],
        },
        "action": {"dtype": "float32", "shape": (2,), "names": ["a0", "a1"]},
    }
    if with_state:
        features["observation.state"] = {"dtype": "float32", "shape": (2,), "names": ["s0", "s1"]}
    ds = LeRobotDataset.create(f"local/{root.name}", fps, features, root=root, use_videos=True)
    rng = np.random.default_rng(0)
    for ep, n in enumerate(lengths):
        for t in range(n):
            action = rng.normal(size=2).astype(np.float32)
            if nan_in == (ep, t):
                action[0] = np.nan
            frame = {
                "observation.image": rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
                "action": action,
                "task": "tiny",
            }
            if with_state:
                frame["observation.state"] = np.array([ep, t], dtype=np.float32)
            ds.add_frame(frame)
        ds.save_episode()
    ds.finalize()
    return root
