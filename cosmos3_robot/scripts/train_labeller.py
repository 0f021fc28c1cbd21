"""`cosmos3-robot train-labeller`: learn the actions from the motion between frames
(`encoders/inverse_dynamics.py`), to label action-free video with `label --labeller`.

    cosmos3-robot train-labeller --root data/reach128 --out runs/labeller --max-minutes 10

Reads: a LeRobot dataset with an action column (what `record` writes), every frame in memory. Writes
into --out: `labeller/` (what `label --labeller OUT/labeller` loads: weights, the actions'
normalisation, the training frame rate and `labeller.json` with the command, data, seed, commit and
held-out errors), `checkpoint.safetensors` (a rerun with the same --out resumes) and `train_log.json`
(held-out action MSE and R² against the mean action at every evaluation).
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
from cosmos3_robot.training.inverse_dynamics import LabellerTrainConfig, train_labeller

_HELP = {
    "out": "output folder (labeller/ + checkpoint.safetensors + train_log.json); resumed if present",
    "root": "local LeRobot dataset folder(s) with actions, read offline",
    "image_key": "the dataset's image key",
    "holdout_episodes": "last episodes of each dataset held out for evaluation",
    "train_episodes": "train on only the first N episodes of each dataset (default: all but the held-out)",
    "batch_size": "transitions per step",
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
        prog="cosmos3-robot train-labeller", description=__doc__, formatter_class=HelpFormatter
    )
    dataclass_options(p, LabellerTrainConfig, _HELP)
    add_threads_option(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_threads(args.threads)
    cfg = LabellerTrainConfig(**{k: v for k, v in vars(args).items() if k != "threads"})
    record = provenance("train-labeller", run_config(args, skip=("threads",)))
    result = train_labeller(cfg, record, log=lambda s: print(s, flush=True))
    print(json.dumps({k: result.get(k) for k in ("step", "mse", "mean_action_mse", "r2", "r2_per_dim",
                                                  "steps_run", "labeller")}))  # fmt: skip
    return 0
