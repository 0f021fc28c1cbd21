"""The frozen video VAE: Diffusers' `AutoencoderKLWan` in the Wan2.2 configuration.

Axis glossary
    B      batch
    T      video frames, T = 1 + 4k (causal: the first frame alone, then groups of 4)
    T_lat  latent frames, T_lat = 1 + (T - 1) / 4
    C      latent channels (48 for Wan2.2, fewer for the small simulation presets)
    H, W   pixels; h, w = H / 16, W / 16 latent grid

Conventions (one place, so nothing else has to guess)
    frames   (B, T, 3, H, W) float in [0, 1], RGB, channel-first per frame (LeRobot's layout)
    latents  (B, C, T_lat, h, w) float, normalised per channel: (mu - latents_mean) / latents_std,
             where mu is the posterior mean (encoding is deterministic, no sampling)

Why the Wan2.2 layout (C3 uses it, docs/design.md, "Inputs and encoders"):

    frames (B,T,3,H,W) ─► [-1,1], (B,3,T,H,W) ─► patchify 2×2 ─► (B,12,T,H/2,W/2)
        ─► encoder: 3 residual down-blocks (2× space each; the last two also 2× time, causal)
        ─► (B,2C,T_lat,H/16,W/16) = [mu | logvar] ─► normalise mu ─► latents

H and W must be multiples of 32, not only 16: the Generator merges 2×2 latent patches into one
token (4×32×32 overall), so a 16-multiple that is not a 32-multiple would leave half a patch.

The architecture switches (`is_residual`, `patch_size=2`, temporal downsampling in the last two
stages, 12 in/out channels) are fixed; only widths, depth and the latent channel count vary, so a
small VAE trained here and the real Wan2.2 weights are the same code path.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from cosmos3_robot.files import atomic_folder, check_safetensors, read_json, write_checkpoint
from cosmos3_robot.processors.geometry import (
    SPATIAL_FACTOR,
    TEMPORAL_FACTOR,
    check_spatial_size,
    num_latent_frames,
)

PATCH_SIZE = 2
QUALITY_FILE = "cosmos3_quality.json"  # `train-vae`'s last held-out evaluation, beside the weights
_TEMPORAL_DOWNSAMPLE = [False, True, True]

# Published with the Wan2.2 TI2V-5B VAE (vae/config.json of Wan-AI/Wan2.2-TI2V-5B-Diffusers).
WAN22_LATENTS_MEAN = [
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
]  # fmt: skip
WAN22_LATENTS_STD = [
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
]  # fmt: skip


@dataclass
class VideoVAEConfig:
    """Widths and latent size of a Wan2.2-architecture VAE; the layout itself is fixed.

    `latents_mean` / `latents_std` (one per latent channel) normalise the posterior mean so that
    the Generator sees roughly unit-variance latents; None means 0 / 1 (an untrained VAE).
    """

    base_dim: int = 160
    decoder_base_dim: int = 256
    latent_channels: int = 48
    dim_mult: list[int] = field(default_factory=lambda: [1, 2, 4, 4])
    num_res_blocks: int = 2
    latents_mean: list[float] | None = None
    latents_std: list[float] | None = None

    def __post_init__(self) -> None:
        for name in ("base_dim", "decoder_base_dim", "latent_channels", "num_res_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"VideoVAEConfig.{name} must be a positive int, got {value!r}")
        self.dim_mult = [int(m) for m in self.dim_mult]
        if len(self.dim_mult) != 4 or min(self.dim_mult) <= 0:
            raise ValueError(
                f"VideoVAEConfig.dim_mult must hold 4 positive multipliers (three 2x downsamples after the "
                f"2x2 patchify give the 16x spatial factor), got {self.dim_mult}"
            )
        for name in ("latents_mean", "latents_std"):
            value = getattr(self, name)
            if value is not None:
                value = [float(v) for v in value]
                setattr(self, name, value)
                if len(value) != self.latent_channels:
                    raise ValueError(
                        f"VideoVAEConfig.{name} has {len(value)} entries but latent_channels="
                        f"{self.latent_channels}; give one value per latent channel"
                    )
        if self.latents_std is not None and min(self.latents_std) <= 0:
            raise ValueError("VideoVAEConfig.latents_std must be > 0 in every channel")

    def to_diffusers(self) -> dict[str, Any]:
        """Keyword arguments of `AutoencoderKLWan` for this config (Wan2.2 layout)."""
        return dict(
            base_dim=self.base_dim,
            decoder_base_dim=self.decoder_base_dim,
            z_dim=self.latent_channels,
            dim_mult=list(self.dim_mult),
            num_res_blocks=self.num_res_blocks,
            attn_scales=[],
            temperal_downsample=list(_TEMPORAL_DOWNSAMPLE),
            dropout=0.0,
            latents_mean=list(self.latents_mean or [0.0] * self.latent_channels),
            latents_std=list(self.latents_std or [1.0] * self.latent_channels),
            is_residual=True,
            in_channels=3 * PATCH_SIZE**2,
            out_channels=3 * PATCH_SIZE**2,
            patch_size=PATCH_SIZE,
            scale_factor_temporal=TEMPORAL_FACTOR,
            scale_factor_spatial=SPATIAL_FACTOR,
        )

    @classmethod
    def from_diffusers(cls, cfg: dict[str, Any], source: str = "config") -> VideoVAEConfig:
        """Read a Diffusers `AutoencoderKLWan` config.json; raise if it is not the Wan2.2 layout."""
        fix = (
            "Point at a Wan2.2 VAE folder (e.g. the `vae/` folder of Wan-AI/Wan2.2-TI2V-5B-Diffusers) "
            "or train a small one with `cosmos3-robot train-vae`."
        )
        class_name = cfg.get("_class_name", "AutoencoderKLWan")
        if class_name != "AutoencoderKLWan":
            raise ValueError(f"{source} describes a {class_name}, not an AutoencoderKLWan. {fix}")
        expected = {
            "is_residual": True,
            "patch_size": PATCH_SIZE,
            "in_channels": 3 * PATCH_SIZE**2,
            "out_channels": 3 * PATCH_SIZE**2,
            "temperal_downsample": _TEMPORAL_DOWNSAMPLE,
            "scale_factor_temporal": TEMPORAL_FACTOR,
            "scale_factor_spatial": SPATIAL_FACTOR,
        }
        defaults = {"is_residual": False, "patch_size": None, "in_channels": 3, "out_channels": 3}
        wrong = {}
        for key, need in expected.items():
            got = cfg.get(key, defaults.get(key))
            if got != need:
                wrong[key] = (got, need)
        if cfg.get("attn_scales"):
            wrong["attn_scales"] = (cfg["attn_scales"], [])
        if wrong:
            hint = (
                " (this looks like the Wan2.1 VAE: 8x spatial, no patchify)"
                if not cfg.get("is_residual")
                else ""
            )
            desc = ", ".join(f"{k}={got!r} (needs {need!r})" for k, (got, need) in wrong.items())
            raise ValueError(
                f"{source} is an AutoencoderKLWan of a different architecture{hint}: {desc}. {fix}"
            )
        base_dim = int(cfg.get("base_dim", 96))
        return cls(
            base_dim=base_dim,
            decoder_base_dim=int(cfg.get("decoder_base_dim") or base_dim),
            latent_channels=int(cfg["z_dim"]),
            dim_mult=list(cfg.get("dim_mult", [1, 2, 4, 4])),
            num_res_blocks=int(cfg.get("num_res_blocks", 2)),
            latents_mean=cfg.get("latents_mean"),
            latents_std=cfg.get("latents_std"),
        )


def _preset(name: str) -> VideoVAEConfig:
    if name == "wan2.2":  # the real one (C3)
        return VideoVAEConfig(latents_mean=list(WAN22_LATENTS_MEAN), latents_std=list(WAN22_LATENTS_STD))
    if name == "sim-small":  # 64–128 px simulation frames, trains on 2 CPU cores in minutes
        return VideoVAEConfig(base_dim=16, decoder_base_dim=24, latent_channels=16, num_res_blocks=1)
    if name == "tiny":  # unit tests: milliseconds per call
        return VideoVAEConfig(base_dim=4, decoder_base_dim=4, latent_channels=8, num_res_blocks=1)
    raise ValueError(f"unknown VAE preset {name!r}; choose one of {VAE_PRESETS}")


VAE_PRESETS = ("tiny", "sim-small", "wan2.2")


def vae_config(name: str, **overrides: Any) -> VideoVAEConfig:
    """A named preset (`tiny`, `sim-small`, `wan2.2`), optionally with fields replaced."""
    cfg = asdict(_preset(name))
    cfg.update(overrides)
    return VideoVAEConfig(**cfg)


def check_frames(frames: Tensor) -> None:
    """Raise a ValueError naming the problem if `frames` is not (B, T, 3, H, W) float in [0, 1]."""
    if not isinstance(frames, Tensor):
        raise ValueError(f"frames must be a torch.Tensor (B, T, 3, H, W), got {type(frames).__name__}")
    if frames.ndim != 5:
        hint = " (a single clip? add the batch axis with frames[None])" if frames.ndim == 4 else ""
        raise ValueError(f"frames must be 5-D (B, T, 3, H, W), got shape {tuple(frames.shape)}{hint}")
    if frames.shape[2] != 3:
        hint = " — channel-last input? use frames.permute(0, 1, 4, 2, 3)" if frames.shape[-1] == 3 else ""
        raise ValueError(
            f"frames must have 3 RGB channels on axis 2 of (B, T, 3, H, W), got {frames.shape[2]} "
            f"(shape {tuple(frames.shape)}){hint}; drop alpha / repeat grey to RGB first"
        )
    if not frames.is_floating_point():
        raise ValueError(
            f"frames must be floating point in [0, 1], got dtype {frames.dtype}; convert uint8 images "
            f"with frames.float() / 255"
        )
    num_latent_frames(frames.shape[1])
    check_spatial_size(frames.shape[3], frames.shape[4])
    if not bool(torch.isfinite(frames).all()):
        bad = int((~torch.isfinite(frames)).sum())
        raise ValueError(
            f"frames hold {bad} NaN/inf value(s); one bad pixel would turn every latent into NaN"
        )
    lo, hi = frames.aminmax()
    if lo < -1e-3 or hi > 1 + 1e-3:
        raise ValueError(
            f"frames must lie in [0, 1], got values in [{lo.item():.3g}, {hi.item():.3g}]; rescale "
            f"(uint8 range: divide by 255; [-1, 1] range: (x + 1) / 2)"
        )


# ---------------------------------------------------------------------------------------------
# The module


class VideoVAE(nn.Module):
    """Frozen Wan2.2-architecture video VAE with per-channel latent normalisation.

    `encode(frames) -> latents` and `decode(latents) -> frames`; see the module docstring for the
    layouts. The module is frozen (no gradients, eval mode, and `.train()` keeps it in eval) unless
    `unfreeze()` is called — only `cosmos3-robot train-vae` does that.
    """

    def __init__(self, config: VideoVAEConfig, autoencoder: nn.Module | None = None) -> None:
        super().__init__()
        from diffusers import AutoencoderKLWan  # heavy import, only when a VAE is built

        self.config = config
        self.autoencoder = (
            autoencoder if autoencoder is not None else AutoencoderKLWan(**config.to_diffusers())
        )
        c = config.latent_channels
        mean = torch.tensor(config.latents_mean or [0.0] * c, dtype=torch.float32)
        std = torch.tensor(config.latents_std or [1.0] * c, dtype=torch.float32)
        # Saved in config.json (as Wan2.2 does), not in the weights file.
        self.register_buffer("latents_mean", mean, persistent=False)
        self.register_buffer("latents_std", std, persistent=False)
        self.freeze()

    # -- frozen by default ------------------------------------------------------------------
    def freeze(self) -> VideoVAE:
        self._frozen = True
        self.requires_grad_(False)
        return super().train(False)

    def unfreeze(self) -> VideoVAE:
        """Make the VAE trainable (its own training command only)."""
        self._frozen = False
        self.requires_grad_(True)
        return super().train(True)

    def train(self, mode: bool = True) -> VideoVAE:
        # A parent's model.train() must not switch a frozen VAE into training mode.
        return super().train(mode and not self._frozen)

    @property
    def latent_channels(self) -> int:
        return self.config.latent_channels

    @property
    def dtype(self) -> torch.dtype:
        return next(self.autoencoder.parameters()).dtype

    def set_latent_stats(self, mean: Tensor, std: Tensor) -> None:
        """Replace the per-channel normalisation (e.g. after training, from encoded data)."""
        self.config.latents_mean = [float(v) for v in mean]
        self.config.latents_std = [float(v) for v in std]
        self.config.__post_init__()
        self.latents_mean.copy_(torch.as_tensor(self.config.latents_mean))
        self.latents_std.copy_(torch.as_tensor(self.config.latents_std))

    # -- encode / decode --------------------------------------------------------------------
    def frames_to_input(self, frames: Tensor) -> Tensor:
        """(B, T, 3, H, W) in [0, 1] -> the autoencoder's (B, 3, T, H, W) in [-1, 1], validated."""
        check_frames(frames)
        return (frames.permute(0, 2, 1, 3, 4) * 2 - 1).to(self.dtype)

    def normalize(self, mu: Tensor) -> Tensor:
        shape = (1, -1, 1, 1, 1)
        return (mu.float() - self.latents_mean.view(shape)) / self.latents_std.view(shape)

    def denormalize(self, latents: Tensor) -> Tensor:
        shape = (1, -1, 1, 1, 1)
        return latents.float() * self.latents_std.view(shape) + self.latents_mean.view(shape)

    def encode(self, frames: Tensor) -> Tensor:
        """frames (B, T, 3, H, W) float in [0, 1] -> latents (B, C, T_lat, H/16, W/16), normalised.

        Deterministic: the posterior mean, never a sample.
        """
        x = self.frames_to_input(frames)  # (B, 3, T, H, W)
        with torch.set_grad_enabled(not self._frozen and torch.is_grad_enabled()):
            mu = self.posterior_mean(x)  # (B, C, T_lat, h, w)
        return self.normalize(mu)

    def posterior_mean(self, x: Tensor) -> Tensor:
        """The autoencoder's input (B, 3, T, H, W) in [-1, 1], validated -> its posterior mean
        (B, C, T_lat, h, w). `infra/compiled.compile_encoder` replaces it by its compiled form."""
        return self.autoencoder.encode(x).latent_dist.mode()

    def decode(self, latents: Tensor) -> Tensor:
        """latents (B, C, T_lat, h, w), normalised -> frames (B, 1 + 4(T_lat-1), 3, 16h, 16w) in [0, 1]."""
        if latents.ndim != 5 or latents.shape[1] != self.latent_channels:
            raise ValueError(
                f"latents must be (B, {self.latent_channels}, T_lat, h, w) for this VAE, got shape "
                f"{tuple(latents.shape)}"
            )
        z = self.denormalize(latents).to(self.dtype)
        with torch.set_grad_enabled(not self._frozen and torch.is_grad_enabled()):
            x = self.autoencoder.decode(z).sample  # (B, 3, T, H, W) in [-1, 1]
        return ((x.float() + 1) / 2).clamp(0, 1).permute(0, 2, 1, 3, 4)

    # -- folders ----------------------------------------------------------------------------
    def save_pretrained(self, path: str | os.PathLike, extra_json: dict[str, Any] | None = None) -> None:
        """Write a Diffusers `AutoencoderKLWan` folder (config.json + safetensors), atomically, with
        `extra_json` ({file name: data}) beside the weights in the same folder.

        The folder is written next to `path` under a temporary name and renamed into place, so a
        crash never leaves a half-written VAE behind.
        """
        self.autoencoder.register_to_config(
            latents_mean=[float(v) for v in self.latents_mean],
            latents_std=[float(v) for v in self.latents_std],
        )
        with atomic_folder(path) as tmp:
            self.autoencoder.save_pretrained(tmp, safe_serialization=True)
            write_checkpoint(tmp, {}, extra_json or {})

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, dtype: torch.dtype = torch.float32) -> VideoVAE:
        """Load a local Wan2.2-layout `AutoencoderKLWan` folder (or a pipeline folder with `vae/`).

        Raises ValueError if the folder holds another architecture; nothing is downloaded.
        """
        from diffusers import AutoencoderKLWan

        path = Path(path)
        if not (path / "config.json").is_file() and (path / "vae" / "config.json").is_file():
            path = path / "vae"
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"no VAE config.json in {path}; expected a Diffusers AutoencoderKLWan folder"
            )
        config = VideoVAEConfig.from_diffusers(
            read_json(path / "config.json", "VAE config"), source=str(path)
        )
        weights = sorted(path.glob("*.safetensors"))
        if not weights:
            raise FileNotFoundError(
                f"VAE folder {path} has a config.json but no *.safetensors weights; train one with "
                "`cosmos3-robot train-vae` or copy the weights beside the config"
            )
        for w in weights:
            check_safetensors(w)
        autoencoder = AutoencoderKLWan.from_pretrained(
            path, torch_dtype=dtype, local_files_only=True, low_cpu_mem_usage=False
        )
        return cls(config, autoencoder=autoencoder)


def load_vae(
    path: str | os.PathLike | None, latent_channels: int, preset: str = "tiny", seed: int = 0
) -> VideoVAE:
    """The one way a pipeline gets its frozen VAE: a saved folder, or (no path) the seeded random VAE
    of `preset` that tests and smoke runs use. Raises unless its latents have `latent_channels`."""
    if path is not None:
        vae = VideoVAE.from_pretrained(path)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            vae = VideoVAE(vae_config(preset, latent_channels=latent_channels))
    if vae.latent_channels != latent_channels:
        raise ValueError(
            f"VAE {path} has {vae.latent_channels} latent channels but the model expects {latent_channels}; "
            f"train with model.latent_channels={vae.latent_channels}, or train the VAE with "
            f"`train-vae --latent-channels {latent_channels}`"
        )
    return vae
