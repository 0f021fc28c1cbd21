"""Training checkpoints: everything needed to continue a run bit-for-bit. Never pickle.

    <out>/checkpoints/step-00001200/
      model/               a `cosmos3_robot.interop.checkpoint` folder (config.json, model.safetensors,
                           vit.safetensors): `load_model(ckpt / "model")` works on it directly
      ema.safetensors      EMA of the Generator weights (absent when EMA is off)
      optimizer.safetensors  AdamW moments/steps, keyed "<param name>::<state key>"
      rng.safetensors      torch CPU (+ CUDA) RNG states and the trainer's torch.Generator
      trainer.json         written last: step/epoch/position, the TrainConfig, the data source's
                           state (normaliser stats, split, ...), optimiser param groups, python and
                           numpy RNG states, and a manifest {file: size} that load verifies

The folder is written into a temporary sibling and renamed into place (`atomic_folder`), so a crash
while saving leaves only a `.step-*.tmp-*` folder (ignored, and cleaned up by the next save) and the
previous checkpoint untouched. After a save, all but the newest `keep_last` checkpoints are removed.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from cosmos3_robot.files import CheckpointError, atomic_folder, read_tensors, write_checkpoint
from cosmos3_robot.infra.distributed import full_tensor
from cosmos3_robot.interop.checkpoint import config_json
from cosmos3_robot.training.config import config_diff

TRAIN_FORMAT = "cosmos3-robot-train"
TRAIN_FORMAT_VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class Snapshot:
    """A training checkpoint in memory: plain (non-sharded) CPU tensors + JSON-able state."""

    step: int  # optimiser steps done
    model_config: dict[str, Any]
    model_state: dict[str, Tensor]
    train_config: dict[str, Any]
    vit_config: dict[str, Any] | None = None
    vit_state: dict[str, Tensor] | None = None
    ema_state: dict[str, Tensor] | None = None
    optim_tensors: dict[str, Tensor] = field(default_factory=dict)
    optim_meta: dict[str, Any] = field(default_factory=dict)
    rng_tensors: dict[str, Tensor] = field(default_factory=dict)
    rng_meta: dict[str, Any] = field(default_factory=dict)
    data_state: dict[str, Any] = field(default_factory=dict)
    trainer_state: dict[str, Any] = field(default_factory=dict)  # epoch, batch_in_epoch, ema_updates, ...


# ------------------------------------------------------------------------------------------------
# Collecting state from live objects (every rank calls these: gathering FSDP shards is collective)
# ------------------------------------------------------------------------------------------------


def module_state(module: nn.Module) -> dict[str, Tensor]:
    """{name: full CPU tensor} for each parameter once (a tied lm_head is stored as its embedding)
    plus buffers that are saved in state_dict."""
    out = {n: full_tensor(p.detach()).cpu().clone() for n, p in module.named_parameters()}
    persistent = set(module.state_dict(keep_vars=True))
    for n, b in module.named_buffers():
        if n in persistent:
            out[n] = full_tensor(b.detach()).cpu().clone()
    return out


def optimizer_state(
    optimizer: torch.optim.Optimizer, names: list[str]
) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """AdamW state keyed by parameter name (not index), so a mismatch is reported by name."""
    sd = optimizer.state_dict()
    if len(names) != sum(len(g["params"]) for g in sd["param_groups"]):
        raise ValueError("optimizer_state: one name per optimised parameter is needed")
    tensors, scalars = {}, {}
    for idx, st in sd["state"].items():
        name = names[idx]
        for key, value in st.items():
            if isinstance(value, Tensor):
                tensors[f"{name}::{key}"] = full_tensor(value).detach().cpu().clone()
            else:
                scalars[f"{name}::{key}"] = value
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    groups = [{**g, "params": [names[i] for i in g["params"]]} for g in groups]
    return tensors, {"param_groups": groups, "scalars": scalars}


def rng_state(generator: torch.Generator) -> tuple[dict[str, Tensor], dict[str, Any]]:
    tensors = {"torch_cpu": torch.get_rng_state(), "trainer_generator": generator.get_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    version, internal, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    meta = {
        "python": [version, list(internal), gauss],
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }
    return tensors, meta


# ------------------------------------------------------------------------------------------------
# Restoring live objects
# ------------------------------------------------------------------------------------------------


@torch.no_grad()
def copy_into(module: nn.Module, state: dict[str, Tensor], what: str) -> None:
    """Copy `state` into the module's existing parameters/buffers (keeps optimiser references)."""
    live = dict(module.named_parameters())
    persistent = set(module.state_dict(keep_vars=True))
    live.update({n: b for n, b in module.named_buffers() if n in persistent})
    missing, extra = sorted(set(live) - set(state)), sorted(set(state) - set(live))
    if missing or extra:
        raise CheckpointError(
            f"{what}: checkpoint does not match the model: missing {missing[:8]}, unexpected {extra[:8]}"
        )
    for n, p in live.items():
        t = state[n]
        if tuple(t.shape) != tuple(p.shape):
            raise CheckpointError(
                f"{what}: {n} has shape {tuple(t.shape)} in the checkpoint, {tuple(p.shape)} in the model"
            )
        p.copy_(_like(t, p))


