"""Build our model from a Hugging Face Qwen3-VL checkpoint folder (config.json + safetensors).

    HF Qwen3-VL                               ours
    model.language_model.embed_tokens    ─►   MoT.embed_tokens
    model.language_model.layers.i.*      ─►   MoT.layers.i.ar.*   and a copy in MoT.layers.i.dm.*
    model.language_model.norm            ─►   MoT.norm            and a copy in MoT.norm_dm
    lm_head (absent when tied)           ─►   MoT.lm_head
    model.visual.*                       ─►   ViT.*  (patch_embed's Conv3d kernel flattened to a Linear)

The Reasoner then reproduces the VLM's logits; the Generator starts as the same VLM (for clean
tokens it *is* the VLM). Generator-only modules have no VLM counterpart: latent in/out projections
get their usual random init, modality embeddings start at zero, and the timestep embedding's last
layer starts at zero, so that noisy tokens initially get no noise-level offset either.

The config mapping is explicit: every field of the HF config is mapped, checked, or known to be
irrelevant at inference (e.g. `initializer_range`); anything else raises, as do MoE variants,
quantised checkpoints, rope types other than interleaved mRoPE and non-square patches.
Weights stream tensor by tensor (`safe_open`) into a model built on the meta device.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import nn

from cosmos3_robot.encoders.vit import ViT, ViTConfig
from cosmos3_robot.files import check_safetensors, read_json
from cosmos3_robot.interop.checkpoint import (
    STORED_DTYPES,
    meta_parameters,
    resolve_dtype,
    retie,
    set_tensor,
)
from cosmos3_robot.model.config import AttentionConfig, ModelConfig, TowerConfig, preset
from cosmos3_robot.model.layers import EmbodimentLinear
from cosmos3_robot.model.mot import MoT
from cosmos3_robot.processors.tokenizers import VisionTokenIds

ARCHITECTURE = "Qwen3VLForConditionalGeneration"
TEXT_PREFIX, VISION_PREFIX, HEAD = "model.language_model.", "model.visual.", "lm_head.weight"
# Tokenizer / processor files passed through to our checkpoint when present.
PASS_THROUGH = (
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
    "added_tokens.json", "chat_template.json", "chat_template.jinja", "preprocessor_config.json",
    "video_preprocessor_config.json", "processor_config.json", "generation_config.json",
)  # fmt: skip

# Fields that only matter for training, caching or bookkeeping in transformers.
_GENERIC = {
    "_name_or_path", "architectures", "dtype", "torch_dtype", "transformers_version", "model_type",
    "initializer_range", "use_cache", "output_attentions", "output_hidden_states", "return_dict",
    "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings", "attention_dropout",
    "id2label", "label2id", "problem_type", "tokenizer_class", "chunk_size_feed_forward",
    "is_encoder_decoder", "tie_encoder_decoder",
}  # fmt: skip
_TEXT_FIELDS = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_act", "rms_norm_eps", "attention_bias", "rope_parameters",
    "rope_scaling", "rope_theta", "tie_word_embeddings", "use_sliding_window", "sliding_window",
    "max_window_layers", "layer_types",
}  # fmt: skip
_VISION_FIELDS = {
    "depth", "hidden_size", "hidden_act", "intermediate_size", "num_heads", "in_channels", "patch_size",
    "spatial_merge_size", "temporal_patch_size", "out_hidden_size", "num_position_embeddings",
    "deepstack_visual_indexes", "rope_parameters",
}  # fmt: skip
_TOP_FIELDS = {
    "text_config", "vision_config", "image_token_id", "video_token_id", "vision_start_token_id",
    "vision_end_token_id", "tie_word_embeddings",
}  # fmt: skip


def _reject_unknown(where: str, cfg: dict[str, Any], known: set[str]) -> None:
    moe = sorted(k for k in cfg if "expert" in k or "moe" in k or k == "decoder_sparse_step")
    if moe:
        raise ValueError(
            f"{where}: mixture-of-experts fields {moe}: Qwen3-VL MoE variants (e.g. 30B-A3B) are not supported"
        )
    unknown = sorted(set(cfg) - known - _GENERIC)
    if unknown:
        raise ValueError(f"{where}: unsupported config fields {unknown}")


def _rope(text: dict[str, Any]) -> tuple[float, tuple[int, int, int]]:
    """(rope_theta, mrope_section) from either `rope_parameters` (transformers >= 5) or the older
    `rope_scaling` + `rope_theta` (the published Qwen3-VL configs)."""
    params = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
    theta = params.pop("rope_theta", text.get("rope_theta"))
    kind = params.pop("rope_type", params.pop("type", "default"))
    if kind not in ("default", "mrope"):
        raise ValueError(
            f"text_config: rope type {kind!r} is not supported (only Qwen3-VL's interleaved mRoPE)"
        )
    if not params.pop("mrope_interleaved", False):
        raise ValueError(
            "text_config: mrope_interleaved must be true; contiguous mRoPE sections (Qwen2/2.5-VL) are not supported"
        )
    section = params.pop("mrope_section", None)
    if params:
        raise ValueError(f"text_config: unsupported rope fields {sorted(params)}")
    if theta is None or section is None or len(section) != 3:
        raise ValueError("text_config: need rope_theta and a 3-entry mrope_section")
    return float(theta), tuple(int(s) for s in section)


def model_config_from_hf(
    hf: dict[str, Any], *, with_generator: bool = True, template: ModelConfig | None = None
) -> ModelConfig:
    """HF Qwen3-VL config (as read from config.json) -> our ModelConfig. Language dims come from the
    HF config; Generator-only fields (latent channels, audio/action widths, time axis, ...) from
    `template` (default: the `nano` preset)."""
    check_architecture(hf)
    _reject_unknown("config", hf, _TOP_FIELDS)
    text = dict(hf.get("text_config") or {})
    _reject_unknown("text_config", text, _TEXT_FIELDS)
    if text.get("use_sliding_window") or (
        text.get("layer_types") and set(text["layer_types"]) != {"full_attention"}
    ):
        raise ValueError("text_config: sliding-window attention is not supported")
    if text.get("hidden_act", "silu") != "silu":
        raise ValueError(f"text_config: hidden_act {text['hidden_act']!r} is not supported (only silu)")
    tie = bool(hf.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))
    if "tie_word_embeddings" in text and bool(text["tie_word_embeddings"]) != tie:
        raise ValueError("config: tie_word_embeddings differs between the top level and text_config")
    theta, section = _rope(text)
    heads = int(text["num_attention_heads"])
    tower = TowerConfig(
        hidden_size=int(text["hidden_size"]),
        intermediate_size=int(text["intermediate_size"]),
        rms_norm_eps=float(text.get("rms_norm_eps", 1e-6)),
        attention_bias=bool(text.get("attention_bias", False)),
        qk_norm=True,
    )
    attention = AttentionConfig(
        num_layers=int(text["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(text.get("num_key_value_heads") or heads),
        head_dim=int(text.get("head_dim") or tower.hidden_size // heads),
        rope_theta=theta,
        rope_sections=section,
    )
    base = template if template is not None else preset("nano")
    return dataclasses.replace(
        base,
        reasoner=tower,
        generator=dataclasses.replace(tower) if with_generator else None,
        attention=attention,
        vocab_size=int(text["vocab_size"]),
        tie_word_embeddings=tie,
    )


def vit_config_from_hf(hf: dict[str, Any]) -> ViTConfig:
    vision = dict(hf.get("vision_config") or {})
    _reject_unknown("vision_config", vision, _VISION_FIELDS)
    rope = dict(vision.get("rope_parameters") or {"rope_type": "axial"})
    if rope.pop("rope_type", "axial") != "axial" or set(rope) - {"rope_theta"}:
        raise ValueError(f"vision_config: unsupported rope_parameters {vision['rope_parameters']}")

    def square(name: str) -> int:
        v = vision.get(name)
        if isinstance(v, list | tuple):
            if len(set(v)) != 1:
                raise ValueError(f"vision_config.{name}={v}: only equal sizes are supported")
            v = v[0]
        return int(v)

    cfg = ViTConfig(
        depth=int(vision["depth"]),
        hidden_size=int(vision["hidden_size"]),
        intermediate_size=int(vision["intermediate_size"]),
        num_heads=int(vision["num_heads"]),
        in_channels=int(vision.get("in_channels", 3)),
        patch_size=square("patch_size"),
        temporal_patch_size=square("temporal_patch_size"),
        spatial_merge_size=int(vision.get("spatial_merge_size", 2)),
        out_hidden_size=int(vision["out_hidden_size"]),
        num_position_embeddings=int(vision["num_position_embeddings"]),
        deepstack_indexes=tuple(vision.get("deepstack_visual_indexes", ())),
        hidden_act=vision.get("hidden_act", "gelu_pytorch_tanh"),
        rope_theta=float(rope.get("rope_theta", 10000.0)),
    )
    text = hf.get("text_config") or {}
    if cfg.out_hidden_size != text.get("hidden_size"):
        raise ValueError(
            f"vision_config.out_hidden_size ({cfg.out_hidden_size}) must equal text_config.hidden_size "
            f"({text.get('hidden_size')})"
        )
    if len(cfg.deepstack_indexes) > int(text.get("num_hidden_layers", 0)):
        raise ValueError("vision_config: more DeepStack levels than language layers")
    return cfg


def token_ids_from_hf(hf: dict[str, Any]) -> VisionTokenIds:
    d = VisionTokenIds()
    return VisionTokenIds(**{f.name: int(hf.get(f.name, getattr(d, f.name))) for f in dataclasses.fields(d)})


def check_architecture(hf: dict[str, Any]) -> None:
    kind, archs = hf.get("model_type"), hf.get("architectures") or []
    if kind == "qwen3_vl_moe" or any("Moe" in a for a in archs):
        raise ValueError(
            f"Qwen3-VL MoE checkpoints ({kind}, {archs}) are not supported; use a dense Qwen3-VL"
        )
    if kind != "qwen3_vl" or (archs and ARCHITECTURE not in archs):
        raise ValueError(
            f"not a Qwen3-VL checkpoint: model_type={kind!r}, architectures={archs}; expected model_type "
            f"'qwen3_vl' and {ARCHITECTURE}"
        )
    if "quantization_config" in hf:
        raise ValueError(
            "quantised checkpoints (quantization_config) are not supported; use bf16/fp32 weights"
        )


# ------------------------------------------------------------------------------------------------
# Weights
# ------------------------------------------------------------------------------------------------


def read_hf_config(folder: str | Path) -> dict[str, Any]:
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder")
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} has no config.json")
    return read_json(path, "Qwen3-VL config")


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> safetensors file, from the shard index or from the files themselves."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json(index, "shard index")["weight_map"]
        absent = sorted({f for f in weight_map.values() if not (folder / f).is_file()})
        if absent:
            raise FileNotFoundError(f"{index} names shard files that are missing: {absent}")
        for f in sorted(set(weight_map.values())):
            check_safetensors(folder / f)
        return {k: folder / f for k, f in weight_map.items()}
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} has no *.safetensors weights (pytorch .bin files are not read)")
    where: dict[str, Path] = {}
    for path in files:
        check_safetensors(path)
        with safe_open(str(path), framework="pt") as f:
            for k in f.keys():
                if k in where:
                    raise ValueError(f"tensor {k} is stored in both {where[k].name} and {path.name}")
                where[k] = path
    return where


def _hf_layout(model: MoT, vit: ViT) -> dict[str, tuple[list[tuple[str, str]], tuple[int, ...]]]:
    """HF tensor name -> ([(target, our name), ...], expected HF shape). target: 'mot' or 'vit'."""
    layout: dict[str, tuple[list[tuple[str, str]], tuple[int, ...]]] = {}
    has_dm = model.config.generator is not None
    for name, p in model.named_parameters():
        if name.startswith("layers.") and ".ar." in name:
            i, rest = name.split(".ar.")
            targets = [("mot", name)] + ([("mot", f"{i}.dm.{rest}")] if has_dm else [])
            layout[TEXT_PREFIX + name.replace(".ar.", ".")] = (targets, tuple(p.shape))
        elif name in ("embed_tokens.weight", "norm.weight"):
            targets = [("mot", name)] + (
                [("mot", "norm_dm.weight")] if has_dm and name == "norm.weight" else []
            )
            layout[TEXT_PREFIX + name] = (targets, tuple(p.shape))
        elif name == "lm_head.weight":
            layout[HEAD] = ([("mot", name)], tuple(p.shape))
    vc = vit.config
    for name, p in vit.named_parameters():
        shape = tuple(p.shape)
        if name == "patch_embed.proj.weight":
            shape = (vc.hidden_size, vc.in_channels, vc.temporal_patch_size, vc.patch_size, vc.patch_size)
        layout[VISION_PREFIX + name] = ([("vit", name)], shape)
    return layout


def _init_generator_only(model: MoT) -> None:
    """Initialise the parameters no VLM tensor maps to (still on the meta device)."""
    for module_name, module in list(model.named_modules()):
        direct = [n for n, p in module.named_parameters(recurse=False) if p.is_meta]
        if not direct:
            continue
        if isinstance(module, nn.Linear):
            fresh = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None)
        elif isinstance(module, EmbodimentLinear):
            fresh = EmbodimentLinear(module.in_dim, module.out_dim, module.num_embodiments)
        elif module is model and all(n.endswith("_embed") for n in direct):
            fresh = None  # modality embeddings start at zero
        else:
            raise RuntimeError(f"no initialisation rule for {module_name or 'MoT'} parameters {direct}")
        for n in direct:
            value = torch.zeros(getattr(module, n).shape) if fresh is None else getattr(fresh, n).detach()
            set_tensor(model, f"{module_name}.{n}" if module_name else n, value)
    if model.config.generator is not None:
        # Noisy tokens start with no noise-level offset: the Generator starts as the VLM.
        nn.init.zeros_(model.time_embed.linear_2.weight)
        nn.init.zeros_(model.time_embed.linear_2.bias)


def _checked_dtype(
    folder: Path, where: dict[str, Path], layout: dict, expected: set[str], dtype: torch.dtype | None
) -> torch.dtype:
    """Check shapes and dtypes from the safetensors headers before reading any data; returns the
    dtype to load in (the stored one, which must then be uniform, when `dtype` is None)."""
    shapes, dtypes = {}, {}
    for path in sorted(set(where.values())):
        with safe_open(str(path), framework="pt") as f:
            for k in f.keys():
                s = f.get_slice(k)
                shapes[k], dtypes[k] = tuple(s.get_shape()), s.get_dtype()
    bad_shape = [
        f"{k}: {shapes[k]} != {layout[k][1]}"
        for k in sorted(expected & set(where))
        if shapes[k] != layout[k][1]
    ]
    if bad_shape:
        raise ValueError(f"{folder}: shape mismatches (stored != expected): {bad_shape}")
    stored = {STORED_DTYPES[v] for v in dtypes.values() if v in STORED_DTYPES}
    not_float = sorted(k for k, v in dtypes.items() if v not in STORED_DTYPES)
    if not_float:
        raise ValueError(
            f"{folder}: tensors {not_float} are not floating point (quantised?); dtype {dtype} cannot be honoured"
        )
    if dtype is None:
        if len(stored) != 1:
            groups: dict[str, list[str]] = {}
            for k, v in sorted(dtypes.items()):
                groups.setdefault(v, []).append(k)
            common = max(groups, key=lambda v: len(groups[v]))
            odd = {v: names[:10] + ([f"... {len(names) - 10} more"] if len(names) > 10 else [])
                   for v, names in groups.items() if v != common}  # fmt: skip
            raise ValueError(
                f"{folder}: mixed stored dtypes (most tensors {common}; others {odd}); pass dtype= explicitly"
            )
        dtype = stored.pop()
    return dtype


def load_qwen3vl(
    folder: str | Path,
    dtype: torch.dtype | str | None = None,
    with_generator: bool = True,
    *,
    template: ModelConfig | None = None,
) -> tuple[MoT, ViT, dict[str, Any]]:
    """A HF Qwen3-VL folder -> (MoT in eval mode, ViT in eval mode, meta).

    dtype: None keeps the stored dtype (which must then be uniform). with_generator=False builds a
    Reasoner-only model. template: source of the Generator-only config fields (default `nano`).
    meta: {"source", "folder", "token_ids", "hf_config", "generation_config", "extra_files"}.
    """
    folder = Path(folder)
    hf = read_hf_config(folder)
    config = model_config_from_hf(hf, with_generator=with_generator, template=template)
    vcfg = vit_config_from_hf(hf)
    where = weight_files(folder)
    dtype = resolve_dtype(dtype)

    with torch.device("meta"):
        model = MoT(config)
        vit = ViT(vcfg)
    layout = _hf_layout(model, vit)
    expected = set(layout)
    optional = {HEAD} if config.tie_word_embeddings else set()  # a tied head may be stored or not
    missing = sorted(expected - set(where) - optional)
    extra = sorted(set(where) - expected - optional)
    if missing or extra:
        raise ValueError(
            f"{folder}: tensors do not match a Qwen3-VL of this config; missing {missing}; unexpected {extra}"
        )

    dtype = _checked_dtype(folder, where, layout, expected, dtype)

    targets = {"mot": model, "vit": vit}
    for path in sorted(set(where.values())):
        with safe_open(str(path), framework="pt") as f:
            for k in f.keys():
                if k not in layout or (k == HEAD and config.tie_word_embeddings):
                    continue
                t = f.get_tensor(k).to(dtype)
                if k == VISION_PREFIX + "patch_embed.proj.weight":
                    t = t.reshape(t.shape[0], -1)  # Conv3d kernel (C, 3, T, P, P) -> Linear (C, 3·T·P·P)
                for j, (target, name) in enumerate(layout[k][0]):
                    set_tensor(targets[target], name, t if j == 0 else t.clone())
    retie(model)
    _init_generator_only(model)
    model.to(dtype)
    left = meta_parameters(model) + meta_parameters(vit)
    if left:
        raise RuntimeError(f"parameters left uninitialised: {left}")

    gen_cfg = folder / "generation_config.json"
    meta = {
        "source": "qwen3_vl",
        "folder": str(folder.resolve()),
        "token_ids": dataclasses.asdict(token_ids_from_hf(hf)),
        "hf_config": hf,
        "generation_config": json.loads(gen_cfg.read_text()) if gen_cfg.is_file() else None,
        "extra_files": [str(folder / n) for n in PASS_THROUGH if (folder / n).is_file()],
    }
    return model.eval(), vit.eval(), meta
