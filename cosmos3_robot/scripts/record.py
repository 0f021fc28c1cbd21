"""`cosmos3-robot record`: roll out a scripted expert and write a LeRobot dataset (see `envs/record.py`)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from cosmos3_robot.envs.record import record_dataset
from cosmos3_robot.scripts.common import HelpFormatter


def build_parser() -> argparse.ArgumentParser:
    from cosmos3_robot.envs import ALL_ENV_IDS

    p = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="cosmos3-robot record",
        description=(
            "Roll out the scripted expert of a cosmos3_robot env and write a LeRobot dataset "
            "(observation.image video, observation.state, observation.environment_state, action, task). "
            "Re-running with the same --root continues after the finished episodes; an interrupted run "
            "keeps every episode of its finished checkpoints."
        ),
    )
    p.add_argument(
        "--env", default=ALL_ENV_IDS[0], choices=ALL_ENV_IDS, help="Gymnasium env id (default: %(default)s)"
    )
    p.add_argument("--episodes", type=int, default=50, help="total episodes the dataset should hold")
    p.add_argument(
        "--root", type=Path, required=True, help="dataset folder (created, or resumed if it exists)"
    )
    p.add_argument(
        "--repo-id",
        default=None,
        help="LeRobot repo id of the dataset, kept beside it (ROOT/.cosmos3_record/repo_id) so that every "
        "loader given only --root uses it (default: local/<root name>)",
    )
    p.add_argument(
        "--fps",
        type=int,
        default=None,
        help="frames per second = env control rate in Hz (default: the env's, 10); must divide 300",
    )
    p.add_argument(
        "--noise", type=float, default=0.1, help="std of Gaussian noise on expert actions in [-1, 1]"
    )
    p.add_argument("--seed", type=int, default=0, help="episode e uses env seed SEED + e")
    p.add_argument("--image-size", type=int, default=128, help="square camera resolution in pixels")
    p.add_argument("--checkpoint-every", type=int, default=10, help="episodes per crash-safe commit")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    res = record_dataset(
        args.env,
        args.root,
        args.episodes,
        repo_id=args.repo_id,
        fps=args.fps,
        noise=args.noise,
        seed=args.seed,
        image_size=args.image_size,
        checkpoint_every=args.checkpoint_every,
        progress=not args.no_progress,
    )
    rate = f"{np.mean(res.successes):.0%}" if res.successes else "n/a"
    print(
        f"{res.root} (repo id {res.repo_id}): {res.total_episodes} episodes ({res.new_episodes} new, {res.new_frames} frames "
        f"in {res.seconds:.1f} s = {res.frames_per_second:.1f} frames/s, expert success {rate})"
    )
    return 0
