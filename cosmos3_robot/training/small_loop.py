"""The loop of the small trainers (`train-estimator`, `train-labeller`): seeded batches drawn from
data held in memory, bf16 autocast, linear warmup then cosine to 5 %, held-out scores every
`eval_every` steps, and a single-file checkpoint plus the exported folder every `save_every` steps,
when `steps` or `max_minutes` is reached. A rerun with the same output folder resumes: weights,
optimiser, sampler state and history come back from the checkpoint, which is refused if it holds a
model of other settings. `max_minutes` is the budget of the whole run, resumes included: a rerun of a
run that spent it trains nothing more.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from cosmos3_robot.files import CheckpointError, write_json_atomic
from cosmos3_robot.infra.cpu_pack import training_dtype
from cosmos3_robot.training.one_file_checkpoint import read_one_file, restore, save_one_file


@dataclass
class SmallTrainConfig:
    """The settings both small trainers share; each subclass adds its own and says what --root needs."""

    out: str
    root: list[str]
    image_key: str = "observation.image"
    holdout_episodes: int = 50
    batch_size: int = 64
    lr: float = 1e-3
    warmup: int = 100
    steps: int = 3000
    max_minutes: float | None = None
    eval_every: int = 250
    save_every: int = 500
    width: int = 32
    keypoints: int = 32
    dtype: str = "auto"  # autocast of the training steps: bf16, fp32, or auto (cpu_pack.training_dtype)
    seed: int = 0

    ROOT_NEEDS: ClassVar[str] = "a LeRobot dataset"
    COMMAND: ClassVar[str] = "this trainer"

    def __post_init__(self) -> None:
        if not self.root:
            raise ValueError(f"{self.COMMAND} needs --root DIR ({self.ROOT_NEEDS})")
        for name in ("holdout_episodes", "batch_size", "warmup", "steps", "eval_every", "save_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr}")
        if self.max_minutes is not None and not (math.isfinite(self.max_minutes) and self.max_minutes > 0):
            raise ValueError(f"max_minutes must be a positive number of minutes, got {self.max_minutes}")
        training_dtype(self.dtype)  # refuses another name

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def lr_at(cfg, step: int) -> float:
    """`cfg.lr` after a linear warmup of `cfg.warmup` steps, then a cosine to 5 % at `cfg.steps`."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return cfg.lr * (0.05 + 0.475 * (1 + math.cos(math.pi * frac)))


@dataclass
class SmallRun:
    """What the loop needs of one trainer."""

    cfg: Any  # steps, max_minutes, eval_every, save_every, batch_size, lr, warmup, dtype, seed
    model: nn.Module
    config_key: str  # the name of the model's config in the checkpoint's meta, e.g. "labeller_config"
    samples: int  # training samples to draw batch indices from
    loss: Callable[[Tensor], Tensor]  # a batch of sample indices -> the loss (under autocast)
    evaluate: Callable[[], dict]  # held-out scores
    describe: Callable[[dict], str]  # the log line of those scores
    export: Callable[[Path, dict], None]  # (folder, record) -> write the exported model folder
    folder: str  # the exported folder's name inside cfg.out, e.g. "labeller"
    info: dict  # what the data was, kept in the meta


def run_small(run: SmallRun, record: dict, log=print) -> dict:
    """Train (or resume) to `cfg.steps` or `cfg.max_minutes`; returns the last held-out scores with
    `steps_run` and the exported folder's path under `run.folder`."""
    cfg, model = run.cfg, run.model
    out = Path(cfg.out)
    ckpt = out / "checkpoint.safetensors"
    model_config = asdict(model.config)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    gen = torch.Generator().manual_seed(cfg.seed)
    step, seconds, history, wall_before = 0, 0.0, [], 0.0
    if ckpt.exists():
        meta, tensors = read_one_file(ckpt)
        if meta[run.config_key] != model_config:
            raise CheckpointError(
                f"{ckpt} holds a model with other settings ({meta[run.config_key]}); use a new --out or the "
                "options of the run that wrote it"
            )
        weights, rng = restore(tensors, opt)
        model.load_state_dict(weights)
        gen.set_state(rng["sampler"])
        step, seconds, history = meta["step"], meta["train_seconds"], meta["history"]
        wall_before = meta.get("wall_seconds", seconds)  # older checkpoints: their step time
        log(f"resuming {ckpt} at step {step}")
    start, t0 = step, time.time()

    def wall() -> float:  # seconds of wall time over every invocation of this run
        return wall_before + time.time() - t0

    def spent() -> bool:
        return cfg.max_minutes is not None and wall() > cfg.max_minutes * 60

    dtype = training_dtype(cfg.dtype)
    log(f"training steps in {dtype}" + (" (--dtype auto on this CPU)" if cfg.dtype == "auto" else ""))

    def save() -> None:
        meta = {"step": step, "train_seconds": round(seconds, 1), "wall_seconds": round(wall(), 1),
                "history": history, run.config_key: model_config, "args": asdict(cfg), "data": run.info}  # fmt: skip
        out.mkdir(parents=True, exist_ok=True)
        save_one_file(ckpt, model.state_dict(), opt, {"sampler": gen.get_state()}, meta)
        run.export(out / run.folder, {**record, "step": step, "train_seconds": round(seconds, 1),
                                      "held_out": history[-1] if history else None, "data": run.info})  # fmt: skip
        write_json_atomic(out / "train_log.json", meta)

    loss_sum, loss_n = 0.0, 0
    if done := spent():
        log(f"--max-minutes {cfg.max_minutes} was spent by this run already (step {step}): nothing to train")
    while step < cfg.steps and not done:
        tic = time.time()
        idx = torch.randint(run.samples, (cfg.batch_size,), generator=gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = run.loss(idx)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        seconds += time.time() - tic
        loss_sum, loss_n = loss_sum + loss.item(), loss_n + 1
        out_of_time = spent()
        if step % cfg.eval_every == 0 or step == cfg.steps or out_of_time:
            was_training = model.training
            model.eval()
            with torch.no_grad():
                scores = run.evaluate()
            model.train(was_training)
            history.append(
                {"step": step, "train_seconds": round(seconds, 1), "loss": loss_sum / loss_n, **scores}
            )
            loss_sum, loss_n = 0.0, 0
            log(f"step {step} ({seconds:.0f} s): {run.describe(scores)}")
        if step % cfg.save_every == 0 or step == cfg.steps or out_of_time:
            save()
        if out_of_time:
            log(f"stopping at step {step}: --max-minutes {cfg.max_minutes} reached")
            break
    if step == start and not (out / run.folder).exists():
        save()
    last = history[-1] if history else {}
    return {**last, "steps_run": step - start, run.folder: str(out / run.folder)}