def _like(t: Tensor, ref: Tensor) -> Tensor:
    """`t` (a full tensor) laid out like `ref` (plain or an FSDP2 DTensor shard)."""
    t = t.to(device=ref.device, dtype=ref.dtype)
    if hasattr(ref, "device_mesh"):
        from torch.distributed.tensor import distribute_tensor

        return distribute_tensor(t, ref.device_mesh, ref.placements)
    return t


def load_optimizer(optimizer: torch.optim.Optimizer, names: list[str], snap: Snapshot) -> None:
    sd = optimizer.state_dict()
    groups = snap.optim_meta.get("param_groups", [])
    saved_names = [n for g in groups for n in g["params"]]
    if saved_names != names:
        diff = sorted(set(saved_names) ^ set(names))
        raise CheckpointError(
            f"optimizer state is for other parameters (differing: {diff[:8]}); was the stage changed?"
        )
    params = [p for g in optimizer.param_groups for p in g["params"]]
    index = {n: i for i, n in enumerate(names)}
    state: dict[int, dict[str, Any]] = {}
    for key, t in snap.optim_tensors.items():
        name, _, k = key.partition("::")
        ref = params[index[name]]
        value = t if t.ndim == 0 else _like(t, ref).float()
        state.setdefault(index[name], {})[k] = value
    for key, v in snap.optim_meta.get("scalars", {}).items():
        name, _, k = key.partition("::")
        state.setdefault(index[name], {})[k] = v
    new_groups = []
    for g_live, g_saved in zip(sd["param_groups"], groups, strict=True):
        g = {k: (tuple(v) if k == "betas" else v) for k, v in g_saved.items() if k != "params"}
        new_groups.append({**g, "params": g_live["params"]})
    optimizer.load_state_dict({"state": state, "param_groups": new_groups})


def restore_rng(snap: Snapshot, generator: torch.Generator) -> None:
    torch.set_rng_state(snap.rng_tensors["torch_cpu"])
    generator.set_state(snap.rng_tensors["trainer_generator"])
    if torch.cuda.is_available():
        cuda = [snap.rng_tensors[k] for k in sorted(snap.rng_tensors) if k.startswith("torch_cuda_")]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = snap.rng_meta["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = snap.rng_meta["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def check_config(snap: Snapshot, current: dict[str, Any], folder: Path | str = "checkpoint") -> None:
    """Refuse to resume a run whose config differs in a field that changes what is computed."""
    diff = config_diff(snap.train_config, current)
    if diff:
        raise CheckpointError(
            f"{folder} was written with a different config; differing fields:\n  "
            + "\n  ".join(diff)
            + "\nUse the checkpoint's values, or start a new run (another `out`, or checkpoint.resume=never "
            "in an empty `out`)."
        )


# ------------------------------------------------------------------------------------------------
# Disk
# ------------------------------------------------------------------------------------------------


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:08d}"


