"""`cosmos3-robot train-estimator`: learn to read the scene state off the frame (`encoders/state_estimator.py`).

    cosmos3-robot train-estimator --root data/reach128 --out runs/estimator --max-minutes 10

Reads: a LeRobot dataset recorded with the state to estimate (default `observation.environment_state`,
which `record` writes), every frame in memory. Writes into --out: `estimator/` (what `rollout
--estimator OUT/estimator` loads: weights, normalisation and `estimator.json` with the command, data,
seed, commit and held-out errors), `checkpoint.safetensors` (a rerun with the same --out resumes)
and `train_log.json` (held-out mean absolute error per state dimension at every evaluation).
"""

from __future__ import annotations

import argparse
import json

from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    dataclass_options,
    provenance,
    run_config,
)
from cosmos3_robot.training.estimator import EstimatorTrainConfig, train_estimator

_HELP = {
    "out": "output folder (estimator/ + checkpoint.safetensors + train_log.json); resumed if present",
    "root": "local LeRobot dataset folder(s), read offline",
    "state_key": "the recorded state column to estimate",
    "image_key": "the dataset's image key",
    "holdout_episodes": "last episodes of each dataset held out for evaluation",
    "batch_size": "frames per step",
    "lr": "peak learning rate (linear warmup, cosine to 5 %%)",
    "warmup": "warmup steps",
    "steps": "optimiser steps in all (a resumed run continues to this count; the cosine runs over it)",
    "max_minutes": "stop (and save) after this wall time",
    "eval_every": "steps between held-out evaluations",
    "save_every": "steps between checkpoints",
    "width": "channels of the first conv (a multiple of 8)",
    "keypoints": "spatial-softmax keypoints",
    "dtype": "autocast dtype of the training steps (bf16 was about 4x faster than fp32 on the 2-core machine)",
    "seed": "seed of the weights and of the batch sampler",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot train-estimator", description=__doc__, formatter_class=HelpFormatter
    )
    dataclass_options(p, EstimatorTrainConfig, _HELP)
    add_threads_option(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_threads(args.threads)
    cfg = EstimatorTrainConfig(**{k: v for k, v in vars(args).items() if k != "threads"})
    record = provenance("train-estimator", run_config(args, skip=("threads",)))
    result = train_estimator(cfg, record, log=lambda s: print(s, flush=True))
    print(
        json.dumps(
            {
                k: result.get(k)
                for k in ("step", "mae", "mae_train_mean", "mae_per_dim", "steps_run", "estimator")
            }
        )
    )
    return 0
