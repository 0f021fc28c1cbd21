"""Train an `InverseDynamicsLabeller` (`encoders/inverse_dynamics.py`) on a labelled LeRobot dataset.

Every frame is held in memory (uint8); a sample is one transition t of an episode, read as the frames
(t−1, t, t+1) and the recorded action at t. The last `holdout_episodes` episodes of each dataset are
held out and scored at every evaluation (action MSE and R² per dimension against predicting the
training mean, `eval/metrics.action_errors`); `train_episodes` keeps only the first N of the rest, so
the labeller can be trained on a labelled subset disjoint from the episodes it will label. The run
saves `checkpoint.safetensors` (a rerun with the same --out resumes) and `labeller/` (what `label
--labeller` loads), both atomically.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from cosmos3_robot.datasets.episodes import open_source, read_episodes
from cosmos3_robot.encoders.inverse_dynamics import (
    InverseDynamicsLabeller,
    LabellerConfig,
    save_labeller,
    triplet_indices,
)
from cosmos3_robot.eval.metrics import action_errors
from cosmos3_robot.training.small_loop import SmallRun, SmallTrainConfig, run_small


@dataclass
class LabellerTrainConfig(SmallTrainConfig):
    train_episodes: int | None = None

    ROOT_NEEDS: ClassVar[str] = "a LeRobot dataset with an action column"
    COMMAND: ClassVar[str] = "train-labeller"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.train_episodes is not None and self.train_episodes < 1:
            raise ValueError(
                f"train_episodes must be a positive number of episodes, got {self.train_episodes}"
            )


@dataclass
class Transitions:
    """Every frame (N, 3, s, s) uint8; the transitions as frame indices (M, 3), their actions (M, A)
    and frame rates (M,)."""

    frames: Tensor
    triplets: Tensor
    actions: Tensor
    fps: Tensor

    def __len__(self) -> int:
        return len(self.triplets)


def load_transitions(cfg: LabellerTrainConfig) -> tuple[Transitions, Transitions, dict]:
    parts: dict[str, list] = {"train": [], "held": []}
    size, names, fps0, info = None, None, None, {"datasets": []}
    for root in cfg.root:
        source = open_source(root, cfg.image_key)
        if source.dataset is None or not source.has_actions:
            raise ValueError(
                f"{root} has no action column; train-labeller learns from a labelled LeRobot dataset "
                "(`cosmos3-robot record` writes one)"
            )
        n = source.num_episodes
        if n <= cfg.holdout_episodes:
            raise ValueError(
                f"dataset {root} has {n} episodes, not more than --holdout-episodes={cfg.holdout_episodes}; "
                "record more or hold out fewer"
            )
        first_held = n - cfg.holdout_episodes
        keep = first_held if cfg.train_episodes is None else min(cfg.train_episodes, first_held)
        names = names or source.dataset.meta.features[source.action_key].get("names")
        wanted = list(range(keep)) + list(range(first_held, n))
        for ep in read_episodes(source, wanted):
            h, w = ep.frames.shape[1:3]
            if h != w or (size is not None and h != size):
                raise ValueError(
                    f"{root} episode {ep.index} has frames of {h}x{w}; the labeller needs square frames of one "
                    f"size across its datasets ({size or 'the first one seen'})"
                )
            if len(ep.frames) < 2:
                continue
            size, fps0 = h, fps0 or ep.fps
            parts["held" if ep.index >= first_held else "train"].append(
                (torch.from_numpy(ep.frames).permute(0, 3, 1, 2), ep.actions, ep.fps)
            )
        info["datasets"].append({"root": str(root), "episodes": n, "trained_on": keep,
                                 "held_out": cfg.holdout_episodes, "fps": float(source.dataset.fps)})  # fmt: skip

    def join(eps) -> Transitions:
        frames, triplets, actions, rates, offset = [], [], [], [], 0
        for video, acts, fps in eps:
            idx = triplet_indices(len(video))
            frames.append(video)
            triplets.append(torch.from_numpy(idx + offset))
            actions.append(torch.from_numpy(np.asarray(acts[: len(idx)], np.float32)))
            rates.append(torch.full((len(idx),), float(fps)))
            offset += len(video)
        return Transitions(torch.cat(frames), torch.cat(triplets), torch.cat(actions), torch.cat(rates))

    info.update(image_size=size, fps=fps0, action_names=list(names) if names else None)
    return join(parts["train"]), join(parts["held"]), info


def held_out_scores(model: InverseDynamicsLabeller, data: Transitions, train_mean: Tensor) -> dict:
    pred = model.predict(data.frames, data.triplets, data.fps)
    scores = action_errors(pred.numpy(), data.actions.numpy(), train_mean.numpy())
    return {"transitions": len(data), **scores}


def describe(scores: dict) -> str:
    return f"held-out action MSE {scores['mse']:.4f} (mean action {scores['mean_action_mse']:.4f}), R² {scores['r2']:.3f}"


def train_labeller(cfg: LabellerTrainConfig, record: dict, log=print) -> dict:
    """Train (or resume) to `cfg.steps` or `cfg.max_minutes`; returns the last held-out scores."""
    log(f"loading every frame of {', '.join(map(str, cfg.root))} into memory ...")
    t_load = time.time()
    train, held, info = load_transitions(cfg)
    log(f"{len(train)} training transitions, {len(held)} held out, {info['image_size']} px, "
        f"{info['fps']:g} fps ({time.time() - t_load:.0f} s)")  # fmt: skip
    torch.manual_seed(cfg.seed)
    config = LabellerConfig(action_key="action", action_dim=train.actions.shape[1],
                            image_size=info["image_size"], fps=info["fps"], width=cfg.width,
                            keypoints=cfg.keypoints)  # fmt: skip
    model = InverseDynamicsLabeller(config)
    model.mean.copy_(train.actions.mean(0))
    model.std.copy_(train.actions.std(0).clamp(min=1e-6))
    target = (train.actions - model.mean) / model.std

    def loss(idx: Tensor) -> Tensor:
        return F.mse_loss(model(train.frames[train.triplets[idx]], train.fps[idx]).float(), target[idx])

    return run_small(
        SmallRun(cfg, model, "labeller_config", len(train), loss, lambda: held_out_scores(model, held, model.mean),
                 describe, lambda folder, rec: save_labeller(folder, model, rec), "labeller", info),
        record, log,
    )  # fmt: skip
