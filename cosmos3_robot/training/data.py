"""Training data: LeRobot clips -> model-ready batches for the two training stages.

    gen = make_generator_data(DataConfig(root="data/reach", num_frames=9, num_actions=16), preset("sim-small"))
    for batch in gen.train_batches(epoch):   # ClipBatch: prompt ids, VAE latents, normalised actions
        ...
    txt = make_reasoner_data(cfg, model_cfg, vit)
    for batch in txt.train_batches(epoch):   # TextBatch: question -> answer tokens, loss on the answer
        out = model.reason(**batch.reasoner_inputs(model, vit))

Generator stage (one ClipBatch per step):

    LeRobot clip ─► frames uint8 (T,3,H,W) ─► frozen VAE (or the latent cache) ─► video (C,T_lat,h,w)
                    video_time (T,) s      ─► latent_frame_times               ─► video_time (T_lat,)
                    action (Na,A) raw      ─► ActionTransform: normalise, pad ─► action (Na,W), mask (W,)
                    task text              ─► tokenizer                        ─► input_ids, lengths
    mp4 clips (action-free) ─► the same video path, action=None

Reasoner stage (one TextBatch per step): a question about the scene at one frame, generated from
`observation.environment_state` (datasets/text.py), answered in text; with a ViT the frame itself is
shown first, as Qwen3-VL placeholders. Labels are next-token targets on the answer only.

Determinism: `train_batches(epoch, start)` depends only on (seed, epoch) — never on worker count or on
whether the latent cache is used (a cached latent is bit-identical to encoding the clip: both go
through `latent_cache._encode_clip`, one clip at a time).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset

from cosmos3_robot.datasets import (
    ClipDataset,
    ClipDatasetConfig,
    ClipSpec,
    open_lerobot_metadata,
    seed_worker,
    split_episodes,
)
from cosmos3_robot.datasets.text import QA_KINDS
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.model.vae import (
    check_spatial_size,
    num_latent_frames,
)
from cosmos3_robot.training.batches import IGNORE, DataSource, TextBatch

TEXT_STYLES = {"qa": ("relative", "distance"), "caption": ("caption",), "mixed": QA_KINDS}


# ------------------------------------------------------------------------------------------------
# Config
# ------------------------------------------------------------------------------------------------


@dataclass
class DataConfig:
    """Where the data is and how it becomes batches. Rates in Hz, times in seconds."""

    root: str | None = None  # local LeRobot dataset folder
    repo_id: str | None = None  # hub id (only read from the local cache when offline)
    image_key: str = "observation.image"
    action_key: str = "action"
    env_state_key: str = "observation.environment_state"
    # Clip geometry (ClipSpec): num_frames = 1 + 4k video frames -> 1 + k latent frames.
    num_frames: int = 9
    frame_stride: int | None = None  # dataset frames between video frames; or video_fps
    video_fps: float | None = None
    num_actions: int = 16
    action_hz: float | None = None  # None: the dataset fps
    obs_frames: int = 1  # leading latent frames observed (clean) in forward dynamics / policy
    clip_stride: int = 1  # a clip starts at every clip_stride-th frame of an episode
    pad: bool = False  # allow clips running past an episode's end (padded frames flagged invalid)
    image_size: int | None = None  # resize frames to a square (multiple of 32); None: native size
    # Actions: normalised per dimension, zero-padded to the model's action width.
    action_width: int | None = None  # None: model_cfg.action_dim
    action_norm: str = "min_max"  # or mean_std
    embodiment: int | str = 0  # id of the action projection; a name is registered as id 0
    # Loading.
    batch_size: int = 8
    num_workers: int = 0
    val_fraction: float = 0.1
    max_val_batches: int = 4
    seed: int = 0
    # Video VAE: a trained Diffusers AutoencoderKLWan folder, or None = a random frozen one of
    # `vae_preset` with the model's latent channels (tests and smoke runs only).
    vae: str | None = None
    vae_preset: str = "tiny"
    latent_cache: bool | str = False  # True: ~/.cache/cosmos3_robot/latents; a str: that folder
    action_free_folder: str | None = None  # mp4 clips mixed into generator training, action=None
    # Text.
    tokenizer: str | None = None  # None: the byte tokenizer; else a local HF tokenizer folder
    text: str = "mixed"  # reasoner samples: qa | caption | mixed
    vit_image_size: int | None = None  # frame size shown to the ViT; None: image_size or native

    def __post_init__(self) -> None:
        if self.root is None and self.repo_id is None:
            raise ValueError("DataConfig: give `root` (a local LeRobot dataset folder) or `repo_id`")
        if self.root is not None:
            self.root = str(self.root)
        try:
            num_latent_frames(self.num_frames)
        except ValueError as e:
            raise ValueError(f"DataConfig.num_frames: {e}") from None
        if self.frame_stride is not None and self.video_fps is not None:
            raise ValueError("DataConfig: set frame_stride or video_fps, not both")
        for name in ("clip_stride", "batch_size", "max_val_batches"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"DataConfig.{name} must be an int >= 1, got {v!r}")
        for name in ("num_actions", "num_workers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"DataConfig.{name} must be an int >= 0, got {v!r}")
        t_lat = num_latent_frames(self.num_frames)
        if not 0 <= self.obs_frames <= t_lat:
            raise ValueError(
                f"DataConfig.obs_frames={self.obs_frames} must lie in [0, {t_lat}] (the latent frames of a "
                f"{self.num_frames}-frame clip)"
            )
        if self.action_width is not None and self.action_width < 1:
            raise ValueError(f"DataConfig.action_width must be >= 1 or None, got {self.action_width}")
        if self.action_norm not in ("min_max", "mean_std"):
            raise ValueError(
                f"DataConfig.action_norm must be 'min_max' or 'mean_std', got {self.action_norm!r}"
            )
        if isinstance(self.embodiment, int) and self.embodiment < 0:
            raise ValueError(f"DataConfig.embodiment must be >= 0 (or a name), got {self.embodiment}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"DataConfig.val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.image_size is not None:
            try:
                check_spatial_size(self.image_size, self.image_size)
            except ValueError as e:
                raise ValueError(f"DataConfig.image_size: {e}") from None
        if self.text not in TEXT_STYLES:
            raise ValueError(f"DataConfig.text must be one of {sorted(TEXT_STYLES)}, got {self.text!r}")
        if self.vit_image_size is not None and self.vit_image_size < 1:
            raise ValueError(f"DataConfig.vit_image_size must be >= 1 or None, got {self.vit_image_size}")
        for name in ("vae", "action_free_folder", "tokenizer"):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, str(v))
        if not isinstance(self.latent_cache, bool):
            self.latent_cache = str(self.latent_cache)

    def clip_spec(self) -> ClipSpec:
        return ClipSpec(
            num_frames=self.num_frames,
            frame_stride=self.frame_stride,
            video_fps=self.video_fps,
            num_actions=self.num_actions,
            action_hz=self.action_hz,
            pad=self.pad,
        )


# ------------------------------------------------------------------------------------------------
# Shared helpers
# ------------------------------------------------------------------------------------------------


def _collate(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return samples  # batches are assembled in the main process, after the VAE


def _loader(dataset: Dataset, batches: list[list[int]], num_workers: int) -> Iterator[list[dict[str, Any]]]:
    """Samples of each planned batch, in plan order (the plan alone decides the data)."""
    if not batches:
        return iter(())
    return iter(
        DataLoader(
            dataset,
            batch_sampler=batches,
            num_workers=num_workers,
            collate_fn=_collate,
            worker_init_fn=seed_worker,
        )
    )


def _chunks(order: np.ndarray, size: int) -> list[list[int]]:
    return [order[i : i + size].tolist() for i in range(0, len(order), size)]


def _val_indices(n: int, batch_size: int, max_batches: int) -> list[list[int]]:
    """A fixed, evenly spread subset of at most max_batches * batch_size samples."""
    take = min(n, batch_size * max_batches)
    if take == 0:
        return []
    idx = np.unique(np.linspace(0, n - 1, take).round().astype(np.int64))
    return _chunks(idx, batch_size)


def _dataset_meta(cfg: DataConfig):
    meta = open_lerobot_metadata(cfg.repo_id, cfg.root)
    name = f"{meta.repo_id} ({meta.root})"
    return meta, name


def _require(meta, name: str, key: str, stage: str, hint: str) -> None:
    if key not in meta.features:
        raise ValueError(
            f"dataset {name}: {stage} needs key {key!r}, which the dataset lacks; it has "
            f"{sorted(meta.features)} ({hint})"
        )


def _split(cfg: DataConfig, meta, name: str):
    episodes = [int(e) for e in meta.episodes["episode_index"]]
    return split_episodes(episodes, cfg.val_fraction, cfg.seed, dataset=name)


def _check_vocab(tok, model_cfg: ModelConfig) -> None:
    if tok.vocab_size > model_cfg.vocab_size:
        raise ValueError(
            f"tokenizer {tok.name} has {tok.vocab_size} ids but the model's vocab_size is "
            f"{model_cfg.vocab_size}; use a model with vocab_size >= {tok.vocab_size}"
        )


def _clip_dataset(cfg: DataConfig, spec: ClipSpec, episodes: list[int] | None) -> ClipDataset:
    return ClipDataset(
        ClipDatasetConfig(
            repo_id=cfg.repo_id,
            root=cfg.root,
            spec=spec,
            episodes=episodes,
            image_key=cfg.image_key,
            action_key=cfg.action_key,
            env_state_key=cfg.env_state_key,
        )
    )


def make_generator_data(cfg: DataConfig, model_cfg: ModelConfig):
    """ClipBatches for the generator stage (see `generator_data.GeneratorData`)."""
    from cosmos3_robot.training.generator_data import GeneratorData

    return GeneratorData(cfg, model_cfg)


def make_reasoner_data(cfg: DataConfig, model_cfg: ModelConfig, vit=None):
    """TextBatches for the reasoner stage (see `reasoner_data.ReasonerData`)."""
    from cosmos3_robot.training.reasoner_data import ReasonerData

    return ReasonerData(cfg, model_cfg, vit)


__all__ = [
    "DataConfig",
    "DataSource",
    "IGNORE",
    "TextBatch",
    "make_generator_data",
    "make_reasoner_data",
]
