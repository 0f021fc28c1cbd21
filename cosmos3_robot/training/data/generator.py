"""Generator-stage data: LeRobot clips (and action-free mp4 clips) -> ClipBatches, through the
frozen VAE or the latent cache. The configuration is in `training/data/config.py`, the helpers both stages share in
`training/data/common.py`; `training/data/__init__.py` describes the whole pipeline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.datasets import (
    ClipDataset,
    ClipSpec,
    VideoFolderConfig,
    VideoFolderDataset,
    open_lerobot_dataset,
)
from cosmos3_robot.datasets.episodes import iter_lerobot_episodes
from cosmos3_robot.encoders.vae import QUALITY_FILE, VideoVAE, load_vae
from cosmos3_robot.eval.metrics import COLLAPSED_SPREAD, IGNORED_LATER_LATENTS
from cosmos3_robot.files import read_json
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.processors.actions import ActionTransform, EmbodimentRegistry
from cosmos3_robot.processors.data_state import DataState, VAEReference
from cosmos3_robot.processors.frames import resize_frames, to_uint8
from cosmos3_robot.processors.geometry import (
    TEMPORAL_FACTOR,
    ClipGeometry,
    check_spatial_size,
    latent_frame_times,
    num_latent_frames,
)
from cosmos3_robot.processors.normalize import Normalizer, joined_stats, key_parts
from cosmos3_robot.processors.tokenizers import load_tokenizer
from cosmos3_robot.tasks.base import ClipBatch
from cosmos3_robot.training.data.common import (
    check_vocab,
    chunks,
    clip_dataset,
    dataset_meta,
    plan_loader,
    require_feature,
    split_dataset,
    square_image_size,
    val_indices,
)
from cosmos3_robot.training.data.config import DataConfig
from cosmos3_robot.training.data.latent_cache import (
    CachedEncoder,
    LatentCache,
    vae_fingerprint,
)
from cosmos3_robot.training.data.shown_frames import ShownFrames, check_shown_frames

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "cosmos3_robot" / "latents"


def _anchor_frames(ds: ClipDataset) -> np.ndarray:
    """Frame index (within its episode) of each clip's anchor."""
    return ds.row_frame[ds.anchors]


# ------------------------------------------------------------------------------------------------
# Generator stage
# ------------------------------------------------------------------------------------------------


def frozen_vae(cfg: DataConfig, model_cfg: ModelConfig) -> VideoVAE:
    """The VAE the generator stage trains on; refuses none given, and a collapsed or ignoring one."""
    if cfg.vae is None and cfg.vae_preset is None:
        raise ValueError(
            "the generator stage needs a frozen video VAE: +data.options.vae=FOLDER (the vae/ folder that "
            "`cosmos3-robot train-vae` writes), or +data.options.vae_preset=tiny for a seeded random VAE "
            "(smoke tests only: a random VAE shows the model nothing)"
        )
    if cfg.vae is not None and cfg.vae_preset is not None:
        raise ValueError("give +data.options.vae or +data.options.vae_preset, not both")
    vae = load_vae(cfg.vae, model_cfg.latent_channels, preset=cfg.vae_preset or "tiny", seed=cfg.seed)
    quality = Path(cfg.vae) / QUALITY_FILE if cfg.vae is not None else None
    if quality is not None and quality.exists() and not cfg.allow_weak_vae:
        q = read_json(quality, "VAE quality report")
        spread, use = q.get("latent_spread"), q.get("later_latent_use")
        if (spread is not None and spread < COLLAPSED_SPREAD) or (
            use is not None and use < IGNORED_LATER_LATENTS
        ):
            raise ValueError(
                f"VAE {cfg.vae} is not worth freezing: its held-out latent spread is {spread} (collapsed below "
                f"{COLLAPSED_SPREAD}) / later-latent use {use} (ignored below {IGNORED_LATER_LATENTS}); train it "
                "longer with `cosmos3-robot train-vae`, or pass +data.options.allow_weak_vae=true to use it anyway"
            )
    return vae


