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

Determinism: `train_batches(epoch)` depends only on (seed, epoch) — never on worker count or on
whether the latent cache is used (a cached latent is bit-identical to encoding the clip: both go
through `latent_cache._encode_clip`, one clip at a time).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from cosmos3_robot.datasets import (
    ClipDataset,
    ClipDatasetConfig,
    ClipSpec,
    VideoFolderConfig,
    VideoFolderDataset,
    open_lerobot_dataset,
    open_lerobot_metadata,
    seed_worker,
    split_episodes,
)
from cosmos3_robot.datasets.actions import ActionTransform, EmbodimentRegistry
from cosmos3_robot.datasets.normalize import Normalizer
from cosmos3_robot.datasets.text import QA_KINDS, load_tokenizer
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.model.vae import (
    TEMPORAL_FACTOR,
    VideoVAE,
    check_spatial_size,
    latent_frame_times,
    num_latent_frames,
    vae_config,
)
from cosmos3_robot.tasks.base import ClipBatch
from cosmos3_robot.training.batches import IGNORE, DataSource, TextBatch
from cosmos3_robot.training.latent_cache import (
    CachedEncoder,
    LatentCache,
    episode_frames,
    resize_frames,
    vae_fingerprint,
)

TEXT_STYLES = {"qa": ("relative", "distance"), "caption": ("caption",), "mixed": QA_KINDS}
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "cosmos3_robot" / "latents"


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

    def clip_spec(self, num_frames: int | None = None, num_actions: int | None = None) -> ClipSpec:
        return ClipSpec(
            num_frames=self.num_frames if num_frames is None else num_frames,
            frame_stride=self.frame_stride,
            video_fps=self.video_fps,
            num_actions=self.num_actions if num_actions is None else num_actions,
            action_hz=self.action_hz,
            pad=self.pad,
        )


# ------------------------------------------------------------------------------------------------
# Batches and the source interface
# ------------------------------------------------------------------------------------------------


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


def _anchor_frames(ds: ClipDataset) -> np.ndarray:
    """Frame index (within its episode) of each clip's anchor."""
    return ds._frame[ds.anchors]


def _to_uint8(video: Tensor) -> Tensor:
    """Decoded frames float [0, 1] (LeRobot decodes uint8 / 255) -> exactly those uint8 values."""
    return video if video.dtype == torch.uint8 else (video * 255).round().clamp(0, 255).to(torch.uint8)


# ------------------------------------------------------------------------------------------------
# Generator stage
# ------------------------------------------------------------------------------------------------


def load_vae(cfg: DataConfig, model_cfg: ModelConfig) -> VideoVAE:
    if cfg.vae is not None:
        vae = VideoVAE.from_pretrained(cfg.vae)
    else:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            vae = VideoVAE(vae_config(cfg.vae_preset, latent_channels=model_cfg.latent_channels))
    if vae.latent_channels != model_cfg.latent_channels:
        raise ValueError(
            f"VAE {cfg.vae} has {vae.latent_channels} latent channels but the model expects "
            f"{model_cfg.latent_channels} (ModelConfig.latent_channels); use a matching VAE or model"
        )
    return vae


