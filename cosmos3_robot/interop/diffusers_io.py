"""Cosmos 3 checkpoints in the Diffusers layout (`Cosmos3OmniTransformer`) <-> our `MoT`.

    Diffusers folder (config.json + safetensors, sharded or not)
        │  config_from_diffusers: every field mapped to ModelConfig / DiffusersCompat, or refused
        │  tensor_mapping:        every tensor name, both ways, one explicit table
        ▼
    MoT built on the meta device, filled one tensor at a time (peak RAM ≈ one model + one tensor)
        │  export_diffusers_cosmos3: the same table backwards, written shard by shard
        ▼
    Diffusers folder that `Cosmos3OmniTransformer.from_pretrained` loads

What is not a weight — positions, sound placement, the timestep convention — lives in
`DiffusersCompat`, which `diffusers_positions` turns into Generator inputs that reproduce the
Diffusers pipeline token for token.

Layout differences handled here (ours ← Diffusers):
  layers.i.ar.*  ← layers.i.{input_layernorm, post_attention_layernorm, mlp, self_attn.to_{q,k,v,out}, norm_{q,k}}
  layers.i.dm.*  ← layers.i.{*_moe_gen, self_attn.add_{q,k,v}_proj, to_add_out, norm_added_{q,k}}
  action_in.weight (E, in, out) ← action_proj_in.fc.weight (E, in·out): DomainAwareLinear keeps the
  per-domain matrix in an nn.Embedding row.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from cosmos3_robot.files import check_safetensors, read_json
from cosmos3_robot.interop.checkpoint import set_tensor
from cosmos3_robot.interop.diffusers_config import (
    DiffusersCompat,
    config_from_diffusers,
    config_to_diffusers,
)
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.model.mot import MoT

__all__ = [
    "DiffusersCompat",
    "TensorMap",
    "config_from_diffusers",
    "config_to_diffusers",
    "export_diffusers_cosmos3",
    "load_diffusers_cosmos3",
    "tensor_mapping",
]

WEIGHTS_NAME = "diffusion_pytorch_model.safetensors"
INDEX_NAME = "diffusion_pytorch_model.safetensors.index.json"
COMPAT_META = "diffusers_compat"  # key of DiffusersCompat in our checkpoint's meta

# ----------------------------------------------------------------------------------------------
# Tensor mapping: one table, both directions
# ----------------------------------------------------------------------------------------------

# (Diffusers suffix, our suffix, condition). Conditions: "" always, "bias" attention_bias,
# "qk_text" Reasoner QK-norm, "k_for_gen" Cosmos 3 Edge key norm, "audio", "action".
_LAYER_TABLE = [
    ("input_layernorm.weight", "ar.input_layernorm.weight", ""),
    ("input_layernorm_moe_gen.weight", "dm.input_layernorm.weight", ""),
    ("post_attention_layernorm.weight", "ar.post_attention_layernorm.weight", ""),
    ("post_attention_layernorm_moe_gen.weight", "dm.post_attention_layernorm.weight", ""),
    *[(f"self_attn.{d}.{w}", f"ar.self_attn.{o}.{w}", "" if w == "weight" else "bias")
      for d, o in (("to_q", "q_proj"), ("to_k", "k_proj"), ("to_v", "v_proj"), ("to_out", "o_proj"))
      for w in ("weight", "bias")],
    *[(f"self_attn.{d}.{w}", f"dm.self_attn.{o}.{w}", "" if w == "weight" else "bias")
      for d, o in (("add_q_proj", "q_proj"), ("add_k_proj", "k_proj"), ("add_v_proj", "v_proj"), ("to_add_out", "o_proj"))
      for w in ("weight", "bias")],
    ("self_attn.norm_q.weight", "ar.self_attn.q_norm.weight", "qk_text"),
    ("self_attn.norm_k.weight", "ar.self_attn.k_norm.weight", "qk_text"),
    ("self_attn.norm_added_q.weight", "dm.self_attn.q_norm.weight", ""),
    ("self_attn.norm_added_k.weight", "dm.self_attn.k_norm.weight", ""),
    ("self_attn.k_norm_und_for_gen.weight", "ar_key_norm_for_dm.weight", "k_for_gen"),
    *[(f"{d}.{n}_proj.weight", f"{o}.mlp.{n}_proj.weight", "")
      for d, o in (("mlp", "ar"), ("mlp_moe_gen", "dm")) for n in ("gate", "up", "down")],
]  # fmt: skip

_TOP_TABLE = [
    ("embed_tokens.weight", "embed_tokens.weight", ""),
    ("norm.weight", "norm.weight", ""),
    ("norm_moe_gen.weight", "norm_dm.weight", ""),
    ("lm_head.weight", "lm_head.weight", ""),
    *[(f"{d}.{w}", f"{o}.{w}", "") for d, o in (("proj_in", "video_in"), ("proj_out", "video_out")) for w in ("weight", "bias")],
    *[(f"time_embedder.{n}.{w}", f"time_embed.{n}.{w}", "") for n in ("linear_1", "linear_2") for w in ("weight", "bias")],
    *[(f"{d}.{w}", f"{o}.{w}", "audio") for d, o in (("audio_proj_in", "audio_in"), ("audio_proj_out", "audio_out"))
      for w in ("weight", "bias")],
    ("audio_modality_embed", "audio_embed", "audio"),
    ("action_proj_in.fc.weight", "action_in.weight", "action"),  # (E, in·out) <-> (E, in, out)
    ("action_proj_in.bias.weight", "action_in.bias", "action"),
    ("action_proj_out.fc.weight", "action_out.weight", "action"),
    ("action_proj_out.bias.weight", "action_out.bias", "action"),
    ("action_modality_embed", "action_embed", "action"),
]  # fmt: skip


@dataclass(frozen=True)
class TensorMap:
    diffusers: str
    ours: str

    @property
    def flat_domain(self) -> bool:
        """DomainAwareLinear keeps each domain's (in, out) matrix flattened in an Embedding row."""
        return self.diffusers.endswith(".fc.weight")

    def to_ours(self, t: Tensor, shape: tuple[int, ...]) -> Tensor:
        return t.view(shape) if self.flat_domain else t

    def to_diffusers(self, t: Tensor) -> Tensor:
        return t.reshape(t.shape[0], -1) if self.flat_domain else t


