"""Train a `StateEstimator` (`encoders/state_estimator.py`) on the state a LeRobot dataset recorded.

Every frame of every episode is held in memory (uint8; about 1.1 GB for 1500 Reach episodes at
128 px); the last `holdout_episodes` episodes of each dataset are held out and scored at every
evaluation: mean absolute error per state dimension in the dataset's units, against predicting the
training mean. The run saves `checkpoint.safetensors` (weights, optimiser, RNG, history; a rerun with
the same --out resumes) and `estimator/` (what `rollout --estimator` loads), both atomically.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor

from cosmos3_robot.datasets.episodes import open_source, read_episodes
from cosmos3_robot.encoders.state_estimator import EstimatorConfig, StateEstimator, save_estimator
from cosmos3_robot.processors.data_state import OBS_KEYS
from cosmos3_robot.processors.normalize import key_parts
from cosmos3_robot.training.small_loop import SmallRun, SmallTrainConfig, run_small


@dataclass
class EstimatorTrainConfig(SmallTrainConfig):
    state_key: str = "observation.environment_state"
    steps: int = 20000

    ROOT_NEEDS: ClassVar[str] = "a LeRobot dataset recorded with the state to estimate"
    COMMAND: ClassVar[str] = "train-estimator"

    def __post_init__(self) -> None:
        super().__post_init__()
        parts = key_parts(self.state_key)
        if len(parts) != 1 or parts[0] not in OBS_KEYS:
            raise ValueError(
                f"state_key must be one recorded state column ({', '.join(k for k in OBS_KEYS if k != 'observation.image')}), "
                f"got {self.state_key!r}"
            )


@dataclass
class Frames:
    """Every frame (N, 3, s, s) uint8 with its state (N, E) and instruction."""

    frames: Tensor
    state: Tensor
    tasks: list[str]

    def __len__(self) -> int:
        return len(self.tasks)


def load_split(cfg: EstimatorTrainConfig) -> tuple[Frames, Frames, dict]:
    train: list[tuple[Tensor, Tensor, list[str]]] = []
    held: list[tuple[Tensor, Tensor, list[str]]] = []
    size, names, info = None, None, {"datasets": []}
    for root in cfg.root:
        source = open_source(root, cfg.image_key)
        if source.dataset is None:
            raise ValueError(
                f"{root} is a folder of videos; train-estimator needs a LeRobot dataset with {cfg.state_key}"
            )
        source.state_key = cfg.state_key
        if not source.has_state:
            raise ValueError(
                f"dataset {root} has no {cfg.state_key!r} column; record it with `cosmos3-robot record` "
                f"(which writes observation.state and observation.environment_state) or pick --state-key"
            )
        n = source.num_episodes
        if n <= cfg.holdout_episodes:
            raise ValueError(
                f"dataset {root} has {n} episodes, not more than --holdout-episodes={cfg.holdout_episodes}; "
                "record more or hold out fewer"
            )
        names = names or source.dataset.meta.features[cfg.state_key].get("names")
        for ep in read_episodes(source):
            frames = torch.from_numpy(ep.frames).permute(0, 3, 1, 2).contiguous()
            h, w = frames.shape[-2:]
            if h != w or (size is not None and h != size):
                raise ValueError(
                    f"{root} episode {ep.index} has frames of {h}x{w}; the estimator needs square frames of one "
                    f"size across its datasets ({size or 'the first one seen'})"
                )
            size = h
            part = (frames, torch.from_numpy(ep.state), [ep.task] * len(frames))
            (held if ep.index >= n - cfg.holdout_episodes else train).append(part)
        info["datasets"].append({"root": str(root), "episodes": n, "held_out": cfg.holdout_episodes})

    def join(parts) -> Frames:
        return Frames(torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]).float(),
                      [t for p in parts for t in p[2]])  # fmt: skip

    info.update(image_size=size, state_names=list(names) if names else None)
    return join(train), join(held), info


def held_out_scores(model: StateEstimator, data: Frames, train_mean: Tensor, names: list[str]) -> dict:
    preds = [
        model.denormalise(model(data.frames[i : i + 256], data.tasks[i : i + 256]))
        for i in range(0, len(data), 256)
    ]
    err = (torch.cat(preds) - data.state).abs()
    base = (data.state - train_mean).abs()
    return {
        "frames": len(data),
        "mae": float(err.mean()),
        "mae_train_mean": float(base.mean()),
        "mae_per_dim": {n: float(e) for n, e in zip(names, err.mean(0), strict=True)},
        "p95_per_dim": {n: float(e) for n, e in zip(names, err.quantile(0.95, dim=0), strict=True)},
        "mae_train_mean_per_dim": {n: float(e) for n, e in zip(names, base.mean(0), strict=True)},
    }


def describe(scores: dict) -> str:
    per_dim = ", ".join(f"{n} {v:.4f}" for n, v in scores["mae_per_dim"].items())
    return f"held-out MAE {scores['mae']:.4f} (train mean {scores['mae_train_mean']:.4f}); {per_dim}"


def train_estimator(cfg: EstimatorTrainConfig, record: dict, log=print) -> dict:
    """Train (or resume) to `cfg.steps` or `cfg.max_minutes`; returns the last held-out scores."""
    log(f"loading every frame of {', '.join(map(str, cfg.root))} into memory ...")
    t_load = time.time()
    train, held, info = load_split(cfg)
    names = info["state_names"] or [f"{cfg.state_key}[{i}]" for i in range(train.state.shape[1])]
    log(
        f"{len(train)} training frames, {len(held)} held out, {info['image_size']} px ({time.time() - t_load:.0f} s)"
    )
    torch.manual_seed(cfg.seed)
    config = EstimatorConfig(
        state_key=cfg.state_key,
        obs_key=OBS_KEYS[cfg.state_key],
        state_dim=train.state.shape[1],
        image_size=info["image_size"],
        width=cfg.width,
        keypoints=cfg.keypoints,
    )
    model = StateEstimator(config)
    model.mean.copy_(train.state.mean(0))
    model.std.copy_(train.state.std(0).clamp(min=1e-6))
    target = model.normalise(train.state)

    def loss(idx: Tensor) -> Tensor:
        pred = model(train.frames[idx], [train.tasks[i] for i in idx])
        return F.smooth_l1_loss(pred.float(), target[idx], beta=0.1)

    return run_small(
        SmallRun(cfg, model, "estimator_config", len(train), loss,
                 lambda: held_out_scores(model, held, train.state.mean(0), names), describe,
                 lambda folder, rec: save_estimator(folder, model, rec), "estimator", info),
        record, log,
    )  # fmt: skip
