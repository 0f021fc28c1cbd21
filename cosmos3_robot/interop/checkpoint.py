"""Our checkpoint format: safetensors weights + a JSON config, written atomically.

    folder/
      config.json        {"format": "cosmos3-robot", "model": ModelConfig, "vit": ViTConfig | null,
                          "reasoner_only": bool, "meta": {...}}
      model.safetensors  MoT weights (a tied lm_head is stored once, as embed_tokens.weight)
      vit.safetensors    ViT weights (when there is a ViT)
      ...                pass-through files (tokenizer, processor configs) copied as they are

A Reasoner-only checkpoint (`save_model(..., reasoner_only=True)`) holds no Generator weight and
loads into `MoT(replace(config, generator=None))`, which reasons on its own. A full checkpoint can
also be loaded Reasoner-only (`load_model(..., with_generator=False)`): Generator tensors are then
never read from disk.

Loading builds the model on the meta device and fills it tensor by tensor from the safetensors
files (`safe_open`, never `torch.load`), so at most one copy of the weights is ever in memory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from cosmos3_robot.encoders.vit import ViT, ViTConfig
from cosmos3_robot.files import atomic_folder, check_safetensors, read_json, write_checkpoint
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.model.mot import MoT

FORMAT = "cosmos3-robot"
FORMAT_VERSION = 1
_FLOAT_DTYPES = {torch.float32, torch.bfloat16, torch.float16, torch.float64}
# safetensors header dtype names we can load (quantised F8/I8 weights are refused).
STORED_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
_DTYPE_NAMES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
                "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}  # fmt: skip


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """None, a torch floating dtype or its name -> torch.dtype; anything else raises."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"dtype {dtype!r} cannot be honoured; choose one of {sorted(_DTYPE_NAMES)}")
        return _DTYPE_NAMES[dtype]
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(
            f"dtype {dtype} cannot be honoured: weights load as one of {sorted(map(str, _FLOAT_DTYPES))}"
        )
    return dtype


# ------------------------------------------------------------------------------------------------
# Filling a meta-device model tensor by tensor
# ------------------------------------------------------------------------------------------------


def set_tensor(model: nn.Module, name: str, value: Tensor) -> None:
    """Replace parameter `name` of `model` (possibly on the meta device) by `value`."""
    module_name, _, leaf = name.rpartition(".")
    module = model.get_submodule(module_name) if module_name else model
    old = module._parameters.get(leaf)
    if old is None:
        raise KeyError(f"{type(model).__name__} has no parameter {name!r}")
    if tuple(old.shape) != tuple(value.shape):
        raise ValueError(f"{name}: shape {tuple(value.shape)} does not match the model's {tuple(old.shape)}")
    module._parameters[leaf] = nn.Parameter(value, requires_grad=old.requires_grad)


def parameter_names(model: nn.Module) -> set[str]:
    """Names of the model's parameters, each shared parameter once (a tied lm_head is not listed)."""
    return {n for n, _ in model.named_parameters()}


def meta_parameters(model: nn.Module) -> list[str]:
    return sorted(n for n, p in model.named_parameters() if p.is_meta)


def retie(model: MoT) -> None:
    if model.config.tie_word_embeddings:
        model.lm_head.weight = model.embed_tokens.weight


def reasoner_only_config(config: ModelConfig) -> ModelConfig:
    """The config of the Reasoner alone (Edge's key norm is read only by the Generator)."""
    attention = dataclasses.replace(config.attention, ar_key_norm_for_dm=False)
    return dataclasses.replace(config, generator=None, attention=attention)


def reasoner_state_names(model: MoT) -> set[str]:
    """Parameter names that a Reasoner-only model has."""
    ids = {id(p) for p in model.reasoner_parameters()}
    return {n for n, p in model.named_parameters() if id(p) in ids}


def fill_from_safetensors(
    model: nn.Module,
    path: Path,
    names: Iterable[str],
    dtype: torch.dtype | None,
    device: str | torch.device = "cpu",
) -> None:
    """Copy tensors `names` from one safetensors file into `model` (same names)."""
    wanted = set(names)
    with safe_open(str(path), framework="pt", device="cpu") as f:
        present = set(f.keys())
        missing = sorted(wanted - present)
        if missing:
            raise ValueError(f"{path}: missing tensors {missing}")
        bad = sorted(k for k in wanted if f.get_slice(k).get_dtype() not in STORED_DTYPES)
        if bad:
            raise ValueError(f"{path}: tensors {bad} are not stored as a floating dtype (F32/BF16/F16/F64)")
        for k in sorted(wanted):
            t = f.get_tensor(k)
            set_tensor(model, k, t.to(device=device, dtype=dtype or t.dtype))