def tensor_mapping(config: ModelConfig) -> list[TensorMap]:
    """Every tensor of a Diffusers Cosmos 3 checkpoint with this config, with our name for it."""
    if config.generator is None:
        raise ValueError("Diffusers Cosmos 3 checkpoints always hold a Generator; this config has none")
    enabled = {
        "": True,
        "bias": config.reasoner.attention_bias,
        "qk_text": config.reasoner.qk_norm,
        "k_for_gen": config.attention.ar_key_norm_for_dm,
        "audio": config.audio_dim is not None,
        "action": config.action_dim is not None,
    }
    maps = [TensorMap(d, o) for d, o, cond in _TOP_TABLE if enabled[cond]]
    for i in range(config.attention.num_layers):
        maps += [
            TensorMap(f"layers.{i}.{d}", f"layers.{i}.{o}") for d, o, cond in _LAYER_TABLE if enabled[cond]
        ]
    return maps


# ----------------------------------------------------------------------------------------------
# Import
# ----------------------------------------------------------------------------------------------


def _resolve_folder(folder: str | os.PathLike) -> Path:
    path = Path(folder)
    if (path / "model_index.json").exists() and (path / "transformer").is_dir():
        path = path / "transformer"  # a whole pipeline folder: take its transformer
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: no config.json; expected a Diffusers Cosmos3OmniTransformer folder")
    return path


def _weight_files(path: Path) -> dict[str, Path]:
    """tensor name -> safetensors file holding it."""
    index = path / INDEX_NAME
    if index.exists():
        weight_map = read_json(index, "shard index")["weight_map"]
        for file in sorted(set(weight_map.values())):
            check_safetensors(path / file)
        return {name: path / file for name, file in weight_map.items()}
    single = path / WEIGHTS_NAME
    if not single.exists():
        found = sorted(p.name for p in path.glob("*.safetensors"))
        raise FileNotFoundError(
            f"{path}: neither {INDEX_NAME} nor {WEIGHTS_NAME} (safetensors here: {found})"
        )
    from safetensors import safe_open

    check_safetensors(single)
    with safe_open(str(single), framework="pt") as f:
        return {name: single for name in f.keys()}


def _names_error(what: str, names: list[str], limit: int = 8) -> str:
    more = f" (and {len(names) - limit} more)" if len(names) > limit else ""
    return f"{what}: {', '.join(names[:limit])}{more}"


def _target_dtype(our_name: str, stored: torch.dtype, dtype: torch.dtype | None) -> torch.dtype:
    if dtype is None or not stored.is_floating_point:
        return stored
    # Diffusers keeps time_embedder in float32 whatever the model dtype (_keep_in_fp32_modules).
    return torch.float32 if our_name.startswith("time_embed.") else dtype


