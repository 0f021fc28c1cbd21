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

from cosmos3_robot.scripts.common import small_trainer_main
from cosmos3_robot.training.inverse_dynamics import LabellerTrainConfig, train_labeller

_HELP = {
    "out": "output folder (labeller/ + checkpoint.safetensors + train_log.json); resumed if present",
    "root": "local LeRobot dataset folder(s) with actions, read offline",
    "train_episodes": "train on only the first N episodes of each dataset (default: all but the held-out)",
    "batch_size": "transitions per step",
}


def main(argv: list[str] | None = None) -> int:
    return small_trainer_main(argv, "train-labeller", __doc__, LabellerTrainConfig, _HELP, train_labeller,
                              ("step", "mse", "mean_action_mse", "r2", "r2_per_dim", "steps_run", "labeller"))  # fmt: skip
