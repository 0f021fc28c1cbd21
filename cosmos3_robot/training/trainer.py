"""The trainer for stage 1 (Reasoner + ViT, next-token prediction) and stage 2 (Generator, flow
matching over mixed action modes). docs/design.md, "Training stages".

    stage "reasoner"                          stage "generator"
    TextBatch ─► [ViT] ─► Reasoner ─► CE      ClipBatch ─► Reasoner (frozen, no_grad) ─► cache
      trains: Reasoner (+ ViT)                              │  modes drawn per sample / batch
      Generator untouched                                   ▼
                                              task heads (fd / id / policy / video) ─► flow loss
                                                trains: Generator only; EMA of its weights

One optimiser step consumes one *global* batch from the data source. Each rank keeps its rows
(`distributed.rank_rows`) and processes them in micro-batches ("chunks") with gradient
accumulation. The objective is defined on the global batch so that it does not depend on how it
is split:

    reasoner:   Σ_chunks  CE_sum(chunk) / (label tokens in the global batch)
    generator:  Σ_chunks Σ_modes  (samples of the mode in the chunk / global batch) · loss(chunk, mode)

and every random draw is a function of (seed, step[, global chunk index]): the modes and prompt
dropout from the trainer's torch.Generator over the global batch (identical on every rank), the
noise from a generator seeded per global chunk. Hence a run on N ranks follows the same curve as
one process with micro_batch_size = B / N, and a resumed run the same curve as an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from cosmos3_robot.encoders.vit import ViT, vit_preset
from cosmos3_robot.files import exclusive_lock
from cosmos3_robot.infra.distributed import DistInfo, all_reduce_sum, broadcast_from_main, rank_rows, wrap
from cosmos3_robot.interop.checkpoint import load_model
from cosmos3_robot.model import MoT
from cosmos3_robot.tasks import ClipBatch
from cosmos3_robot.training import checkpoint as ckpt
from cosmos3_robot.training.config import TrainConfig
from cosmos3_robot.training.data.batches import (
    IGNORE,
    DataSource,
    batch_size,
    count_tokens,
    is_text,
    shard_batch,
)
from cosmos3_robot.training.ema import EMA
from cosmos3_robot.training.plots import plot_losses
from cosmos3_robot.training.schedule import lr_at, set_lr
from cosmos3_robot.training.stage_loss import StageLoss
from cosmos3_robot.training.trainer_checkpoints import TrainerCheckpoints

NULL_TOKEN = 0  # the null prompt of classifier-free guidance: one token, id 0


# ------------------------------------------------------------------------------------------------
# The trainer
# ------------------------------------------------------------------------------------------------


def build_model(cfg: TrainConfig) -> tuple[MoT, ViT | None]:
    """From `model.init` (a save_model folder) or a fresh preset (seeded by cfg.seed)."""
    torch.manual_seed(cfg.seed)
    want = cfg.model.config()
    if cfg.model.init:
        model, vit, _ = load_model(cfg.model.init, dtype=torch.float32)
        model.train()
        if model.config.to_dict() != want.to_dict():
            changed = sorted(k for k, v in want.to_dict().items() if model.config.to_dict().get(k) != v)
            raise ValueError(
                f"model.init={cfg.model.init} holds a model that differs from model={cfg.model.preset} in "
                f"{changed}; pass the preset (and overrides) the folder was built with, so that the run's "
                "config.yaml says what is trained"
            )
    else:
        model = MoT(want)
        vit = None
    if cfg.model.vit and vit is None:
        vit = ViT(vit_preset(cfg.model.vit, model.config.reasoner.hidden_size))
    return model, vit


class Trainer(TrainerCheckpoints):
    """Construct with a TrainConfig and a DataSource, then `fit()`.

    >>> trainer = Trainer(cfg, data)           # builds the model from cfg.model unless given
    >>> summary = trainer.fit()                # resumes from <out>/checkpoints when present
    """

    def __init__(
        self,
        cfg: TrainConfig,
        data: DataSource,
        model: MoT | None = None,
        vit: ViT | None = None,
        dist_info: DistInfo | None = None,
    ):
        if cfg.stage == "vae":
            raise ValueError(
                "stage 'vae' is trained by `cosmos3-robot train-vae` (cosmos3_robot.training.vae)"
            )
        self.cfg, self.data = cfg, data
        self.dist = dist_info or DistInfo()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        if model is None:
            model, vit = build_model(cfg)
        self.model, self.vit = (
            model.to(self.dist.device),
            vit.to(self.dist.device) if vit is not None else None,
        )
        if cfg.stage == "generator" and cfg.generator.prompt_dropout > 0:
            # The model sees the null prompt in training, so classifier-free guidance is meaningful.
            self.model.config = dataclasses.replace(self.model.config, null_condition=True)
        self.out = Path(cfg.out)
        self.ckpt_root = self.out / "checkpoints"
        self._freeze()
        # Wrap before building the optimiser: FSDP2 replaces parameters by sharded DTensors.
        self.loss_module = wrap(StageLoss(self.model, self.vit, cfg), cfg.distributed.strategy, self.dist)
        self._build_optimizer()
        self.generator = torch.Generator().manual_seed(cfg.seed)  # modes, prompt dropout
        self.step = 0
        self.epoch = 0
        self.batch_in_epoch = 0
        self.train_seconds = 0.0  # time in training steps so far, over every resume (cfg.minutes)
        self.history: list[dict[str, Any]] = []

    # -- what trains ------------------------------------------------------------------------------
    def _freeze(self) -> None:
        """requires_grad only on the stage's parameters (the other tower, and in stage 2 the ViT, frozen)."""
        model, vit, stage = self.model, self.vit, self.cfg.stage
        if stage == "generator" and model.config.generator is None:
            raise ValueError(
                "stage 'generator' needs a model with a Generator tower (this one is Reasoner-only)"
            )
        params = model.reasoner_parameters() if stage == "reasoner" else model.generator_parameters()
        train_ids = {id(p) for p in params}
        model.requires_grad_(False)
        for p in model.parameters():
            if id(p) in train_ids:
                p.requires_grad_(True)
        if vit is not None:
            vit.requires_grad_(stage == "reasoner")

    def _build_optimizer(self) -> None:
        stage = self.cfg.stage
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        if self.vit is not None and stage == "reasoner":
            named += [(f"vit.{n}", p) for n, p in self.vit.named_parameters()]
        self.named_params = named
        decay = [p for _, p in named if p.ndim >= 2]
        no_decay = [p for _, p in named if p.ndim < 2]
        o = self.cfg.optim
        # The optimiser's order (decay group, then the rest) defines the names of its state.
        self.param_names = [n for n, p in named if p.ndim >= 2] + [n for n, p in named if p.ndim < 2]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
            lr=o.lr, betas=tuple(o.betas), eps=o.eps,
        )  # fmt: skip
        self.ema = None
        if stage == "generator" and self.cfg.ema_decay > 0:
            self.ema = EMA(named, self.cfg.ema_decay)

    # -- data -------------------------------------------------------------------------------------
    def _check_batch(self, batch: Any) -> None:
        stage = self.cfg.stage
        if stage == "generator" and not isinstance(batch, ClipBatch):
            raise ValueError(
                f"stage 'generator' trains on ClipBatch (video/action latents), but the data source yields "
                f"{type(batch).__name__}; point data at a clip dataset or use stage=reasoner"
            )
        if stage == "generator" and batch.video is None:
            raise ValueError("stage 'generator' needs video latents in every ClipBatch; this data has none")
        if stage == "reasoner" and not is_text(batch):
            raise ValueError(
                f"stage 'reasoner' trains on TextBatch (tokens with next-token labels), but the data source "
                f"yields {type(batch).__name__}; point data at a text/caption dataset or use stage=generator"
            )

    def _train_batches(self) -> Iterator[Any]:
        """Global batches forever, epoch after epoch, from where a resumed run stopped (the data
        source starts its epoch there: the batches already consumed are not built again)."""
        while True:
            start = self.batch_in_epoch
            for batch in self.data.train_batches(self.epoch, start):
                self.batch_in_epoch += 1
                yield batch
            if start == 0 and self.batch_in_epoch == 0:
                raise ValueError(f"the data source yielded no training batch in epoch {self.epoch}")
            self.epoch += 1
            self.batch_in_epoch = 0

    # -- randomness: a function of (seed, step, global chunk) ------------------------------------
    def _noise_seed(self, step: int, chunk: int, salt: int = 0) -> int:
        return (self.cfg.seed * 1_000_003 + step * 10_007 + chunk * 101 + salt) % (2**63 - 1)

    def _plan_global(self, batch: Any) -> tuple[Any, list[str] | None]:
        """Draw modes and prompt dropout for the whole global batch (identical on every rank)."""
        if self.cfg.stage != "generator":
            return batch, None
        g = self.cfg.generator
        b = batch_size(batch)
        names = sorted(g.modes)
        probs = torch.tensor([g.modes[n] for n in names], dtype=torch.float64)
        if batch.action is None:  # action-free clips only train the video mode
            modes = ["video"] * b
        elif g.mode_mix == "per_batch":
            modes = [names[int(torch.multinomial(probs, 1, generator=self.generator))]] * b
        else:
            modes = [
                names[int(i)] for i in torch.multinomial(probs, b, replacement=True, generator=self.generator)
            ]
        if g.prompt_dropout > 0:
            drop = torch.rand(b, generator=self.generator) < g.prompt_dropout
            batch = batch.drop_prompts(drop, NULL_TOKEN)
        return batch, modes

    def _chunks(self, batch: Any) -> Iterator[tuple[int, int, int]]:
        """(start, stop, global chunk index) of this rank's micro-batches."""
        start, stop = rank_rows(batch_size(batch), self.dist)
        mb = self.cfg.micro_batch_size or (stop - start)
        if (stop - start) % mb:
            raise ValueError(f"micro_batch_size={mb} must divide the per-rank batch {stop - start}")
        for s in range(start, stop, mb):
            yield s, s + mb, s // mb

    def _autocast(self):
        if self.cfg.precision == "bf16":
            return torch.autocast(self.dist.device.type, dtype=torch.bfloat16)
        return nullcontext()

    # -- one optimiser step -----------------------------------------------------------------------
    def train_step(self, batch: Any) -> dict[str, Any]:
        self._check_batch(batch)
        t0 = time.perf_counter()
        cfg, step = self.cfg, self.step
        lr = lr_at(
            step, cfg.optim.lr, cfg.optim.warmup_steps, self._schedule_length(), cfg.optim.min_lr_ratio
        )
        set_lr(self.optimizer, lr)
        batch, modes = self._plan_global(batch)
        b = batch_size(batch)
        norm = float((batch.labels != IGNORE).sum()) if is_text(batch) else float(b)
        if norm == 0:
            raise ValueError("a text batch has no label token (all labels are -100)")
        self.loss_module.train()
        self.optimizer.zero_grad(set_to_none=True)
        chunks = list(self._chunks(batch))
        sums: dict[str, list[Tensor]] = {}
        for k, (s, e, c) in enumerate(chunks):
            chunk = shard_batch(batch, b, s, e)
            if self.dist.device.type != "cpu":
                chunk = chunk.to(self.dist.device)
            plan = {
                "norm": norm,
                "modes": modes[s:e] if modes else None,
                "noise_seed": self._noise_seed(step, c),
            }
            if modes and self.dist.enabled and cfg.distributed.strategy == "fsdp":
                plan["run_modes"] = sorted(set(modes))  # the global batch's modes: same on every rank
            sync = k == len(chunks) - 1
            ctx = (
                self.loss_module.no_sync()
                if (not sync and hasattr(self.loss_module, "no_sync"))
                else nullcontext()
            )
            with ctx:
                with self._autocast():
                    objective, stats = self.loss_module(chunk, plan)
                # DDP / FSDP average gradients over ranks; the objective is a sum over the global batch.
                (objective * self.dist.world_size).backward()
            for mode, (total, n) in stats.items():
                acc = sums.setdefault(mode, [torch.zeros(()), torch.zeros(())])
                acc[0] += total.cpu()
                acc[1] += n.cpu()
        params = [p for _, p in self.named_params]
        if cfg.optim.grad_clip > 0:
            grad_norm = torch.nn.utils.clip_grad_norm_(params, cfg.optim.grad_clip)
        else:
            grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
        self.optimizer.step()
        if self.ema is not None:
            self.ema.update()
        self.step += 1
        # Per-mode means over the global batch (all ranks).
        names = sorted(set(cfg.generator.modes) | {"video", "text"})
        vec = torch.zeros(2 * len(names), dtype=torch.float64)
        for i, n in enumerate(names):
            if n in sums:
                vec[2 * i], vec[2 * i + 1] = float(sums[n][0]), float(sums[n][1])
        vec = all_reduce_sum(vec, self.dist)
        losses = {n: float(vec[2 * i] / vec[2 * i + 1]) for i, n in enumerate(names) if vec[2 * i + 1] > 0}
        if is_text(batch):
            loss = losses["text"]
        else:
            loss = sum(losses[n] * float(vec[2 * i + 1]) for i, n in enumerate(names) if n in losses) / b
        dt = time.perf_counter() - t0
        tokens = count_tokens(batch, self.model.config.patch_size)
        return {
            "step": self.step, "loss": loss, "losses": losses, "lr": lr, "grad_norm": grad_norm,
            "seconds": dt, "clips_per_s": b / dt, "tokens_per_s": tokens / dt,
        }  # fmt: skip

    # -- validation -------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Loss per mode on the validation batches, with fixed seeds (EMA weights in stage 2)."""
        batches = self.data.val_batches()
        if self.cfg.val_batches is not None:
            batches = batches[: self.cfg.val_batches]
        if not batches:
            return {}
        self.loss_module.eval()
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        ctx = self.ema.applied() if self.ema is not None else nullcontext()
        with ctx:
            for i, batch in enumerate(batches):
                self._check_batch(batch)
                b = batch_size(batch)
                if self.dist.device.type != "cpu":
                    batch = batch.to(self.dist.device)
                if is_text(batch):
                    plans = [("text", {"norm": 1.0, "modes": None, "noise_seed": 0})]
                else:
                    modes = (
                        ["video"]
                        if batch.action is None
                        else sorted(m for m, w in self.cfg.generator.modes.items() if w > 0)
                    )
                    plans = [
                        (m, {"norm": float(b), "modes": [m] * b, "noise_seed": 1_000_000 + 97 * i + k})
                        for k, m in enumerate(modes)
                    ]
                for _, plan in plans:
                    with self._autocast():
                        _, stats = self.loss_module(batch, plan)
                    for mode, (total, n) in stats.items():
                        sums[mode][0] += float(total)
                        sums[mode][1] += float(n)
        self.loss_module.train()
        return {m: s / n for m, (s, n) in sorted(sums.items()) if n > 0}

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train to cfg.steps (resuming when a checkpoint is there). Returns a summary dict. One run
        per `out` at a time: a second one is refused while the first holds its lock."""
        with exclusive_lock(self.out, "train") if self.dist.is_main else nullcontext():
            return self._fit()

    def _schedule_length(self) -> int:
        """The learning-rate schedule's length in steps: `steps`, or under a `minutes` budget that
        ends first, the steps the budget allows at the pace so far (the schedule then follows time)."""
        cfg = self.cfg
        if cfg.minutes is None or self.train_seconds <= 0 or self.step == 0:
            return cfg.steps
        pace = self.step / self.train_seconds
        length = torch.tensor(min(cfg.steps, max(self.step + 1, int(pace * 60 * cfg.minutes))))
        # Every rank follows rank 0's clock, so all use the same learning rate.
        return int(broadcast_from_main(length, self.dist))

    def _out_of_time(self) -> bool:
        """cfg.minutes spent; every rank takes rank 0's answer, so that all stop at the same step."""
        if self.cfg.minutes is None:
            return False
        spent = torch.tensor(float(self.train_seconds >= 60 * self.cfg.minutes))
        return bool(broadcast_from_main(spent, self.dist))

    def _fit(self) -> dict[str, Any]:
        cfg, main = self.cfg, self.dist.is_main
        self._maybe_resume()
        if main:
            self.out.mkdir(parents=True, exist_ok=True)
            self._trim_metrics()
        bar = None
        if main and cfg.progress:
            from tqdm import tqdm

            total = cfg.steps if cfg.minutes is None else None  # under a time budget the end step is unknown
            bar = tqdm(total=total, initial=self.step, desc=f"train {cfg.stage}", dynamic_ncols=True)
        window: dict[str, list[float]] = defaultdict(list)
        it = self._train_batches()
        last_saved = self.step if ckpt.latest_checkpoint(self.ckpt_root) else -1
        t_start, start_step = time.perf_counter(), self.step
        out_of_time = self._out_of_time()  # asked once per step: under torchrun it is a collective
        while self.step < cfg.steps and not out_of_time:
            t_step = time.perf_counter()
            rec = self.train_step(next(it))
            self.train_seconds += time.perf_counter() - t_step
            out_of_time = self._out_of_time()
            last = self.step == cfg.steps or out_of_time
            self.history.append(rec)
            for m, v in rec["losses"].items():
                window[m].append(v)
            window["loss"].append(rec["loss"])
            if bar is not None:
                bar.update(1)
                bar.set_postfix({m: f"{sum(v) / len(v):.4f}" for m, v in window.items()}, refresh=False)
            if self.step % cfg.log_every == 0 or last:
                self._log({"split": "train", **{k: v for k, v in rec.items() if k != "losses"},
                           **{f"loss/{m}": sum(v) / len(v) for m, v in window.items() if m != "loss"},
                           "loss": sum(window["loss"]) / len(window["loss"])})  # fmt: skip
                window.clear()
            if (cfg.val_every and self.step % cfg.val_every == 0) or last:
                val = self.validate()
                if val:
                    self._log({"split": "val", "step": self.step, **{f"loss/{m}": v for m, v in val.items()}})
            if self.step % cfg.checkpoint.every == 0 or last:
                self.save()
                last_saved = self.step
        if bar is not None:
            bar.close()
        seconds = time.perf_counter() - t_start
        if main and self.step < cfg.steps and self.step > start_step:
            print(f"stopping at step {self.step} of {cfg.steps}: minutes={cfg.minutes} reached", flush=True)
        if main and self.step > start_step:
            print(
                "saving the last checkpoint, exporting the model (EMA weights) and plotting ...", flush=True
            )
        if last_saved != self.step:
            self.save()
        model_dir = self.export()
        plots = plot_losses(self.out / "metrics.jsonl", self.out / "plots") if main else []
        tail = [r["loss"] for r in self.history[-cfg.log_every :]]  # what the bar showed last
        return {
            "step": self.step,
            "steps_run": self.step - start_step,
            "seconds": seconds,
            "train_seconds": self.train_seconds,
            "final_loss": sum(tail) / len(tail) if tail else None,
            "final_loss_window": len(tail),
            "model": str(model_dir),
            "plots": [str(p) for p in plots],
            "metrics": str(self.out / "metrics.jsonl"),
        }
