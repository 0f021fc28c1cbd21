"""The settings of one `train-vae` run (`training/vae.py`), validated before any work starts."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from cosmos3_robot.encoders.vae import VAE_PRESETS, vae_config
from cosmos3_robot.infra.cpu_pack import training_dtype
from cosmos3_robot.processors.geometry import check_spatial_size


@dataclass
class VAETrainConfig:
    """One `train-vae` run. Defaults from the run that reached 31.7 dB held-out at 128x128 (48 latent
    channels, 2610 steps, 25 min on 2 cores); L1 + KL 1e-4 + lr 1e-3 plateaued near 25 dB."""

    out: str  # output folder (checkpoint + vae/); resumed if present
    repo_id: str | None = None  # LeRobot dataset repo id (default: local/<root name>)
    root: str | list[str] | None = None  # local dataset folder(s) (offline); several: one VAE for a suite
    video_key: str = "observation.image"
    preset: str = "sim-small"
    latent_channels: int | None = None  # override the preset's latent channels
    base_dim: int | None = None  # override the preset's encoder width
    size: int | None = None  # resize frames to size x size (multiple of 32)
    steps: int = 2000
    batch_frames: int = 8  # frames per step (clips: batch_frames // 5 clips)
    video_fraction: float = 0.3  # share of steps that train on 5-frame clips
    lr: float = 2e-3
    warmup: int = 100
    loss: str = "mse"  # "mse" or "l1"
    kl_weight: float = 1e-6
    edge_weight: float = 0.5
    foreground_weight: float = 0.0  # extra reconstruction weight on pixels unlike the frame's background
    dtype: str = "auto"  # autocast dtype for training: bf16, fp32, or auto (cpu_pack.training_dtype)
    holdout_episodes: int = 2
    max_episodes: int | None = None  # use only the first N episodes
    eval_every: int = 250
    save_every: int = 500
    max_minutes: float | None = None  # stop (and save) after this wall time
    seed: int = 0

    def __post_init__(self) -> None:
        if self.root is None and self.repo_id is None:
            raise ValueError(
                "train-vae needs a dataset: give --root DIR (a LeRobot dataset folder) or --repo-id"
            )
        positive = ("steps", "batch_frames", "warmup", "eval_every", "save_every", "holdout_episodes")
        for name in positive:
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        for name in ("latent_channels", "base_dim", "max_episodes"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ValueError(f"{name} must be a positive integer or unset, got {v!r}")
        for name in ("lr", "kl_weight", "edge_weight", "foreground_weight", "video_fraction"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not 0 <= self.video_fraction <= 1:
            raise ValueError(f"video_fraction is a share of steps, in [0, 1]; got {self.video_fraction}")
        if self.lr <= 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.max_minutes is not None and not (math.isfinite(self.max_minutes) and self.max_minutes > 0):
            raise ValueError(f"max_minutes must be a positive number of minutes, got {self.max_minutes}")
        if self.preset not in VAE_PRESETS:
            raise ValueError(f"preset {self.preset!r} is not one of {list(VAE_PRESETS)}")
        if self.loss not in ("mse", "l1"):
            raise ValueError(f"loss must be mse or l1, got {self.loss!r}")
        training_dtype(self.dtype)  # refuses another name
        if self.size is not None:
            check_spatial_size(self.size, self.size)

    def vae_config(self):
        overrides: dict[str, Any] = {}
        if self.latent_channels:
            overrides["latent_channels"] = self.latent_channels
        if self.base_dim:
            overrides["base_dim"] = overrides["decoder_base_dim"] = self.base_dim
        return vae_config(self.preset, **overrides)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]
