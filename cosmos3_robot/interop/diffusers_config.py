"""Diffusers Cosmos 3 config.json <-> our ModelConfig, plus what the config says beyond the weights.

Every field of `Cosmos3OmniTransformer`'s config is either mapped (onto `ModelConfig` or onto
`DiffusersCompat`, which the position builders in `diffusers_positions` read), knowingly ignored
(no effect on outputs), or refused with an error naming the field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from cosmos3_robot.model.config import AttentionConfig, ModelConfig, TowerConfig

DIFFUSERS_CLASS = "Cosmos3OmniTransformer"

# Fixed by the Diffusers architecture rather than by its config.
TIME_PROJ_DIM = 256  # Timesteps(num_channels=256)
VAE_TEMPORAL_COMPRESSION = 4  # the pipeline's vae_scale_factor_temporal (Wan2.2)


@dataclass
class DiffusersCompat:
    """What a Diffusers Cosmos 3 config says beyond the weights: how positions and timesteps are formed.

    `sigma_scale` of the ModelConfig is `num_train_timesteps * timestep_scale`: the pipeline hands the
    transformer the scheduler's timestep σ·num_train_timesteps (UniPC, flow sigmas), which the
    transformer multiplies by `timestep_scale` before the sinusoidal embedding.
    """

    base_fps: float = 24.0
    enable_fps_modulation: bool = True
    reset_spatial_ids: bool = True
    modality_margin: int = 15000
    sound_latent_fps: float = 25.0
    timestep_scale: float = 0.001
    num_train_timesteps: int = 1000
    temporal_compression: int = VAE_TEMPORAL_COMPRESSION
    ignored: dict[str, Any] = field(default_factory=dict)  # fields read but with no effect on outputs

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DiffusersCompat:
        return cls(**data)


# ----------------------------------------------------------------------------------------------
# Config mapping
# ----------------------------------------------------------------------------------------------

# Diffusers config fields -> how we treat them. Anything else (without a leading "_") is refused.
_MODEL_FIELDS = {
    "attention_bias", "head_dim", "hidden_size", "intermediate_size", "latent_channel", "latent_patch_size",
    "num_attention_heads", "num_hidden_layers", "num_key_value_heads", "patch_latent_dim", "rms_norm_eps",
    "rope_scaling", "rope_theta", "action_dim", "action_gen", "num_embodiment_domains", "sound_dim",
    "sound_gen", "timestep_scale", "vocab_size", "hidden_act", "qk_norm_for_text", "use_und_k_norm_for_gen",
    "rope_axes_dim", "unified_3d_mrope_temporal_modality_margin", "base_fps",
}  # fmt: skip
_COMPAT_FIELDS = {"enable_fps_modulation", "unified_3d_mrope_reset_spatial_ids", "sound_latent_fps"}
_IGNORED_FIELDS = {"attention_dropout", "dtype"}  # dropout is never applied; dtype is a load-time hint


def _effective_rope_sections(head_dim: int, axes: list[int] | tuple[int, ...]) -> tuple[int, int, int]:
    """Diffusers' interleaved mRoPE only reads the h and w sizes: pair j uses h if j % 3 == 1 and
    j < 3·h, w if j % 3 == 2 and j < 3·w, t otherwise. Return the (t, h, w) that selects the same
    pairs under our convention (sections summing to head_dim/2)."""
    pairs = head_dim // 2
    h = len(range(1, min(3 * int(axes[1]), pairs), 3))
    w = len(range(2, min(3 * int(axes[2]), pairs), 3))
    return pairs - h - w, h, w


def _check_representable(cfg: dict[str, Any]) -> None:
    """Raise naming the field unless our towers can represent this config exactly."""
    name = cfg.get("_class_name")
    if name != DIFFUSERS_CLASS:
        raise ValueError(
            f"config.json _class_name is {name!r}; expected {DIFFUSERS_CLASS!r} (a Cosmos 3 transformer)"
        )
    unknown = sorted(
        k for k in cfg if not k.startswith("_") and k not in _MODEL_FIELDS | _COMPAT_FIELDS | _IGNORED_FIELDS
    )
    if unknown:
        raise ValueError(
            f"Diffusers config fields {unknown} are not understood by this importer; refusing to guess"
        )
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ValueError(
            f"Diffusers config hidden_act={act!r}: the Nemotron backbone (relu2 MLP, Nemotron RMSNorm) is not "
            "supported; only the Qwen3 backbone (hidden_act='silu') maps onto our towers"
        )
    p, c = cfg.get("latent_patch_size", 2), cfg.get("latent_channel", 48)
    if cfg.get("patch_latent_dim", 192) != p * p * c:
        raise ValueError(
            f"Diffusers config patch_latent_dim={cfg.get('patch_latent_dim', 192)} != latent_patch_size² · "
            f"latent_channel = {p * p * c}; the 2x2 patch merge would not line up"
        )


def _rope_sections(cfg: dict[str, Any], head_dim: int) -> tuple[int, int, int]:
    """The (t, h, w) rotation pairs of the config's M-RoPE."""
    rope_scaling = cfg.get("rope_scaling", None) or {}
    rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
    if rope_type not in ("default", "mrope"):
        raise ValueError(
            f"Diffusers config rope_scaling type {rope_type!r} is not supported (only default / mrope)"
        )
    axes = cfg.get("rope_axes_dim", None) or rope_scaling.get("mrope_section", [24, 20, 20])
    sections = _effective_rope_sections(head_dim, axes)
    if 3 * max(sections[1:]) > head_dim // 2:
        raise ValueError(
            f"Diffusers config rope_axes_dim={list(axes)} selects (t, h, w) = {sections} rotation pairs of "
            f"head_dim={head_dim}; our AttentionConfig needs 3·max(h, w) <= head_dim/2 — set rope_axes_dim explicitly"
        )
    return sections


