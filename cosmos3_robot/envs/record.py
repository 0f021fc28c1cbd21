"""`cosmos3-robot record`: roll out a scripted expert (or any policy) and write a LeRobot dataset.

Written with LeRobot's own writer (`LeRobotDataset.create/resume`, `add_frame`, `save_episode`,
`finalize`), fps = the env control rate, so action timestamps are frame timestamps.

Crash safety: episodes are written in committed sessions (`datasets/writer.py`); a killed run loses
at most the session in progress, and the next run rolls it back and continues.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from cosmos3_robot.datasets.writer import (
    STATE_DIR,
    check_repo_id,
    close_session,
    commit,
    open_session,
    quiet_writer,
    rollback,
    wipe,
)
from cosmos3_robot.files import exclusive_lock

Policy = Callable[[dict], np.ndarray]
PolicyFactory = Callable[["object", int], Policy]  # (env, episode_seed) -> policy(obs) -> action


@dataclass
class RecordResult:
    root: Path
    repo_id: str
    total_episodes: int  # in the dataset after this call
    new_episodes: int  # recorded by this call
    new_frames: int
    seconds: float
    successes: list[bool] = field(default_factory=list)

    @property
    def frames_per_second(self) -> float:
        return self.new_frames / self.seconds if self.seconds > 0 else 0.0


def dataset_features(env) -> dict:
    """LeRobot feature spec for one of our envs (names come from the task class)."""
    u = env.unwrapped
    size = u.config.image_size
    return {
        "observation.image": {
            "dtype": "video",
            "shape": (size, size, 3),
            "names": ["height", "width", "channels"],
        },
        "observation.state": {"dtype": "float32", "shape": (u.STATE_DIM,), "names": list(u.STATE_NAMES)},
        "observation.environment_state": {
            "dtype": "float32",
            "shape": (u.ENV_STATE_DIM,),
            "names": list(u.ENV_STATE_NAMES),
        },
        "action": {"dtype": "float32", "shape": (u.ACTION_DIM,), "names": list(u.ACTION_NAMES)},
    }


def _check_compatible(meta, root: Path, env_id: str, fps: int, features: dict) -> None:
    if meta.robot_type is not None and meta.robot_type != env_id:
        raise ValueError(
            f"dataset {root} holds episodes of {meta.robot_type}, this run records {env_id}; "
            f"pass --env {meta.robot_type} to add to it, or choose another --root"
        )
    if meta.fps != fps:
        raise ValueError(
            f"dataset {root}: recorded at {meta.fps} fps, this run asks for {fps}; pass --fps {meta.fps}"
        )
    for key, ft in features.items():
        have = meta.features.get(key)
        if have is None or tuple(have["shape"]) != tuple(ft["shape"]) or have.get("names") != ft["names"]:
            raise ValueError(
                f"dataset {root}: feature {key!r} is {have and (have['shape'], have.get('names'))} on disk but "
                f"the env gives {(ft['shape'], ft['names'])}; use the same --env/--image-size or another --root"
            )


def _prepare_root(root: Path, repo_id: str, env_id: str, fps: int, features: dict) -> int:
    """Roll back an unfinished session, check the dataset on disk; returns its episode count."""
    if root.exists():
        rollback(root)
    if root.exists() and not (root / "meta" / "info.json").exists():
        if any(root.iterdir()):
            raise ValueError(f"{root} exists and is not a LeRobot dataset; choose another --root")
        root.rmdir()
    if not root.exists():
        return 0
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    meta = LeRobotDatasetMetadata(repo_id, root=root)
    _check_compatible(meta, root, env_id, fps, features)
    done = meta.total_episodes
    if not (root / STATE_DIR / "COMMITTED").exists():
        if done == 0:
            wipe(root)  # created but never written: start clean
        else:
            commit(root, done)  # a dataset we did not write: its current state is the baseline
    return done


def check_record_args(episodes: int, noise: float, image_size: int, checkpoint_every: int) -> None:
    """Raise, naming the option, before anything is written."""
    from cosmos3_robot.processors.geometry import check_spatial_size

    if episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {episodes}")
    if checkpoint_every < 1:
        raise ValueError(f"--checkpoint-every must be >= 1, got {checkpoint_every}")
    if not (np.isfinite(noise) and noise >= 0):
        raise ValueError(
            f"--noise is the std of the expert's action noise: a finite number >= 0, got {noise}"
        )
    try:
        check_spatial_size(image_size, image_size)
    except ValueError as e:
        raise ValueError(f"--image-size {image_size}: the world model could not train on it: {e}") from None


# ---- recording -----------------------------------------------------------------------------------
def _rollout(dataset, env, policy: Policy, seed: int) -> tuple[int, bool]:
    obs, info = env.reset(seed=seed)
    task = env.unwrapped.task
    frames, done, success = 0, False, False
    while not done:
        action = np.asarray(policy(obs), dtype=np.float32)
        if not np.all(np.isfinite(action)):
            raise ValueError(f"policy returned a non-finite action {action} at frame {frames} (seed {seed})")
        dataset.add_frame(
            {
                "observation.image": obs["pixels"],
                "observation.state": obs["agent_pos"],
                "observation.environment_state": obs["environment_state"],
                "action": action,
                "task": task,
            }
        )
        frames += 1
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        success = bool(info.get("is_success", False))
    return frames, success


def record_dataset(
    env_id: str,
    root: str | Path,
    episodes: int,
    repo_id: str | None = None,
    fps: int | None = None,
    noise: float = 0.1,
    seed: int = 0,
    image_size: int = 128,
    checkpoint_every: int = 10,
    policy_factory: PolicyFactory | None = None,
    progress: bool = True,
) -> RecordResult:
    """Record until the dataset at `root` holds `episodes` episodes (resuming if it exists).

    Episode e uses env seed `seed + e`, so a resumed run records what an uninterrupted one would.
    `policy_factory(env, episode_seed)` returns `policy(obs) -> action`; default: the scripted
    expert with Gaussian action noise `noise`.
    """
    from tqdm import tqdm

    from cosmos3_robot.envs import make_env, make_expert

    os.environ.setdefault("SVT_LOG", "1")  # libsvtav1 (LeRobot's default codec): errors only
    check_record_args(episodes, noise, image_size, checkpoint_every)
    root = Path(root)
    repo_id = check_repo_id(root, repo_id)
    env_kwargs = {"image_size": image_size} | ({"control_hz": fps} if fps is not None else {})
    env = make_env(env_id, **env_kwargs)
    fps = int(env.unwrapped.control_hz)
    features = dataset_features(env)
    if policy_factory is None:
        policy_factory = lambda env_, s: make_expert(env_, noise=noise, seed=s).act  # noqa: E731
    try:
        with exclusive_lock(root, "record"), quiet_writer():
            done = _prepare_root(root, repo_id, env_id, fps, features)
            result = RecordResult(root, repo_id, done, 0, 0, 0.0)
            bar = tqdm(total=episodes, initial=min(done, episodes), desc=f"record {env_id}", unit="ep",
                       disable=not progress)  # fmt: skip
            t0 = time.perf_counter()
            try:
                while result.total_episodes < episodes:
                    session_end = min(result.total_episodes + checkpoint_every, episodes)
                    _record_session(root, repo_id, env, env_id, fps, features, policy_factory, seed,
                                    session_end, result, bar)  # fmt: skip
            finally:
                bar.close()
    finally:
        env.close()
    result.seconds = time.perf_counter() - t0
    return result


def _record_session(
    root, repo_id, env, env_id, fps, features, policy_factory, seed, session_end, result, bar
):
    """Episodes up to `session_end` in one LeRobot writer session, committed at its end."""
    dataset = open_session(root, repo_id, fps, features, env_id)
    in_save = False
    try:
        while result.total_episodes < session_end:
            ep_seed = seed + result.total_episodes
            frames, success = _rollout(dataset, env, policy_factory(env, ep_seed), ep_seed)
            if frames < 2:
                raise ValueError(
                    f"episode {result.total_episodes} (seed {ep_seed}) ended after {frames} frame(s); need >= 2"
                )
            in_save = True
            dataset.save_episode()
            in_save = False
            result.total_episodes += 1
            result.new_episodes += 1
            result.new_frames += frames
            result.successes.append(success)
            bar.update(1)
            bar.set_postfix(success=f"{np.mean(result.successes):.2f}")
    except BaseException:
        if in_save:  # half-written episode: undo the whole session, keep earlier commits
            with contextlib.suppress(Exception):
                dataset.finalize()
            rollback(root)
            raise
        close_session(dataset, root)  # drop the unfinished episode, commit the saved ones
        raise
    close_session(dataset, root)
