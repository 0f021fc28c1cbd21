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

import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

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
from cosmos3_robot.files import CheckpointError, write_json_atomic
from cosmos3_robot.training.one_file_checkpoint import read_one_file, restore, save_one_file


@dataclass
class LabellerTrainConfig:
    out: str
    root: list[str]
    image_key: str = "observation.image"
    holdout_episodes: int = 50
    train_episodes: int | None = None
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 100
    steps: int = 3000
    max_minutes: float | None = None
    eval_every: int = 250
    save_every: int = 500
    width: int = 32
    keypoints: int = 32
    dtype: str = "bf16"  # autocast of the training steps: bf16 (about 4x faster here) or fp32
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError("train-labeller needs --root DIR (a LeRobot dataset with an action column)")
        for name in ("holdout_episodes", "batch_size", "warmup", "steps", "eval_every", "save_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.train_episodes is not None and self.train_episodes < 1:
            raise ValueError(
                f"train_episodes must be a positive number of episodes, got {self.train_episodes}"
            )
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.max_minutes is not None and not (math.isfinite(self.max_minutes) and self.max_minutes > 0):
            raise ValueError(f"max_minutes must be a positive number of minutes, got {self.max_minutes}")
        if self.dtype not in ("bf16", "fp32"):
            raise ValueError(f"dtype must be bf16 or fp32, got {self.dtype!r}")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


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


@torch.no_grad()
def predict(model: InverseDynamicsLabeller, data: Transitions, batch: int = 256) -> Tensor:
    was_training = model.training
    model.eval()
    out = [
        model.denormalise(model(data.frames[data.triplets[i : i + batch]], data.fps[i : i + batch]))
        for i in range(0, len(data), batch)
    ]
    model.train(was_training)
    return torch.cat(out)


def held_out_scores(model: InverseDynamicsLabeller, data: Transitions, train_mean: Tensor) -> dict:
    scores = action_errors(predict(model, data).numpy(), data.actions.numpy(), train_mean.numpy())
    return {"transitions": len(data), **scores}


def _load_checkpoint(path: Path, model: InverseDynamicsLabeller, opt, gen) -> dict:
    meta, tensors = read_one_file(path)
    if meta["labeller_config"] != asdict(model.config):
        raise CheckpointError(
            f"{path} holds a labeller with other settings ({meta['labeller_config']}); use a new --out or "
            "the options of the run that wrote it"
        )
    weights, rng = restore(tensors, opt)
    model.load_state_dict(weights)
    gen.set_state(rng["sampler"])
    return meta


def train_labeller(cfg: LabellerTrainConfig, record: dict, log=print) -> dict:
    """Train (or resume) to `cfg.steps` or `cfg.max_minutes`; returns the last held-out scores."""
    from cosmos3_robot.training.estimator import lr_at

    out = Path(cfg.out)
    ckpt = out / "checkpoint.safetensors"
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
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, seconds, history = 0, 0.0, []
    if ckpt.exists():
        meta = _load_checkpoint(ckpt, model, opt, gen)
        step, seconds, history = meta["step"], meta["train_seconds"], meta["history"]
        log(f"resuming {ckpt} at step {step}")
    start, t0 = step, time.time()
    target = (train.actions - model.mean) / model.std

    def save() -> None:
        meta = {"step": step, "train_seconds": round(seconds, 1), "history": history,
                "labeller_config": asdict(config), "args": asdict(cfg), "data": info}  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        save_one_file(ckpt, model.state_dict(), opt, {"sampler": gen.get_state()}, meta)
        save_labeller(out / "labeller", model, {**record, "step": step, "train_seconds": round(seconds, 1),
                                                "held_out": history[-1] if history else None, "data": info})  # fmt: skip
        write_json_atomic(out / "train_log.json", meta)

    loss_sum, loss_n = 0.0, 0
    while step < cfg.steps:
        tic = time.time()
        idx = torch.randint(len(train), (cfg.batch_size,), generator=gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
            pred = model(train.frames[train.triplets[idx]], train.fps[idx])
        loss = F.mse_loss(pred.float(), target[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        seconds += time.time() - tic
        loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
        out_of_time = cfg.max_minutes is not None and time.time() - t0 > cfg.max_minutes * 60
        if step % cfg.eval_every == 0 or step == cfg.steps or out_of_time:
            scores = held_out_scores(model, held, model.mean)
            history.append(
                {"step": step, "train_seconds": round(seconds, 1), "loss": loss_sum / loss_n, **scores}
            )
            loss_sum, loss_n = 0.0, 0
            log(f"step {step} ({seconds:.0f} s): held-out action MSE {scores['mse']:.4f} (mean action "
                f"{scores['mean_action_mse']:.4f}), R² {scores['r2']:.3f}")  # fmt: skip
        if step % cfg.save_every == 0 or step == cfg.steps or out_of_time:
            save()
        if out_of_time:
            log(f"stopping at step {step}: --max-minutes {cfg.max_minutes} reached")
            break
    if step == start and not (out / "labeller").exists():
        save()
    last = history[-1] if history else {}
    return {**last, "steps_run": step - start, "labeller": str(out / "labeller")}
