"""Typed configs for the Mixture-of-Transformers model, and named presets.

One dataclass per tower (Reasoner `ar`, Generator `dm`), one for the shared attention layout and
one for the whole model. Every config validates itself in `__post_init__` with an error that says
which field to change.

Presets: `tiny` (unit tests, < 2 M parameters), `sim-small` (trains on 2 CPU cores in minutes),
`nano` (Qwen3-VL-8B text dims per tower, ~16 B in total) and `super` (Qwen3-VL-32B per tower,
~64 B in total). The real presets are only ever built on the meta device here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any


def require_positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be a positive int, got {value!r}")


@dataclass
class TowerConfig:
    """Weights that each tower owns: its residual width, norms, projections and MLP."""

    hidden_size: int = 64
    intermediate_size: int = 128
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"  # gated SiLU MLP, as Qwen3 (and Cosmos 3 on Qwen3) uses
    attention_bias: bool = False
    qk_norm: bool = True  # RMSNorm over head_dim on queries and keys (Qwen3)

    def __post_init__(self) -> None:
        require_positive(self, "hidden_size", "intermediate_size")
        if self.hidden_act != "silu":
            raise ValueError(f"TowerConfig.hidden_act={self.hidden_act!r} is not supported; use 'silu'")
        if not self.rms_norm_eps > 0:
            raise ValueError(f"TowerConfig.rms_norm_eps must be > 0, got {self.rms_norm_eps}")


@dataclass
class AttentionConfig:
    """The layout both towers share, so that the Generator can read the Reasoner's keys."""

    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int | None = 16  # None: hidden_size // num_heads (which must then divide evenly)
    rope_theta: float = 5_000_000.0
    # (t, h, w) frequency pairs; None = scale Cosmos 3's [24, 20, 20] (of 64 pairs) to head_dim.
    rope_sections: tuple[int, int, int] | None = None
    # Cosmos 3 Edge: an RMSNorm on Reasoner keys as the Generator reads them (only meaningful
    # when the Reasoner has no QK-norm of its own).
    ar_key_norm_for_dm: bool = False

    def __post_init__(self) -> None:
        require_positive(self, "num_layers", "num_heads", "num_kv_heads")
        if self.head_dim is None:
            return  # resolved by ModelConfig from the tower width
        require_positive(self, "head_dim")
        if self.head_dim % 2:
            raise ValueError(f"AttentionConfig.head_dim must be even for RoPE, got {self.head_dim}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"AttentionConfig.num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention"
            )
        if self.rope_sections is None:
            pairs = self.head_dim // 2
            hw = (pairs * 20) // 64
            self.rope_sections = (pairs - 2 * hw, hw, hw)
        self.rope_sections = tuple(int(s) for s in self.rope_sections)
        if len(self.rope_sections) != 3 or sum(self.rope_sections) != self.head_dim // 2:
            raise ValueError(
                f"AttentionConfig.rope_sections {self.rope_sections} must be three ints summing to "
                f"head_dim // 2 = {self.head_dim // 2}"
            )
        t, h, w = self.rope_sections
        pairs = self.head_dim // 2
        # Interleaved mRoPE puts h on pairs 1, 4, ..., 3h-2 and w on pairs 2, 5, ..., 3w-1: they must exist.
        if min(self.rope_sections) < 0 or (h and 3 * h - 2 >= pairs) or (w and 3 * w - 1 >= pairs):
            raise ValueError(
                f"AttentionConfig.rope_sections {self.rope_sections}: interleaved mRoPE needs 3h-2 and 3w-1 "
                f"below head_dim // 2 = {pairs}"
            )


