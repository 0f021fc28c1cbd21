"""Train a `StateEstimator` (`encoders/state_estimator.py`) on the state a LeRobot dataset recorded.

Every frame of every episode is held in memory (uint8; about 1.1 GB for 1500 Reach episodes at
128 px); the last `holdout_episodes` episodes of each dataset are held out and scored at every
evaluation: mean absolute error per state dimension in the dataset's units, against predicting the
training mean. The run saves `checkpoint.safetensors` (weights, optimiser, RNG, history; a rerun with
the same --out resumes) and `estimator/` (what `rollout --estimator` loads), both atomically.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from cosmos3_robot.datasets.episodes import open_source, read_episodes
from cosmos3_robot.encoders.state_estimator import EstimatorConfig, StateEstimator, save_estimator
from cosmos3_robot.files import CheckpointError, write_json_atomic
from cosmos3_robot.processors.data_state import OBS_KEYS
from cosmos3_robot.processors.normalize import key_parts
from cosmos3_robot.training.one_file_checkpoint import read_one_file, restore, save_one_file


@dataclass
class EstimatorTrainConfig:
    out: str
    root: list[str]
    state_key: str = "observation.environment_state"
    image_key: str = "observation.image"
    holdout_episodes: int = 50
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 100
    steps: int = 20000
    max_minutes: float | None = None
    eval_every: int = 250
    save_every: int = 500
    width: int = 32
    keypoints: int = 32
    dtype: str = "bf16"  # autocast of the training steps: bf16 (about 4x faster here) or fp32
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError(
                "train-estimator needs --root DIR (a LeRobot dataset recorded with the state to estimate)"
            )
        for name in ("holdout_episodes", "batch_size", "warmup", "steps", "eval_every", "save_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.max_minutes is not None and not (math.isfinite(self.max_minutes) and self.max_minutes > 0):
            raise ValueError(f"max_minutes must be a positive number of minutes, got {self.max_minutes}")
        if self.dtype not in ("bf16", "fp32"):
            raise ValueError(f"dtype must be bf16 or fp32, got {self.dtype!r}")
        parts = key_parts(self.state_key)
        if len(parts) != 1 or parts[0] not in OBS_KEYS:
            raise ValueError(
                f"state_key must be one recorded state column ({', '.join(k for k in OBS_KEYS if k != 'observation.image')}), "
                f"got {self.state_key!r}"
            )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


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
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(data), 256):
            preds.append(model.denormalise(model(data.frames[i : i + 256], data.tasks[i : i + 256])))
    model.train()
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


def lr_at(cfg: EstimatorTrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (0.05 + 0.475 * (1 + math.cos(math.pi * frac)))


def _load_checkpoint(path: Path, model: StateEstimator, opt, gen) -> dict:
    meta, tensors = read_one_file(path)
    if meta["estimator_config"] != asdict(model.config):
        raise CheckpointError(
            f"{path} holds an estimator with other settings ({meta['estimator_config']}); use a new --out or "
            "the options of the run that wrote it"
        )
    weights, rng = restore(tensors, opt)
    model.load_state_dict(weights)
    gen.set_state(rng["sampler"])
    return meta


def train_estimator(cfg: EstimatorTrainConfig, record: dict, log=print) -> dict:
    """Train (or resume) to `cfg.steps` or `cfg.max_minutes`; returns the last held-out scores."""
    out = Path(cfg.out)
    ckpt = out / "checkpoint.safetensors"
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
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, seconds, history = 0, 0.0, []
    if ckpt.exists():
        meta = _load_checkpoint(ckpt, model, opt, gen)
        step, seconds, history = meta["step"], meta["train_seconds"], meta["history"]
        log(f"resuming {ckpt} at step {step}")
    start, t0 = step, time.time()
    target = model.normalise(train.state)

    def save() -> None:
        meta = {"step": step, "train_seconds": round(seconds, 1), "history": history,
                "estimator_config": asdict(config), "args": asdict(cfg), "data": info}  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        save_one_file(ckpt, model.state_dict(), opt, {"sampler": gen.get_state()}, meta)
        save_estimator(out / "estimator", model, {**record, "step": step, "train_seconds": round(seconds, 1),
                                                  "held_out": history[-1] if history else None, "data": info})  # fmt: skip
        write_json_atomic(out / "train_log.json", meta)

    loss_sum, loss_n = 0.0, 0
    while step < cfg.steps:
        tic = time.time()
        idx = torch.randint(len(train), (cfg.batch_size,), generator=gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
            pred = model(train.frames[idx], [train.tasks[i] for i in idx])
        loss = F.smooth_l1_loss(pred, target[idx], beta=0.1)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        seconds += time.time() - tic
        loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
        out_of_time = cfg.max_minutes is not None and time.time() - t0 > cfg.max_minutes * 60
        if step % cfg.eval_every == 0 or step == cfg.steps or out_of_time:
            scores = held_out_scores(model, held, train.state.mean(0), names)
            history.append(
                {"step": step, "train_seconds": round(seconds, 1), "loss": loss_sum / loss_n, **scores}
            )
            loss_sum, loss_n = 0.0, 0
            per_dim = ", ".join(f"{n} {v:.4f}" for n, v in scores["mae_per_dim"].items())
            log(f"step {step} ({seconds:.0f} s): held-out MAE {scores['mae']:.4f} (train mean "
                f"{scores['mae_train_mean']:.4f}); {per_dim}")  # fmt: skip
        if step % cfg.save_every == 0 or step == cfg.steps or out_of_time:
            save()
        if out_of_time:
            log(f"stopping at step {step}: --max-minutes {cfg.max_minutes} reached")
            break
    if step == start and not (out / "estimator").exists():
        save()
    last = history[-1] if history else {}
    return {**last, "steps_run": step - start, "estimator": str(out / "estimator")}