# ------------------------------------------------------------------------------------------------
# Save
# ------------------------------------------------------------------------------------------------


def save_model(
    folder: str | Path,
    model: MoT,
    vit: ViT | None = None,
    meta: dict[str, Any] | None = None,
    *,
    reasoner_only: bool = False,
    extra_files: Iterable[str | Path] = (),
) -> Path:
    """Write `model` (and `vit`) to `folder` atomically. reasoner_only: drop every Generator weight.
    extra_files (tokenizer, processor configs, ...) are copied in under their own names."""
    folder = Path(folder)
    config = reasoner_only_config(model.config) if reasoner_only else model.config
    state = model.state_dict()
    keep = reasoner_state_names(model) if reasoner_only else parameter_names(model)
    tensors = {k: v for k, v in state.items() if k in keep}
    extra = [Path(p) for p in extra_files]
    clash = sorted(p.name for p in extra if p.name in {"config.json", "model.safetensors", "vit.safetensors"})
    if clash:
        raise ValueError(f"extra files {clash} would overwrite the checkpoint's own files")
    config_data = config_json(
        config.to_dict(),
        vit.config.to_dict() if vit is not None else None,
        reasoner_only or config.generator is None,
        tensors,
        meta or {},
    )
    weights = {"model.safetensors": tensors}
    if vit is not None:
        weights["vit.safetensors"] = vit.state_dict()
    with atomic_folder(folder) as tmp:
        write_checkpoint(tmp, weights, {"config.json": config_data}, copy_files=extra)
    return folder


def config_json(
    model: dict[str, Any],
    vit: dict[str, Any] | None,
    reasoner_only: bool,
    tensors: dict[str, Tensor],
    meta: dict[str, Any],
) -> dict[str, Any]:
    """The config.json of a checkpoint folder, as `load_model` reads it (dtype from the tensors)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model,
        "vit": vit,
        "reasoner_only": reasoner_only,
        "dtype": str(next(iter(tensors.values())).dtype).removeprefix("torch."),
        "meta": meta,
    }


# ------------------------------------------------------------------------------------------------
# Load
# ------------------------------------------------------------------------------------------------


def read_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json (not a {FORMAT} checkpoint)")
    data = read_json(path, "checkpoint config")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a {FORMAT} checkpoint (format="
            f"{data.get('format') if isinstance(data, dict) else None!r}); give a folder written by save_model"
        )
    version = data.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(
            f"{path}: format_version {version!r} is newer than this cosmos3-robot reads "
            f"({FORMAT_VERSION}); upgrade cosmos3-robot"
        )
    return data


def load_model(
    folder: str | Path,
    dtype: torch.dtype | str | None = None,
    *,
    with_generator: bool = True,
    device: str | torch.device = "cpu",
) -> tuple[MoT, ViT | None, dict[str, Any]]:
    """Load a checkpoint written by `save_model` -> (model in eval mode, ViT or None, meta).

    with_generator=False loads a Reasoner-only model (Generator tensors are not read).
    dtype None keeps the stored dtype."""
    folder = Path(folder)
    data = read_config(folder)
    dtype = resolve_dtype(dtype)
    config = ModelConfig.from_dict(data["model"])
    if not with_generator:
        config = reasoner_only_config(config)
    with torch.device("meta"):
        model = MoT(config)
        vit = ViT(ViTConfig.from_dict(data["vit"])) if data.get("vit") is not None else None
    names = parameter_names(model)
    check_safetensors(folder / "model.safetensors")
    with safe_open(str(folder / "model.safetensors"), framework="pt", device="cpu") as f:
        stored = set(f.keys())
    extra = sorted(stored - names)
    if with_generator and extra:
        raise ValueError(f"{folder}/model.safetensors has tensors the model does not: {extra}")
    fill_from_safetensors(model, folder / "model.safetensors", names, dtype, device)
    retie(model)
    if vit is not None:
        fill_from_safetensors(vit, folder / "vit.safetensors", parameter_names(vit), dtype, device)
        vit.eval()
    return model.eval(), vit, data.get("meta", {})