def config_from_diffusers(
    cfg: dict[str, Any], num_train_timesteps: int = 1000
) -> tuple[ModelConfig, DiffusersCompat]:
    """A Diffusers `Cosmos3OmniTransformer` config.json -> (ModelConfig, DiffusersCompat).

    Raises ValueError naming the field for anything we cannot represent exactly.
    """
    _check_representable(cfg)

    def get(key: str, default: Any) -> Any:
        return cfg.get(key, default)

    hidden, heads, head_dim = get("hidden_size", 4096), get("num_attention_heads", 32), get("head_dim", 128)
    p, c = get("latent_patch_size", 2), get("latent_channel", 48)
    sections = _rope_sections(cfg, head_dim)
    qk_text = bool(get("qk_norm_for_text", True))
    margin = get("unified_3d_mrope_temporal_modality_margin", 15000)
    base_fps = float(get("base_fps", 24))
    timestep_scale = float(get("timestep_scale", 0.001))
    tower = dict(
        hidden_size=hidden,
        intermediate_size=get("intermediate_size", 12288),
        rms_norm_eps=float(get("rms_norm_eps", 1e-6)),
        attention_bias=bool(get("attention_bias", False)),
    )
    action_gen, sound_gen = bool(get("action_gen", False)), bool(get("sound_gen", False))
    if action_gen and get("action_dim", None) is None:
        raise ValueError("Diffusers config action_gen=True needs action_dim")
    if sound_gen and get("sound_dim", None) is None:
        raise ValueError("Diffusers config sound_gen=True needs sound_dim")
    try:
        model = ModelConfig(
            reasoner=TowerConfig(**tower, qk_norm=qk_text),
            generator=TowerConfig(**tower, qk_norm=True),  # norm_added_q/k always exist
            attention=AttentionConfig(
                num_layers=get("num_hidden_layers", 36),
                num_heads=heads,
                num_kv_heads=get("num_key_value_heads", 8),
                head_dim=head_dim,
                rope_theta=float(get("rope_theta", 5_000_000.0)),
                rope_sections=sections,
                # Diffusers builds k_norm_und_for_gen only when the text tower has no QK-norm.
                ar_key_norm_for_dm=bool(get("use_und_k_norm_for_gen", False)) and not qk_text,
            ),
            vocab_size=get("vocab_size", 151936),
            tie_word_embeddings=False,
            latent_channels=c,
            patch_size=p,
            audio_dim=get("sound_dim", None) if sound_gen else None,
            action_dim=get("action_dim", None) if action_gen else None,
            num_embodiments=get("num_embodiment_domains", 32) if action_gen else 1,
            time_units_per_second=base_fps / VAE_TEMPORAL_COMPRESSION,
            modality_margin=float(margin),
            sigma_scale=num_train_timesteps * timestep_scale,
            null_condition=True,  # the pipeline runs classifier-free guidance with a negative prompt
            timestep_embed_dim=TIME_PROJ_DIM,
        )
    except ValueError as e:
        raise ValueError(f"Diffusers config cannot be represented: {e}") from e
    compat = DiffusersCompat(
        base_fps=base_fps,
        enable_fps_modulation=bool(get("enable_fps_modulation", True)),
        reset_spatial_ids=bool(get("unified_3d_mrope_reset_spatial_ids", True)),
        modality_margin=int(margin),
        sound_latent_fps=float(get("sound_latent_fps", 25.0)),
        timestep_scale=timestep_scale,
        num_train_timesteps=num_train_timesteps,
        ignored={k: cfg[k] for k in sorted(_IGNORED_FIELDS) if k in cfg},
    )
    return model, compat


