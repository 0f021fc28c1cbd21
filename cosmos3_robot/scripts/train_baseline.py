"""`cosmos3-robot train-baseline`: LeRobot's ACT or Diffusion Policy on a LeRobot dataset, for a step
or wall-clock budget, so that it can be compared with our model at equal data and compute.

    cosmos3-robot train-baseline --kind act --root data/reach --out runs/act --minutes 15
    cosmos3-robot rollout --policy lerobot:runs/act/model --env cosmos3_robot/Reach-v0 --out runs/act/rollout

Reads the camera and the proprioceptive state (the simulator's own state too only with
--environment-state, a privileged diagnostic), random initialisation (nothing is downloaded). Writes --out: `model/` (a LeRobot checkpoint, as
`lerobot-train` saves one), `train_log.json` (steps, seconds, seconds per step, loss) and
`train_state.pt` (resume: the same command continues). See cosmos3_robot/training/lerobot_baseline.py.
"""

from __future__ import annotations

import argparse
import json

from cosmos3_robot.scripts.common import HelpFormatter, add_threads_option, apply_threads


def main(argv: list[str] | None = None) -> int:
    from cosmos3_robot.training.lerobot_baseline import KINDS, BaselineConfig, train_baseline

    p = argparse.ArgumentParser(
        prog="cosmos3-robot train-baseline", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("--kind", required=True, choices=KINDS, help="the LeRobot policy type")
    p.add_argument("--root", required=True, help="LeRobot dataset folder (as `record` writes it)")
    p.add_argument("--out", required=True, help="output folder (resumed if it holds this run)")
    p.add_argument("--steps", type=int, default=None, help="step budget (default: only --minutes)")
    p.add_argument("--minutes", type=float, default=None, help="wall-clock budget of the training steps")
    p.add_argument("--batch-size", type=int, default=8, help="clips per step")
    p.add_argument(
        "--chunk", type=int, default=10, help="actions per predicted chunk (ACT chunk_size, DP horizon)"
    )
    p.add_argument("--execute", type=int, default=5, help="actions executed per chunk (n_action_steps)")
    p.add_argument("--seed", type=int, default=0, help="init and shuffling seed")
    p.add_argument(
        "--environment-state",
        action="store_true",
        help="also read the simulator's own state (observation.environment_state): privileged, for diagnostics",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_threads_option(p)
    args = p.parse_args(argv)
    apply_threads(args.threads)
    cfg = BaselineConfig(kind=args.kind, root=args.root, out=args.out, steps=args.steps, minutes=args.minutes,
                         batch_size=args.batch_size, chunk=args.chunk, execute=args.execute, seed=args.seed,
                         environment_state=args.environment_state)  # fmt: skip
    summary = train_baseline(cfg, progress=not args.no_progress)
    print(
        json.dumps(
            {
                k: summary[k]
                for k in ("kind", "step", "train_seconds", "seconds_per_step", "final_loss", "model")
            }
        )
    )
    return 0