@dataclass
class ModelConfig:
    """The whole model: two towers, the shared attention layout, and the latent interfaces."""

    reasoner: TowerConfig = field(default_factory=TowerConfig)
    generator: TowerConfig | None = field(default_factory=TowerConfig)  # None: Reasoner-only model
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    vocab_size: int = 512
    tie_word_embeddings: bool = False

    # Video latents from the frozen VAE, merged 2x2 in space by the input projection.
    latent_channels: int = 48
    patch_size: int = 2
    # Audio latents (25 tokens/s) and action latents (one token per action sample).
    audio_dim: int | None = None
    action_dim: int | None = None
    num_embodiments: int = 1
    # Proprioceptive state (`observation.state`): clean conditioning tokens on the time axis, one per
    # observed state sample, with their own per-embodiment projection (docs/design.md, "State").
    state_dim: int | None = None

    # Time axis: position units per second of real time. Default: one unit per latent frame of
    # 24 fps video compressed 4x in time, i.e. 6 units/s (Cosmos 3's base_fps / temporal factor).
    time_units_per_second: float = 6.0
    # Generator positions start this many units after the end of the Reasoner segment.
    modality_margin: float = 15000.0
    # Noise level fed to the timestep embedding is sigma * sigma_scale (Cosmos 3: the pipeline's
    # timesteps are sigma*1000 and the transformer multiplies by timestep_scale=0.001).
    sigma_scale: float = 1.0
    # Trained with a null (empty-prompt) condition, so classifier-free guidance is meaningful.
    null_condition: bool = False
    timestep_embed_dim: int = 256

    def __post_init__(self) -> None:
        for name, cls in (
            ("reasoner", TowerConfig),
            ("generator", TowerConfig),
            ("attention", AttentionConfig),
        ):
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, cls(**value))
        if self.attention.head_dim is None:
            width, heads = self.reasoner.hidden_size, self.attention.num_heads
            if width % heads:
                raise ValueError(
                    f"attention.num_heads ({heads}) does not divide reasoner.hidden_size ({width}); "
                    "change num_heads or set attention.head_dim explicitly"
                )
            self.attention = dataclasses.replace(self.attention, head_dim=width // heads)
        require_positive(
            self, "vocab_size", "latent_channels", "patch_size", "num_embodiments", "timestep_embed_dim"
        )
        for name in ("audio_dim", "action_dim", "state_dim"):
            value = getattr(self, name)
            if value is not None:
                require_positive(self, name)
        if self.timestep_embed_dim % 2:
            raise ValueError(f"ModelConfig.timestep_embed_dim must be even, got {self.timestep_embed_dim}")
        if not self.time_units_per_second > 0:
            raise ValueError(
                f"ModelConfig.time_units_per_second must be > 0, got {self.time_units_per_second}"
            )
        if self.modality_margin < 0:
            raise ValueError(f"ModelConfig.modality_margin must be >= 0, got {self.modality_margin}")
        if self.attention.ar_key_norm_for_dm and self.reasoner.qk_norm:
            raise ValueError(
                "attention.ar_key_norm_for_dm is only used when reasoner.qk_norm is False (Cosmos 3 Edge); "
                "set one of them to False"
            )

    @property
    def has_generator(self) -> bool:
        return self.generator is not None

    @property
    def patch_dim(self) -> int:
        """Width of one merged video token: patch_size**2 * latent_channels."""
        return self.patch_size**2 * self.latent_channels

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        data = dict(data)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ModelConfig: unknown keys {unknown}; known keys are {sorted(known)}")
        for name, sub in (
            ("reasoner", TowerConfig),
            ("generator", TowerConfig),
            ("attention", AttentionConfig),
        ):
            if isinstance(data.get(name), dict):
                sub_known = {f.name for f in dataclasses.fields(sub)}
                bad = sorted(set(data[name]) - sub_known)
                if bad:
                    raise ValueError(
                        f"ModelConfig.{name}: unknown keys {bad}; known keys are {sorted(sub_known)}"
                    )
                if name == "attention" and data[name].get("rope_sections") is not None:
                    data[name] = {**data[name], "rope_sections": tuple(data[name]["rope_sections"])}
                data[name] = sub(**data[name])
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def _qwen3_tower(hidden: int, ffn: int) -> TowerConfig:
    return TowerConfig(hidden_size=hidden, intermediate_size=ffn, rms_norm_eps=1e-6)


def _preset_tiny() -> ModelConfig:
    tower = TowerConfig(hidden_size=64, intermediate_size=128)
    return ModelConfig(
        reasoner=tower,
        generator=dataclasses.replace(tower),
        attention=AttentionConfig(num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16),
        vocab_size=300,
        latent_channels=8,
        audio_dim=8,
        action_dim=6,
        num_embodiments=2,
        timestep_embed_dim=32,
    )


def _preset_sim_small() -> ModelConfig:
    tower = TowerConfig(hidden_size=256, intermediate_size=768)
    return ModelConfig(
        reasoner=tower,
        generator=dataclasses.replace(tower),
        attention=AttentionConfig(num_layers=6, num_heads=4, num_kv_heads=2, head_dim=64),
        vocab_size=300,
        latent_channels=16,
        audio_dim=32,
        action_dim=8,
        num_embodiments=4,
        timestep_embed_dim=256,
    )


def _qwen3vl_preset(hidden: int, ffn: int, layers: int, heads: int) -> ModelConfig:
    """Both towers with a Qwen3-VL text config (8 kv heads of 128, rope theta 5e6, vocab 151936)."""
    return ModelConfig(
        reasoner=_qwen3_tower(hidden, ffn),
        generator=_qwen3_tower(hidden, ffn),
        attention=AttentionConfig(
            num_layers=layers, num_heads=heads, num_kv_heads=8, head_dim=128, rope_theta=5_000_000.0
        ),
        vocab_size=151936,
        tie_word_embeddings=False,
        latent_channels=48,
        audio_dim=64,
        action_dim=32,
        num_embodiments=32,
        null_condition=True,
    )


def _preset_nano() -> ModelConfig:
    # Qwen3-VL-8B text config: hidden 4096, 36 layers, 32 q / 8 kv heads of 128, FFN 12288.
    return _qwen3vl_preset(4096, 12288, 36, 32)


def _preset_super() -> ModelConfig:
    # Qwen3-VL-32B text config: hidden 5120, 64 layers, 64 q / 8 kv heads of 128, FFN 25600.
    return _qwen3vl_preset(5120, 25600, 64, 64)


PRESETS = {
    "tiny": _preset_tiny,
    "sim-small": _preset_sim_small,
    "nano": _preset_nano,
    "super": _preset_super,
}


def preset(name: str) -> ModelConfig:
    """A fresh copy of a named preset."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]()
