"""`cosmos3-robot train-estimator`: learn to read the scene state off the frame (`encoders/state_estimator.py`).

    cosmos3-robot train-estimator --root data/reach128 --out runs/estimator --max-minutes 10

Reads: a LeRobot dataset recorded with the state to estimate (default `observation.environment_state`,
which `record` writes), every frame in memory. Writes into --out: `estimator/` (what `rollout
--estimator OUT/estimator` loads: weights, normalisation and `estimator.json` with the command, data,
seed, commit and held-out errors), `checkpoint.safetensors` (a rerun with the same --out resumes)
and `train_log.json` (held-out mean absolute error per state dimension at every evaluation).
"""

from __future__ import annotations

from cosmos3_robot.scripts.common import small_trainer_main
from cosmos3_robot.training.estimator import EstimatorTrainConfig, train_estimator

_HELP = {
    "out": "output folder (estimator/ + checkpoint.safetensors + train_log.json); resumed if present",
    "state_key": "the recorded state column to estimate",
    "batch_size": "frames per step",
}


def main(argv: list[str] | None = None) -> int:
    return small_trainer_main(argv, "train-estimator", __doc__, EstimatorTrainConfig, _HELP, train_estimator,
                              ("step", "mae", "mae_train_mean", "mae_per_dim", "steps_run", "estimator"))  # fmt: skip
