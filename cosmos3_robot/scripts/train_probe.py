"""`cosmos3-robot train-probe`: teach a world model to judge success in imagination.

    cosmos3-robot train-probe --model runs/reach/model --env cosmos3_robot/Reach-v0

Reads: a model folder written by `cosmos3-robot train`. Rolls out the env's noisy scripted expert
(--episodes, seeds from --seed) and labels every frame with the env's own `is_success`.
Writes --out (default MODEL/success_probe/, which `cosmos3_robot/Learned-v0` then uses):
`probe.safetensors` and `report.json` with its accuracy on held-out episodes and, on fresh
rollouts of other seeds, its agreement with the env's `is_success` (per frame and per episode).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    provenance,
    run_config,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot train-probe",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", type=Path, required=True, help="model folder written by `cosmos3-robot train`")
    p.add_argument(
        "--env", required=True, help="the env the model was trained on, e.g. cosmos3_robot/Reach-v0"
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default: MODEL/success_probe)")
    p.add_argument(
        "--episodes", type=int, default=40, help="expert rollouts to fit on (default: %(default)s)"
    )
    p.add_argument(
        "--check-episodes",
        type=int,
        default=20,
        help="fresh real rollouts to check it on (default: %(default)s)",
    )
    p.add_argument(
        "--seed", type=int, default=30_000, help="env seed of the first rollout (default: %(default)s)"
    )
    add_threads_option(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_threads(args.threads)
    if args.episodes < 4 or args.check_episodes < 0:
        raise ValueError(
            f"--episodes must be >= 4 and --check-episodes >= 0, got {args.episodes}, {args.check_episodes}"
        )
    from cosmos3_robot.policies.success_probe import PROBE_DIR, SuccessProbe, agreement
    from cosmos3_robot.policies.world_model import WorldModel

    world = WorldModel.from_folder(args.model)
    world.check_env(args.env)
    print(f"fitting a success probe on {args.episodes} expert rollouts of {args.env} ...", flush=True)
    probe = SuccessProbe.fit(world, args.env, args.episodes, args.seed)
    if args.check_episodes:
        print(f"checking it on {args.check_episodes} fresh rollouts ...", flush=True)
        check_seed = args.seed + args.episodes  # disjoint from the fitting seeds
        probe.report["rollouts"] = agreement(world, probe, args.env, args.check_episodes, check_seed)
    config = run_config(args, skip=("threads",))
    probe.report.update(provenance("train-probe", config))
    out = probe.save(args.out or args.model / PROBE_DIR)
    print(json.dumps({k: probe.report[k] for k in ("heldout_accuracy", "rollouts") if k in probe.report}))
    print(f"wrote {out}")
    return 0