def load_diffusers_cosmos3(
    folder: str | os.PathLike,
    dtype: torch.dtype | None = None,
    device: str | torch.device = "cpu",
    num_train_timesteps: int = 1000,
) -> tuple[MoT, DiffusersCompat]:
    """Read a Diffusers `Cosmos3OmniTransformer` folder into our `MoT` (eval mode).

    Tensors stream one at a time from the safetensors files into a model built on the meta device,
    so peak memory is one model plus one tensor. dtype=None keeps each stored dtype; otherwise
    floating tensors are cast to `dtype`, except the time embedder, which stays float32 as in Diffusers.
    Raises ValueError naming the field or tensor on a foreign model type, an unsupported config, or
    missing / unexpected / mis-shaped tensors.
    """
    from safetensors import safe_open

    path = _resolve_folder(folder)
    config, compat = config_from_diffusers(
        read_json(path / "config.json", "Diffusers config"), num_train_timesteps
    )
    files = _weight_files(path)
    mapping = tensor_mapping(config)
    expected = {m.diffusers for m in mapping}
    missing = sorted(expected - set(files))
    if missing:
        raise ValueError(_names_error(f"{path}: tensors missing from the checkpoint", missing))
    extra = sorted(set(files) - expected)
    if extra:
        raise ValueError(
            _names_error(f"{path}: unexpected tensors for this config (wrong config.json?)", extra)
        )

    with torch.device("meta"):
        model = MoT(config)
    params = dict(model.named_parameters())
    by_file: dict[Path, list[TensorMap]] = {}
    for m in mapping:
        by_file.setdefault(files[m.diffusers], []).append(m)
    # Check every shape before reading any data: a wrong checkpoint fails in milliseconds.
    for file, maps in by_file.items():
        with safe_open(str(file), framework="pt") as f:
            for m in maps:
                got = tuple(f.get_slice(m.diffusers).get_shape())
                want = tuple(m.to_diffusers(params[m.ours]).shape)
                if got != want:
                    raise ValueError(
                        f"tensor {m.diffusers} has shape {got}; this config expects {want} (ours: {m.ours})"
                    )
    for file, maps in by_file.items():
        with safe_open(str(file), framework="pt", device=str(device)) as f:
            for m in maps:
                t = f.get_tensor(m.diffusers)
                t = t.to(_target_dtype(m.ours, t.dtype, dtype))
                set_tensor(model, m.ours, m.to_ours(t, tuple(params[m.ours].shape)))
    left = [n for n, p in model.named_parameters() if p.is_meta] + [
        n for n, b in model.named_buffers() if b.is_meta
    ]
    if left:
        raise ValueError(_names_error("model tensors the mapping never filled (importer bug)", left))
    return model.eval(), compat


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _atomic_save_safetensors(
    tensors: dict[str, Tensor], path: Path, metadata: dict[str, str] | None = None
) -> None:
    from safetensors.torch import save_file

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def export_diffusers_cosmos3(
    model: MoT,
    folder: str | os.PathLike,
    compat: DiffusersCompat | None = None,
    dtype: torch.dtype | None = None,
    max_shard_bytes: int = 5 * 1024**3,
) -> Path:
    """Write `model` as a Diffusers `Cosmos3OmniTransformer` folder (config.json + safetensors,
    sharded with an index above `max_shard_bytes`). Only one shard is materialised at a time;
    each file is written atomically, config.json last."""
    diff_cfg = config_to_diffusers(model.config, compat)
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    params = dict(model.named_parameters())
    mapping = tensor_mapping(model.config)

    def nbytes(m: TensorMap) -> int:
        p = params[m.ours]
        return p.numel() * (
            dtype.itemsize if dtype is not None and p.is_floating_point() else p.element_size()
        )

    shards: list[list[TensorMap]] = [[]]
    size = 0
    for m in mapping:
        if shards[-1] and size + nbytes(m) > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(m)
        size += nbytes(m)
    names = (
        [WEIGHTS_NAME]
        if len(shards) == 1
        else [
            f"diffusion_pytorch_model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            for i in range(len(shards))
        ]
    )
    weight_map: dict[str, str] = {}
    for shard, name in zip(shards, names, strict=True):
        tensors = {}
        for m in shard:
            t = params[m.ours].detach()
            t = t.to(_target_dtype(m.ours, t.dtype, dtype))
            tensors[m.diffusers] = m.to_diffusers(t).contiguous().cpu()
            weight_map[m.diffusers] = name
        _atomic_save_safetensors(tensors, path / name, metadata={"format": "pt"})
        del tensors
    if len(shards) > 1:
        total = sum(nbytes(m) for m in mapping)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        _atomic_write_bytes(path / INDEX_NAME, json.dumps(index, indent=2).encode())
    else:
        (path / INDEX_NAME).unlink(missing_ok=True)
    _atomic_write_bytes(path / "config.json", json.dumps(diff_cfg, indent=2, sort_keys=True).encode())
    return path
