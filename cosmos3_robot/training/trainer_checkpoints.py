"""The trainer's checkpoints and metrics log: snapshot, save, resume, export (see `training/checkpoint.py`
for the folder format). A mixin of `Trainer`, kept apart so the training loop reads on its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cosmos3_robot.infra.distributed import barrier, full_tensor
from cosmos3_robot.training import checkpoint as ckpt


class TrainerCheckpoints:
    """Needs the `Trainer` attributes: cfg, model, vit, ema, optimizer, param_names, generator, data,
    dist, step, epoch, batch_in_epoch, ckpt_root, out."""

    # -- checkpoints ------------------------------------------------------------------------------
    def snapshot(self) -> ckpt.Snapshot:
        """Gather everything a resume needs (collective under FSDP: every rank calls it)."""
        optim_tensors, optim_meta = ckpt.optimizer_state(self.optimizer, self.param_names)
        rng_tensors, rng_meta = ckpt.rng_state(self.generator)
        ema_state = None
        if self.ema is not None:
            ema_state = {n: full_tensor(t).cpu().clone() for n, t in self.ema.state_dict().items()}
        return ckpt.Snapshot(
            step=self.step,
            model_config=self.model.config.to_dict(),
            model_state=ckpt.module_state(self.model),
            train_config=self.cfg.to_dict(),
            vit_config=self.vit.config.to_dict() if self.vit is not None else None,
            vit_state=ckpt.module_state(self.vit) if self.vit is not None else None,
            ema_state=ema_state,
            optim_tensors=optim_tensors,
            optim_meta=optim_meta,
            rng_tensors=rng_tensors,
            rng_meta=rng_meta,
            data_state=self.data.state().to_dict(),
            trainer_state={
                "epoch": self.epoch,
                "batch_in_epoch": self.batch_in_epoch,
                "train_seconds": self.train_seconds,
                "ema_updates": self.ema.updates if self.ema is not None else 0,
            },
        )

    def save(self) -> Path | None:
        snap = self.snapshot()
        path = None
        if self.dist.is_main:
            path = ckpt.save_checkpoint(self.ckpt_root, snap, self.cfg.checkpoint.keep_last)
        barrier(self.dist)
        return path

    def resume(self, folder: str | Path) -> None:
        """Continue from a checkpoint folder: weights, EMA, optimiser, RNG, data position."""
        folder = Path(folder)
        snap = ckpt.load_checkpoint(folder)
        ckpt.check_config(snap, self.cfg.to_dict(), folder)
        data_state = json.loads(json.dumps(self.data.state().to_dict()))
        changed = state_changes(snap.data_state, data_state)
        if changed:
            shown = "; ".join(
                f"{path}: {old!r} (checkpoint) -> {new!r} (now)" for path, old, new in changed[:3]
            )
            raise ckpt.CheckpointError(
                f"{folder}: this run reads other data than the checkpoint trained on ({shown}"
                f"{'; ...' if len(changed) > 3 else ''}); resume with the run's own settings "
                "(its config.yaml), or start a new run with another out="
            )
        ckpt.copy_into(self.model, snap.model_state, "model")
        if self.vit is not None:
            if snap.vit_state is None:
                raise ckpt.CheckpointError(f"{folder} has no ViT weights but this run trains a ViT")
            ckpt.copy_into(self.vit, snap.vit_state, "vit")
        if self.ema is not None:
            if snap.ema_state is None:
                raise ckpt.CheckpointError(f"{folder} has no EMA weights but this run keeps an EMA")
            self.ema.load_state_dict(snap.ema_state, snap.trainer_state.get("ema_updates", 0))
        ckpt.load_optimizer(self.optimizer, self.param_names, snap)
        ckpt.restore_rng(snap, self.generator)
        self.step = snap.step
        self.epoch = int(snap.trainer_state["epoch"])
        self.batch_in_epoch = int(snap.trainer_state["batch_in_epoch"])
        self.train_seconds = float(snap.trainer_state.get("train_seconds", 0.0))

    def _maybe_resume(self) -> None:
        mode = self.cfg.checkpoint.resume
        latest = ckpt.latest_checkpoint(self.ckpt_root)
        if mode == "auto":
            if latest is not None:
                self.resume(latest)
        elif mode == "never":
            if latest is not None:
                raise ValueError(
                    f"{self.ckpt_root} already holds checkpoints and checkpoint.resume=never; "
                    "choose another `out` or checkpoint.resume=auto"
                )
        else:
            self.resume(mode)

    def export(self, folder: str | Path | None = None) -> Path:
        """The trained model as a `load_model` folder (EMA weights for the Generator)."""
        folder = Path(folder or self.out / "model")
        snap = self.snapshot()
        if self.dist.is_main:
            ckpt.export_model(folder, snap)
        barrier(self.dist)
        return folder

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        with open(self.out / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def _trim_metrics(self) -> None:
        """After a resume, drop records a crashed run wrote past the checkpoint's step."""
        path = self.out / "metrics.jsonl"
        if not path.exists():
            return
        keep = [
            ln
            for ln in path.read_text().splitlines()
            if ln.strip() and json.loads(ln).get("step", 0) <= self.step
        ]
        path.write_text("".join(ln + "\n" for ln in keep))


def state_changes(saved, now, path: str = "") -> list[tuple[str, object, object]]:
    """(dotted path, saved value, current value) of every leaf that differs. A key the saved state
    lacks was added by a newer cosmos3-robot (its default then held), so it is not a change."""
    if isinstance(saved, dict) and isinstance(now, dict):
        out = []
        for key in sorted(set(saved) | set(now), key=str):
            if key not in saved:
                continue
            out += state_changes(saved[key], now.get(key), f"{path}.{key}" if path else str(key))
        return out
    return [] if saved == now else [(path, saved, now)]