def config_to_diffusers(config: ModelConfig, compat: DiffusersCompat | None = None) -> dict[str, Any]:
    """ModelConfig (+ compat) -> the Diffusers config.json dict. Raises ValueError naming what does not fit."""
    compat = compat or DiffusersCompat(
        base_fps=config.time_units_per_second * VAE_TEMPORAL_COMPRESSION,
        modality_margin=int(config.modality_margin),
        timestep_scale=config.sigma_scale / 1000,
    )
    ar, dm, a = config.reasoner, config.generator, config.attention
    if dm is None:
        raise ValueError("a Reasoner-only model (generator=None) has no Diffusers Cosmos 3 equivalent")
    for f in ("hidden_size", "intermediate_size", "rms_norm_eps", "attention_bias"):
        if getattr(ar, f) != getattr(dm, f):
            raise ValueError(
                f"Diffusers Cosmos 3 needs reasoner.{f} == generator.{f} ({getattr(ar, f)} vs {getattr(dm, f)})"
            )
    if not dm.qk_norm:
        raise ValueError(
            "Diffusers Cosmos 3 always QK-normalises the Generator: generator.qk_norm must be True"
        )
    if config.tie_word_embeddings:
        raise ValueError("Diffusers Cosmos 3 stores lm_head separately: tie_word_embeddings must be False")
    if config.timestep_embed_dim != TIME_PROJ_DIM:
        raise ValueError(
            f"Diffusers Cosmos 3 has a {TIME_PROJ_DIM}-dim time projection: timestep_embed_dim must be {TIME_PROJ_DIM} "
            f"(got {config.timestep_embed_dim}); the presets that export are sim-small, nano and super, not tiny"
        )
    if config.time_units_per_second * compat.temporal_compression != compat.base_fps:
        raise ValueError(
            f"time_units_per_second={config.time_units_per_second} != base_fps/{compat.temporal_compression} "
            f"= {compat.base_fps / compat.temporal_compression}"
        )
    if float(config.modality_margin) != compat.modality_margin:
        raise ValueError(
            f"modality_margin={config.modality_margin} must be the integer {compat.modality_margin}"
        )
    if abs(config.sigma_scale - compat.num_train_timesteps * compat.timestep_scale) > 1e-9:
        raise ValueError(
            f"sigma_scale={config.sigma_scale} != num_train_timesteps·timestep_scale "
            f"= {compat.num_train_timesteps * compat.timestep_scale}"
        )
    if config.state_dim is not None:
        raise ValueError(
            f"state_dim={config.state_dim}: Diffusers' Cosmos 3 transformer has no proprioceptive-state "
            "input, so a state-conditioned model cannot be exported; export a model trained without state"
        )
    base_fps = int(compat.base_fps) if float(compat.base_fps).is_integer() else compat.base_fps
    return {
        "_class_name": DIFFUSERS_CLASS,
        "attention_bias": ar.attention_bias,
        "attention_dropout": 0.0,
        "head_dim": a.head_dim,
        "hidden_size": ar.hidden_size,
        "intermediate_size": ar.intermediate_size,
        "base_fps": base_fps,
        "enable_fps_modulation": compat.enable_fps_modulation,
        "latent_channel": config.latent_channels,
        "unified_3d_mrope_reset_spatial_ids": compat.reset_spatial_ids,
        "unified_3d_mrope_temporal_modality_margin": compat.modality_margin,
        "latent_patch_size": config.patch_size,
        "num_attention_heads": a.num_heads,
        "num_hidden_layers": a.num_layers,
        "num_key_value_heads": a.num_kv_heads,
        "patch_latent_dim": config.patch_dim,
        "rms_norm_eps": ar.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": a.rope_theta,
        "action_dim": config.action_dim,
        "action_gen": config.action_dim is not None,
        "num_embodiment_domains": config.num_embodiments,
        "sound_dim": config.audio_dim,
        "sound_gen": config.audio_dim is not None,
        "sound_latent_fps": compat.sound_latent_fps,
        "timestep_scale": compat.timestep_scale,
        "vocab_size": config.vocab_size,
        "hidden_act": "silu",
        "qk_norm_for_text": ar.qk_norm,
        "use_und_k_norm_for_gen": a.ar_key_norm_for_dm,
        "rope_axes_dim": list(a.rope_sections),
    }