def list_checkpoints(root: str | Path) -> list[Path]:
    """Complete checkpoints under `root`, oldest first (temporary folders of a crashed save are skipped)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def latest_checkpoint(root: str | Path) -> Path | None:
    ckpts = list_checkpoints(root)
    return ckpts[-1] if ckpts else None


def _model_config_json(snap: Snapshot) -> dict[str, Any]:
    return config_json(
        snap.model_config,
        snap.vit_config,
        snap.model_config.get("generator") is None,
        snap.model_state,
        {
            "step": snap.step,
            "stage": snap.train_config.get("stage"),
            "data": snap.data_state,
            "modes": (snap.train_config.get("generator") or {}).get("modes"),
        },
    )


def _model_files(snap: Snapshot, prefix: str = "") -> tuple[dict[str, dict[str, Tensor]], dict[str, Any]]:
    """The `load_model` files of a snapshot: weights, ViT weights if any, config."""
    tensors = {f"{prefix}model.safetensors": snap.model_state}
    if snap.vit_state is not None:
        tensors[f"{prefix}vit.safetensors"] = snap.vit_state
    return tensors, {f"{prefix}config.json": _model_config_json(snap)}


def export_model(folder: str | Path, snap: Snapshot) -> Path:
    """Write `snap` as a `load_model` folder, atomically, with the EMA weights (if any) in place of
    the trained ones and the data pipeline's state (normalisation stats, tokenizer, clip geometry,
    VAE) beside them, so that the weights never travel without what their inputs and outputs mean."""
    state = {**snap.model_state, **(snap.ema_state or {})}
    tensors, jsons = _model_files(dataclasses.replace(snap, model_state=state))
    jsons["data_state.json"] = json.loads(json.dumps(snap.data_state))
    with atomic_folder(folder) as tmp:
        write_checkpoint(tmp, tensors, jsons)
    return Path(folder)


def save_checkpoint(root: str | Path, snap: Snapshot, keep_last: int) -> Path:
    """Write `snap` as <root>/step-<step>/ atomically, then prune to the newest `keep_last`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(".step-*.tmp-*"):  # left by a save that crashed
        shutil.rmtree(stale, ignore_errors=True)
    folder = step_dir(root, snap.step)
    tensors, jsons = _model_files(snap, prefix="model/")
    if snap.ema_state is not None:
        tensors["ema.safetensors"] = snap.ema_state
    tensors["optimizer.safetensors"] = snap.optim_tensors
    tensors["rng.safetensors"] = snap.rng_tensors
    with atomic_folder(folder) as tmp:
        write_checkpoint(tmp, tensors, jsons)
        manifest = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        trainer_json = {
            "format": TRAIN_FORMAT,
            "format_version": TRAIN_FORMAT_VERSION,
            "step": snap.step,
            "config": snap.train_config,
            "data_state": snap.data_state,
            "trainer_state": snap.trainer_state,
            "optimizer": snap.optim_meta,
            "rng": snap.rng_meta,
            "manifest": manifest,
        }
        write_checkpoint(tmp, {}, {"trainer.json": trainer_json})
    for old in list_checkpoints(root)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def _read(path: Path) -> dict[str, Tensor]:
    return read_tensors(path, fix="resume from an earlier checkpoint")


def load_checkpoint(folder: str | Path) -> Snapshot:
    """Read and verify a checkpoint folder (sizes against the manifest, then each file)."""
    folder = Path(folder)
    meta_path = folder / "trainer.json"
    if not meta_path.is_file():
        raise CheckpointError(f"{folder} has no trainer.json: not a complete training checkpoint")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"{meta_path} is truncated or corrupt ({e}); resume from an earlier checkpoint"
        ) from e
    if meta.get("format") != TRAIN_FORMAT:
        raise CheckpointError(
            f"{meta_path} is not a {TRAIN_FORMAT} checkpoint (format={meta.get('format')!r})"
        )
    for rel, size in meta["manifest"].items():
        path = folder / rel
        actual = path.stat().st_size if path.is_file() else None
        if actual != size:
            raise CheckpointError(
                f"{path} is truncated or missing ({actual} bytes on disk, {size} written); "
                "resume from an earlier checkpoint"
            )
    try:
        model_json = json.loads((folder / "model" / "config.json").read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{folder}/model/config.json is corrupt ({e})") from e
    has = lambda rel: (folder / rel).is_file()  # noqa: E731
    return Snapshot(
        step=int(meta["step"]),
        model_config=model_json["model"],
        model_state=_read(folder / "model" / "model.safetensors"),
        train_config=meta["config"],
        vit_config=model_json.get("vit"),
        vit_state=_read(folder / "model" / "vit.safetensors") if has("model/vit.safetensors") else None,
        ema_state=_read(folder / "ema.safetensors") if has("ema.safetensors") else None,
        optim_tensors=_read(folder / "optimizer.safetensors"),
        optim_meta=meta["optimizer"],
        rng_tensors=_read(folder / "rng.safetensors"),
        rng_meta=meta["rng"],
        data_state=meta.get("data_state", {}),
        trainer_state=meta.get("trainer_state", {}),
    )