class GeneratorData:
    """ClipBatches from a LeRobot dataset (+ action-free mp4 clips). See the module docstring."""

    def __init__(self, cfg: DataConfig, model_cfg: ModelConfig, vit=None) -> None:
        if not model_cfg.has_generator:
            raise ValueError("make_generator_data needs a model with a Generator (ModelConfig.generator)")
        check_shown_frames(cfg, vit)
        self.cfg, self.model_cfg = cfg, model_cfg
        self.tokenizer = load_tokenizer(cfg.tokenizer)
        check_vocab(self.tokenizer, model_cfg)
        meta, self.name = dataset_meta(cfg)
        require_feature(meta, self.name, cfg.image_key, "generator training", "set DataConfig.image_key")
        if cfg.num_actions > 0:
            require_feature(
                meta, self.name, cfg.action_key, "generator training",
                "set DataConfig.action_key, or use the folder as action-free video",
            )  # fmt: skip
        self.fps = float(meta.fps)
        self.robot_type = meta.robot_type  # the env id, for datasets written by `record`
        # The instructions, for a warning at inference about any other; unknown with action-free videos.
        known = cfg.action_free_folder is None and meta.tasks is not None
        self.tasks = sorted(str(t) for t in meta.tasks.index) if known else None
        recorded_size = square_image_size(meta, self.name, cfg.image_key)  # refuses non-square frames
        self.image_size = cfg.image_size or recorded_size
        try:
            check_spatial_size(self.image_size, self.image_size)
        except ValueError as e:
            raise ValueError(
                f"dataset {self.name}, key {cfg.image_key!r}: {e} (or set DataConfig.image_size)"
            ) from None
        self.shown = (
            ShownFrames(cfg, self.tokenizer, vit.config, self.image_size) if cfg.reasoner_frame else None
        )
        self.spec = cfg.clip_spec()
        self.frame_step, self.action_step = self.spec.steps(self.fps, self.name)
        self.split = split_dataset(cfg, meta, self.name)
        # One ClipDataset over every episode; the split picks clip indices (clips never cross episodes).
        self.ds = clip_dataset(cfg, self.spec, None)
        episode = self.ds.row_episode[self.ds.anchors]
        on_grid = _anchor_frames(self.ds) % cfg.clip_stride == 0
        self.train_idx = np.flatnonzero(on_grid & np.isin(episode, self.split.train))
        self.val_idx = np.flatnonzero(on_grid & np.isin(episode, self.split.val))
        if len(self.train_idx) == 0:
            raise ValueError(
                f"dataset {self.name}: the training episodes {self.split.train} hold no clip of "
                f"{cfg.num_frames} frames / {cfg.num_actions} actions; use pad=True or shorter clips"
            )

        self.embodiments = EmbodimentRegistry()
        self.action_transform = self._action_transform(meta) if cfg.num_actions > 0 else None
        self.state_transform = self._state_transform(meta) if model_cfg.state_dim is not None else None
        self.free_ds, self.free_idx = self._action_free_clips()

        self.vae = frozen_vae(cfg, model_cfg)
        self.vae_fingerprint = vae_fingerprint(self.vae)  # frozen here: hashed once, not per state()
        self.cache: LatentCache | None = None
        self.cache_dir: Path | None = None
        if cfg.latent_cache:
            self.cache = self._open_cache()
        self.encoder = CachedEncoder(self.vae, self.cache)
        # With a cache, clips are read from the table alone; only the clips it lacks decode video.
        self.robot_clips = self.ds.without_video() if self.cache is not None else self.ds
        self._val: list[ClipBatch] | None = None

    def _action_transform(self, meta) -> ActionTransform:
        """This dataset's action statistics, padded to the model's action width."""
        cfg, model_cfg = self.cfg, self.model_cfg
        width = cfg.action_width or model_cfg.action_dim
        if width is None:
            raise ValueError("the model has no action input (ModelConfig.action_dim=None); set num_actions=0")
        if model_cfg.action_dim is not None and width != model_cfg.action_dim:
            raise ValueError(
                f"DataConfig.action_width={width} differs from the model's action_dim={model_cfg.action_dim}"
            )
        normalizer = self._normalizer(meta, cfg.action_key, cfg.action_norm)
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
        return ActionTransform(
            name=emb_name,
            embodiment_id=emb_id,
            width=width,
            normalizer=normalizer,
            key=cfg.action_key,
        )

    def _normalizer(self, meta, key: str, mode: str) -> Normalizer:
        """The dataset's own statistics for `key` (LeRobot's meta/stats.json; a joined key's parts side by side)."""
        missing = [part for part in key_parts(key) if not meta.stats or part not in meta.stats]
        if missing:
            raise ValueError(f"dataset {self.name}: no statistics for key(s) {missing} in meta/stats.json")
        return Normalizer.from_lerobot_stats(joined_stats(meta.stats, key), {key: mode})

    def _state_transform(self, meta) -> ActionTransform:
        """This dataset's statistics (mean/std) of `state_key` (`observation.state`, or a joined key such
        as `observation.state+observation.environment_state`), padded to the model's state width."""
        cfg, width = self.cfg, self.model_cfg.state_dim
        key = cfg.state_key
        if self.action_transform is None:
            raise ValueError(
                "a state-conditioned model (model.state_dim set) conditions robot clips with actions; "
                "set num_actions > 0, or train without state (model.state_dim=null)"
            )
        parts = key_parts(key)
        for part in parts:
            require_feature(
                meta, self.name, part, "a state-conditioned model (model.state_dim set)",
                "record the dataset with its proprioceptive state, or train without state (model.state_dim=null)",
            )  # fmt: skip
        dim = sum(int(np.prod(meta.features[part]["shape"])) for part in parts)
        if dim > width:
            raise ValueError(
                f"dataset {self.name}: {key!r} has {dim} dims but the model's state width is "
                f"model.state_dim={width}; set model.state_dim={dim} (or more)"
            )
        return ActionTransform(
            name=self.action_transform.name,
            embodiment_id=self.embodiment_id,
            width=width,
            normalizer=self._normalizer(meta, key, "mean_std"),
            key=key,
        )

    def _action_free_clips(self) -> tuple[VideoFolderDataset | None, np.ndarray]:
        """Action-free clips at the same video rate (so latents share the time axis)."""
        cfg = self.cfg
        if cfg.action_free_folder is None:
            return None, np.zeros(0, dtype=np.int64)
        free_ds = VideoFolderDataset(
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
        on_grid = [n for n, (_, i) in enumerate(free_ds.anchors) if i % cfg.clip_stride == 0]
        return free_ds, np.array(on_grid, dtype=np.int64)

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
            "pad": cfg.pad,
            "vae": self.vae_fingerprint,
        }
        key = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
        self.cache_dir = base / key
        if (self.cache_dir / "meta.json").is_file():
            return LatentCache(self.cache_dir, vae=self.vae)
        lerobot = open_lerobot_dataset(cfg.repo_id, cfg.root)
        episodes = sorted(self.split.train + self.split.val)
        f = self.frame_step

        def source():
            for ep, frames, times in iter_lerobot_episodes(lerobot, cfg.image_key, episodes, self.image_size):
                for r in phases:
                    clip_frames, clip_times = frames[r::f], times[r::f]
                    if cfg.pad:  # clips past the end repeat the episode's last frame, as LeRobot's clamp does
                        tail = cfg.num_frames - 1
                        clip_frames = torch.cat([clip_frames, frames[-1:].expand(tail, *frames.shape[1:])])
                        clip_times = torch.cat([clip_times, times[-1:].expand(tail)])
                    yield ep * f + r, clip_frames, clip_times

        return LatentCache.build(self.cache_dir, self.vae, source(), cfg.num_frames, stride, info=what)

    # -- batches -----------------------------------------------------------------------------
    def _plan(self, epoch: int) -> list[tuple[str, list[int]]]:
        rng = np.random.default_rng([self.cfg.seed, epoch])
        plan = [("robot", b) for b in chunks(rng.permutation(self.train_idx), self.cfg.batch_size)]
        plan += [("free", b) for b in chunks(rng.permutation(self.free_idx), self.cfg.batch_size)]
        return [plan[i] for i in rng.permutation(len(plan))]

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[ClipBatch]:
        plan = self._plan(epoch)[start:]  # skipped batches are never loaded
        loaders = {
            "robot": plan_loader(
                self.robot_clips, [b for k, b in plan if k == "robot"], self.cfg.num_workers
            ),
            "free": plan_loader(self.free_ds, [b for k, b in plan if k == "free"], self.cfg.num_workers),
        }
        for kind, _ in plan:
            samples = next(loaders[kind])
            yield self.robot_batch(samples) if kind == "robot" else self.free_batch(samples)

    def val_batches(self) -> list[ClipBatch]:
        if self._val is None:
            self._val = []
            for b in val_indices(len(self.val_idx), self.cfg.batch_size, self.cfg.max_val_batches):
                self._val.append(self.robot_batch([self.robot_clips[int(self.val_idx[i])] for i in b]))
        return self._val

    def _video(self, samples: list[dict[str, Any]], keys: list[tuple[int, int]] | None) -> dict[str, Tensor]:
        def frames(video: Tensor) -> Tensor:
            return resize_frames(to_uint8(video), self.image_size)

        def load(i: int) -> Tensor:  # a clip read without video that the cache lacks (a padded clip)
            return frames(self.ds[samples[i]["clip_index"]]["video"])

        clips = [frames(s["video"]) if "video" in s else None for s in samples]
        with torch.no_grad():
            latents = self.encoder.encode(clips, keys, load)  # (B, C, T_lat, h, w)
        time = torch.stack(
            [latent_frame_times(s["video_time"].double()) for s in samples]
        ).float()  # (B, T_lat)
        # Latent k >= 1 summarises frames 4k-3 .. 4k: valid only if all of them are real frames.
        valid = torch.stack([s["video_valid"] for s in samples])  # (B, T)
        groups = [valid[:, :1]] + [
            valid[:, 4 * k - 3 : 4 * k + 1].all(dim=1, keepdim=True) for k in range(1, latents.shape[2])
        ]
        return {"video": latents, "video_time": time, "video_valid": torch.cat(groups, dim=1)}

    def _prompt(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        """ClipBatch prompt fields: the instructions, after each clip's first frame when it is shown."""
        if self.shown is not None:
            ids, lengths, images = self.shown.prompts(samples)
            return {"input_ids": ids, "lengths": lengths, "images": images}
        ids, lengths = self.tokenizer.batch_encode([s["task"] for s in samples])
        return {"input_ids": ids, "lengths": lengths}

    def robot_batch(self, samples: list[dict[str, Any]]) -> ClipBatch:
        """Samples of the LeRobot ClipDataset -> ClipBatch."""
        keys = [self._cache_key(s["episode_index"], s["frame_index"]) for s in samples]
        out: dict[str, Any] = self._prompt(samples) | self._video(samples, keys)
        if self.action_transform is not None:
            action, mask = self.action_transform.encode(torch.stack([s["action"] for s in samples]))
            out.update(
                action=action,  # (B, Na, W)
                action_time=torch.stack([s["action_time"] for s in samples]),
                action_valid=torch.stack([s["action_valid"] for s in samples]),
                action_mask=mask.expand(len(samples), -1).clone(),
                embodiment=torch.full((len(samples),), self.embodiment_id, dtype=torch.long),
            )
        if self.state_transform is not None:
            out.update(self._observed_state(samples))
        return ClipBatch(obs_frames=self.cfg.obs_frames, **out)

    def _observed_state(self, samples: list[dict[str, Any]]) -> dict[str, Tensor]:
        """The state at every observed video frame (those of the `obs_frames` clean latent frames)."""
        if self.cfg.obs_frames == 0:  # nothing observed: no state either
            return {}
        n = min(TEMPORAL_FACTOR * (self.cfg.obs_frames - 1) + 1, samples[0]["state"].shape[0])
        raw = torch.stack([s["state"][:n] for s in samples])  # (B, n, S)
        state, mask = self.state_transform.encode(raw)
        return {
            "state": state,
            "state_time": torch.stack([s["video_time"][:n] for s in samples]).float(),
            "state_mask": mask.expand(len(samples), -1).clone(),
        }

    def free_batch(self, samples: list[dict[str, Any]]) -> ClipBatch:
        """Samples of the action-free video folder -> ClipBatch with action=None."""
        return ClipBatch(
            obs_frames=self.cfg.obs_frames, **self._prompt(samples), **self._video(samples, None)
        )

    def state(self) -> DataState:
        cfg = self.cfg
        return DataState(
            stage="generator",
            tokenizer=self.tokenizer.state(),
            geometry=ClipGeometry(
                fps=self.fps,
                num_frames=cfg.num_frames,
                frame_step=self.frame_step,
                num_actions=cfg.num_actions,
                action_step=self.action_step,
                obs_frames=cfg.obs_frames,
                image_size=self.image_size,
            ),
            action_transform=self.action_transform.state_dict() if self.action_transform else None,
            state_transform=self.state_transform.state_dict() if self.state_transform else None,
            vae=VAEReference(
                path=None if cfg.vae is None else str(Path(cfg.vae).resolve()),  # usable from anywhere
                preset=None if cfg.vae else cfg.vae_preset,
                seed=cfg.seed,
                fingerprint=self.vae_fingerprint,
            ),
            details={
                "data_config": asdict(cfg),
                "dataset": {
                    "name": self.name,
                    "fps": self.fps,
                    "image_size": self.image_size,
                    "robot_type": self.robot_type,
                    "tasks": self.tasks,
                },  # fmt: skip
                "clip_spec": asdict(self.spec),
                "latent_frames": num_latent_frames(cfg.num_frames),
                "temporal_factor": TEMPORAL_FACTOR,
                "split": {"train": self.split.train, "val": self.split.val, "seed": self.split.seed},
                "embodiments": self.embodiments.state_dict(),
                "normalizer": self.ds.normalizer.state_dict() if self.ds.normalizer else None,
                "latent_cache": str(self.cache_dir) if self.cache_dir else None,
                "action_free_folder": cfg.action_free_folder,
                "reasoner_frame": self.shown.state() if self.shown is not None else None,
            },
        )