class GeneratorData:
    """ClipBatches from a LeRobot dataset (+ action-free mp4 clips). See the module docstring."""

    def __init__(self, cfg: DataConfig, model_cfg: ModelConfig) -> None:
        if not model_cfg.has_generator:
            raise ValueError("make_generator_data needs a model with a Generator (ModelConfig.generator)")
        self.cfg, self.model_cfg = cfg, model_cfg
        self.tokenizer = load_tokenizer(cfg.tokenizer)
        _check_vocab(self.tokenizer, model_cfg)
        meta, self.name = _dataset_meta(cfg)
        _require(meta, self.name, cfg.image_key, "generator training", "set DataConfig.image_key")
        if cfg.num_actions > 0:
            _require(
                meta, self.name, cfg.action_key, "generator training",
                "set DataConfig.action_key, or use the folder as action-free video",
            )  # fmt: skip
        self.fps = float(meta.fps)
        self.image_size = cfg.image_size or int(meta.features[cfg.image_key]["shape"][0])
        try:
            check_spatial_size(self.image_size, self.image_size)
        except ValueError as e:
            raise ValueError(
                f"dataset {self.name}, key {cfg.image_key!r}: {e} (or set DataConfig.image_size)"
            ) from None
        self.spec = cfg.clip_spec()
        self.frame_step, self.action_step = self.spec.steps(self.fps, self.name)
        self.split = _split(cfg, meta, self.name)
        # One ClipDataset over every episode; the split picks clip indices (clips never cross episodes).
        self.ds = _clip_dataset(cfg, self.spec, None)
        episode = self.ds._episode[self.ds.anchors]
        on_grid = _anchor_frames(self.ds) % cfg.clip_stride == 0
        self.train_idx = np.flatnonzero(on_grid & np.isin(episode, self.split.train))
        self.val_idx = np.flatnonzero(on_grid & np.isin(episode, self.split.val))
        if len(self.train_idx) == 0:
            raise ValueError(
                f"dataset {self.name}: the training episodes {self.split.train} hold no clip of "
                f"{cfg.num_frames} frames / {cfg.num_actions} actions; use pad=True or shorter clips"
            )

        # Actions: this dataset's statistics, padded to the model's action width.
        self.action_transform: ActionTransform | None = None
        self.embodiments = EmbodimentRegistry()
        if cfg.num_actions > 0:
            width = cfg.action_width or model_cfg.action_dim
            if width is None:
                raise ValueError(
                    "the model has no action input (ModelConfig.action_dim=None); set num_actions=0"
                )
            if model_cfg.action_dim is not None and width != model_cfg.action_dim:
                raise ValueError(
                    f"DataConfig.action_width={width} differs from the model's action_dim={model_cfg.action_dim}"
                )
            if not meta.stats or cfg.action_key not in meta.stats:
                raise ValueError(
                    f"dataset {self.name}: no statistics for key {cfg.action_key!r} in meta/stats.json"
                )
            if isinstance(cfg.embodiment, int):
                emb_name, emb_id = meta.repo_id, cfg.embodiment
                self.embodiments.ids[emb_name] = emb_id
            else:
                emb_name, emb_id = cfg.embodiment, self.embodiments.id_for(cfg.embodiment)
            if emb_id >= model_cfg.num_embodiments:
                raise ValueError(
                    f"DataConfig.embodiment={emb_id} but the model has {model_cfg.num_embodiments} action "
                    "projections (ModelConfig.num_embodiments)"
                )
            self.embodiment_id = emb_id
            self.action_transform = ActionTransform(
                name=emb_name,
                embodiment_id=emb_id,
                width=width,
                normalizer=Normalizer.from_lerobot_stats(meta.stats, {cfg.action_key: cfg.action_norm}),
                key=cfg.action_key,
            )

        # Action-free clips at the same video rate (so latents share the time axis).
        self.free_ds: VideoFolderDataset | None = None
        self.free_idx = np.zeros(0, dtype=np.int64)
        if cfg.action_free_folder is not None:
            self.free_ds = VideoFolderDataset(
                VideoFolderConfig(
                    folder=cfg.action_free_folder,
                    spec=ClipSpec(
                        num_frames=cfg.num_frames,
                        video_fps=self.fps / self.frame_step,
                        num_actions=0,
                        pad=cfg.pad,
                    ),
                    image_size=self.image_size,
                    return_uint8=True,
                )
            )
            self.free_idx = np.array(
                [n for n, (_, i) in enumerate(self.free_ds.anchors) if i % cfg.clip_stride == 0],
                dtype=np.int64,
            )

        self.vae = load_vae(cfg, model_cfg)
        self.cache: LatentCache | None = None
        self.cache_dir: Path | None = None
        if cfg.latent_cache:
            self.cache = self._open_cache()
        self.encoder = CachedEncoder(self.vae, self.cache)
        self._val: list[ClipBatch] | None = None

    # -- latent cache ------------------------------------------------------------------------
    def _cache_layout(self) -> tuple[list[int], int]:
        """Phases and stride of the cached clips. A clip anchored at frame a of an episode uses
        frames a, a+f, a+2f, ... (f = frame_step): the frames of phase a % f, sub-sampled by f,
        starting at a // f. When clip_stride is a multiple of f only phase 0 is ever used."""
        f, s = self.frame_step, self.cfg.clip_stride
        return ([0], s // f) if s % f == 0 else (list(range(f)), 1)

    def _cache_key(self, episode: int, frame: int) -> tuple[int, int]:
        return episode * self.frame_step + frame % self.frame_step, frame // self.frame_step

    def _open_cache(self) -> LatentCache:
        cfg = self.cfg
        base = DEFAULT_CACHE_DIR if cfg.latent_cache is True else Path(cfg.latent_cache)
        phases, stride = self._cache_layout()
        what = {
            "dataset": str(Path(self.ds.lerobot.root).resolve()),
            "repo_id": self.ds.lerobot.repo_id,
            "image_key": cfg.image_key,
            "image_size": self.image_size,
            "clip_frames": cfg.num_frames,
            "frame_step": self.frame_step,
            "phases": phases,
            "stride": stride,
            "vae": vae_fingerprint(self.vae),
        }
        key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
        self.cache_dir = base / key
        if (self.cache_dir / "meta.json").is_file():
            return LatentCache(self.cache_dir, vae=self.vae)
        lerobot = open_lerobot_dataset(cfg.repo_id, cfg.root)
        episodes = sorted(self.split.train + self.split.val)
        f = self.frame_step

        def source():
            for ep in episodes:
                frames, times = episode_frames(lerobot, cfg.image_key, ep)
                frames = resize_frames(frames, self.image_size)
                for r in phases:
                    yield ep * f + r, frames[r::f], times[r::f]

        return LatentCache.build(self.cache_dir, self.vae, source(), cfg.num_frames, stride, info=what)

    # -- batches -----------------------------------------------------------------------------
    def _plan(self, epoch: int) -> list[tuple[str, list[int]]]:
        rng = np.random.default_rng([self.cfg.seed, epoch])
        plan = [("robot", b) for b in _chunks(rng.permutation(self.train_idx), self.cfg.batch_size)]
        plan += [("free", b) for b in _chunks(rng.permutation(self.free_idx), self.cfg.batch_size)]
        return [plan[i] for i in rng.permutation(len(plan))]

    def train_batches(self, epoch: int) -> Iterator[ClipBatch]:
        plan = self._plan(epoch)
        loaders = {
            "robot": _loader(self.ds, [b for k, b in plan if k == "robot"], self.cfg.num_workers),
            "free": _loader(self.free_ds, [b for k, b in plan if k == "free"], self.cfg.num_workers),
        }
        for kind, _ in plan:
            samples = next(loaders[kind])
            yield self.robot_batch(samples) if kind == "robot" else self.free_batch(samples)

    def val_batches(self) -> list[ClipBatch]:
        if self._val is None:
            self._val = []
            for b in _val_indices(len(self.val_idx), self.cfg.batch_size, self.cfg.max_val_batches):
                self._val.append(self.robot_batch([self.ds[int(self.val_idx[i])] for i in b]))
        return self._val

    def _video(self, samples: list[dict[str, Any]], keys: list[tuple[int, int]] | None) -> dict[str, Tensor]:
        frames = torch.stack([resize_frames(_to_uint8(s["video"]), self.image_size) for s in samples])
        with torch.no_grad():
            latents = self.encoder.encode(frames, keys)  # (B, C, T_lat, h, w)
        time = torch.stack(
            [latent_frame_times(s["video_time"].double()) for s in samples]
        ).float()  # (B, T_lat)
        # Latent k >= 1 summarises frames 4k-3 .. 4k: valid only if all of them are real frames.
        valid = torch.stack([s["video_valid"] for s in samples])  # (B, T)
        groups = [valid[:, :1]] + [
            valid[:, 4 * k - 3 : 4 * k + 1].all(dim=1, keepdim=True) for k in range(1, latents.shape[2])
        ]
        return {"video": latents, "video_time": time, "video_valid": torch.cat(groups, dim=1)}

    def _prompt(self, samples: list[dict[str, Any]]) -> tuple[Tensor, Tensor]:
        return self.tokenizer.batch_encode([s["task"] for s in samples])

    def robot_batch(self, samples: list[dict[str, Any]]) -> ClipBatch:
        """Samples of the LeRobot ClipDataset -> ClipBatch."""
        keys = [self._cache_key(s["episode_index"], s["frame_index"]) for s in samples]
        ids, lengths = self._prompt(samples)
        out: dict[str, Any] = self._video(samples, keys)
        if self.action_transform is not None:
            action, mask = self.action_transform.encode(torch.stack([s["action"] for s in samples]))
            out.update(
                action=action,  # (B, Na, W)
                action_time=torch.stack([s["action_time"] for s in samples]),
                action_valid=torch.stack([s["action_valid"] for s in samples]),
                action_mask=mask.expand(len(samples), -1).clone(),
                embodiment=torch.full((len(samples),), self.embodiment_id, dtype=torch.long),
            )
        return ClipBatch(input_ids=ids, lengths=lengths, obs_frames=self.cfg.obs_frames, **out)

    def free_batch(self, samples: list[dict[str, Any]]) -> ClipBatch:
        """Samples of the action-free video folder -> ClipBatch with action=None."""
        ids, lengths = self._prompt(samples)
        return ClipBatch(
            input_ids=ids, lengths=lengths, obs_frames=self.cfg.obs_frames, **self._video(samples, None)
        )

    def state(self) -> dict[str, Any]:
        return {
            "stage": "generator",
            "data_config": asdict(self.cfg),
            "dataset": {"name": self.name, "fps": self.fps, "image_size": self.image_size},
            "clip_spec": asdict(self.spec),
            "frame_step": self.frame_step,
            "action_step": self.action_step,
            "latent_frames": num_latent_frames(self.cfg.num_frames),
            "temporal_factor": TEMPORAL_FACTOR,
            "split": {"train": self.split.train, "val": self.split.val, "seed": self.split.seed},
            "tokenizer": self.tokenizer.state(),
            "action_transform": self.action_transform.state_dict() if self.action_transform else None,
            "embodiments": self.embodiments.state_dict(),
            "normalizer": self.ds.normalizer.state_dict() if self.ds.normalizer else None,
            "vae": {
                "path": self.cfg.vae,
                "preset": None if self.cfg.vae else self.cfg.vae_preset,
                "fingerprint": vae_fingerprint(self.vae),
            },  # fmt: skip
            "latent_cache": str(self.cache_dir) if self.cache_dir else None,
            "action_free_folder": self.cfg.action_free_folder,
        }


def make_generator_data(cfg: DataConfig, model_cfg: ModelConfig) -> GeneratorData:
    return GeneratorData(cfg, model_cfg)


def make_reasoner_data(cfg: DataConfig, model_cfg: ModelConfig, vit=None):
    """TextBatches for the reasoner stage (see `reasoner_data.ReasonerData`)."""
    from cosmos3_robot.training.reasoner_data import ReasonerData

    return ReasonerData(cfg, model_cfg, vit)


__all__ = [
    "DataConfig",
    "DataSource",
    "GeneratorData",
    "IGNORE",
    "TextBatch",
    "load_vae",
    "make_generator_data",
    "make_reasoner_data",
]
