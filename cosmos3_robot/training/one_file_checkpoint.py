"""One-file checkpoints of the small trainers (`train-vae`, `train-estimator`): the model's weights
(`model.*`), the optimiser's moments (`optim.<param index>.<key>`), RNG states (`rng.*`) and a JSON
`meta` in the safetensors header, written to a temporary file and renamed into place."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor

from cosmos3_robot.files import CheckpointError, save_tensors


def save_one_file(
    path: Path, model: dict[str, Tensor], opt: torch.optim.Optimizer, rng: dict[str, Tensor], meta: dict
) -> None:
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in model.items()}
    for i, state in opt.state_dict()["state"].items():
        for k, v in state.items():
            tensors[f"optim.{i}.{k}"] = torch.as_tensor(v)
    tensors.update({f"rng.{k}": v for k, v in rng.items()})
    tmp = path.with_name(path.name + ".tmp")
    save_tensors(tmp, tensors, metadata={"meta": json.dumps(meta)})
    os.replace(tmp, path)


def read_one_file(path: Path) -> tuple[dict, dict[str, Tensor]]:
    """(meta, tensors); a truncated or foreign file raises CheckpointError saying what to do."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = json.loads(f.metadata()["meta"])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, KeyError, TypeError, json.JSONDecodeError) as e:
        raise CheckpointError(
            f"{path} cannot be read ({e}); it is truncated or corrupt: delete it to start over"
        ) from None
    return meta, tensors


def restore(
    tensors: dict[str, Tensor], opt: torch.optim.Optimizer
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Load the optimiser's moments into `opt`; return (model state dict, RNG states)."""
    state = opt.state_dict()
    for key, v in tensors.items():
        if key.startswith("optim."):
            _, i, name = key.split(".", 2)
            state["state"].setdefault(int(i), {})[name] = v
    opt.load_state_dict(state)
    model = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    rng = {k[len("rng.") :]: v for k, v in tensors.items() if k.startswith("rng.")}
    return model, rng
