"""Clips of a LeRobot dataset on a time axis in seconds — what the model's RoPE time axis eats.

A clip starts at an anchor frame of an episode (time 0 s) and holds

    video   (T, 3, H, W)  frames at   video_time  = k * frame_step / fps    k < T
    action  (Ta, A)       samples at  action_time = j * action_step / fps   j < Ta
    state   (T, S)        at the video frames (and environment_state (T, E) when the dataset has it)

Rates are whole sub-samplings of the dataset fps (no resampling): a 30 fps dataset gives video
at 30, 15, 10, 6, 5 ... fps and actions at 30, 15, 10 ... Hz. Clips never cross an episode
boundary: samples past the episode end repeat its last frame (LeRobot's own clamping) and are
flagged False in `video_valid` / `action_valid`. Decoding and windowing are LeRobot's
(`LeRobotDataset(delta_timestamps=...)`); this class chooses the windows, validates the data and
labels everything with seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cosmos3_robot.datasets.sources import open_lerobot_dataset, open_lerobot_metadata
from cosmos3_robot.processors.normalize import Normalizer, joined_stats, key_parts


class ClipReadError(ValueError):
    """A sample could not be read; the message names dataset, key and episode."""


@dataclass
class ClipSpec:
    """What one task head needs from a clip. Rates in Hz; None = the dataset fps.

    Give either `frame_stride` (dataset frames between video frames) or `video_fps`.
    `pad=False` keeps only anchors whose whole clip lies inside the episode.
    """

    num_frames: int = 8
    frame_stride: int | None = None
    video_fps: float | None = None
    num_actions: int = 16
    action_hz: float | None = None
    pad: bool = True

    def __post_init__(self) -> None:
        if self.num_frames < 1:
            raise ValueError(f"num_frames={self.num_frames} must be >= 1")
        if self.num_actions < 0:
            raise ValueError(f"num_actions={self.num_actions} must be >= 0 (0 = no actions)")
        if self.frame_stride is not None and self.video_fps is not None:
            raise ValueError("give either frame_stride or video_fps, not both")
        if self.frame_stride is not None and self.frame_stride < 1:
            raise ValueError(f"frame_stride={self.frame_stride} must be >= 1")
        for name in ("video_fps", "action_hz"):
            v = getattr(self, name)
            if v is not None and not v > 0:
                raise ValueError(f"{name}={v} must be > 0 (or None for the dataset fps)")

    @staticmethod
    def _step(fps: float, rate: float, what: str, dataset: str) -> int:
        ratio = fps / rate
        if rate > fps + 1e-9 or abs(ratio - round(ratio)) > 1e-6:
            ok = [fps / d for d in range(1, int(fps) + 1) if abs(fps / d - round(fps / d)) < 1e-9]
            raise ValueError(
                f"dataset {dataset}: {what}={rate:g} Hz does not divide the dataset fps {fps:g}; "
                f"clips sub-sample stored frames without resampling, choose one of {[f'{r:g}' for r in ok]}"
            )
        return int(round(ratio))

    def steps(self, fps: float, dataset: str = "?") -> tuple[int, int]:
        """(frame_step, action_step) in dataset frames."""
        frame_step = self.frame_stride or (
            self._step(fps, self.video_fps, "video_fps", dataset) if self.video_fps else 1
        )
        action_step = self._step(fps, self.action_hz, "action_hz", dataset) if self.action_hz else 1
        return frame_step, action_step

    def video_time(self, fps: float) -> torch.Tensor:
        return torch.arange(self.num_frames, dtype=torch.float64).mul(self.steps(fps)[0] / fps).float()

    def action_time(self, fps: float) -> torch.Tensor:
        return torch.arange(self.num_actions, dtype=torch.float64).mul(self.steps(fps)[1] / fps).float()


@dataclass
class ClipDatasetConfig:
    """`root`: local dataset folder; `repo_id`: hub id (downloaded into root / the LeRobot cache
    only when online). `episodes`: restrict to these (e.g. one side of an EpisodeSplit)."""

    repo_id: str | None = None
    root: str | Path | None = None
    spec: ClipSpec = field(default_factory=ClipSpec)
    episodes: list[int] | None = None
    image_key: str = "observation.image"
    state_key: str = "observation.state"  # or joined: "observation.state+observation.environment_state"
    action_key: str = "action"
    env_state_key: str = "observation.environment_state"  # used when present
    normalize: bool = False  # normalise state/action with `ClipDataset.normalizer`
    norm_modes: dict[str, str] = field(default_factory=dict)  # key -> mean_std | min_max | identity
    return_uint8: bool = False
    video_backend: str | None = None  # LeRobot default: torchcodec, else pyav
    tolerance_s: float = 1e-4

    def __post_init__(self) -> None:
        if self.repo_id is None and self.root is None:
            raise ValueError("give a local dataset `root` or a hub `repo_id`")
        if not isinstance(self.spec, ClipSpec):
            raise ValueError(f"spec must be a ClipSpec, got {type(self.spec).__name__}")
        if self.episodes is not None and len(self.episodes) == 0:
            raise ValueError("episodes=[] selects nothing; pass None for all episodes")


class ClipDataset(torch.utils.data.Dataset):
    """Map-style dataset of clips. Sample keys (T = num_frames, Ta = num_actions):

    video (T, 3, H, W) float [0, 1] (uint8 if return_uint8) | video_time (T,) s | video_valid (T,) bool
    state (T, S) float32 | action (Ta, A) float32 | action_time (Ta,) s | action_valid (Ta,) bool
    environment_state (T, E) (if the dataset has it) | task str | episode_index int |
    frame_index int (anchor) | clip_start_time float s (anchor time within its episode) | fps float
    """

    def __init__(self, config: ClipDatasetConfig | None = None, **kwargs: Any) -> None:
        if config is None:
            config = ClipDatasetConfig(**kwargs)
        elif kwargs:
            raise ValueError("pass either a ClipDatasetConfig or keyword arguments, not both")
        self.config = cfg = config
        self.state_keys = key_parts(cfg.state_key)  # the dataset keys the state concatenates
        spec = cfg.spec
        meta = open_lerobot_metadata(cfg.repo_id, cfg.root)
        self.name = f"{meta.repo_id} ({meta.root})"
        self.fps = float(meta.fps)
        self.frame_step, self.action_step = spec.steps(self.fps, self.name)
        self._check_keys(meta)
        self.has_env_state = cfg.env_state_key in meta.features
        self._check_episodes(meta)
        self._check_videos(meta)

        delta = {cfg.image_key: [k * self.frame_step / self.fps for k in range(spec.num_frames)]}
        for part in self.state_keys:
            delta[part] = delta[cfg.image_key]
        if self.has_env_state:
            delta[cfg.env_state_key] = delta[cfg.image_key]
        if spec.num_actions > 0:
            delta[cfg.action_key] = [j * self.action_step / self.fps for j in range(spec.num_actions)]
        self.lerobot = open_lerobot_dataset(
            meta.repo_id,
            cfg.root,
            episodes=cfg.episodes,
            delta_timestamps=delta,
            return_uint8=cfg.return_uint8,
            video_backend=cfg.video_backend,
            tolerance_s=cfg.tolerance_s,
        )
        table = self.lerobot.hf_dataset.data
        # Per table row: its episode index and its frame index within the episode.
        self.row_episode: np.ndarray = table.column("episode_index").to_numpy()
        self.row_frame: np.ndarray = table.column("frame_index").to_numpy()
        self._check_finite(table)
        lengths = dict(zip(meta.episodes["episode_index"], meta.episodes["length"], strict=True))
        # Per table row: its episode's length.
        self.row_length = np.array([lengths[int(e)] for e in self.row_episode], dtype=np.int64)
        self.anchors = self._anchors()
        if len(self.anchors) == 0:
            raise ValueError(
                f"dataset {self.name}: no episode is long enough for a full clip of {spec.num_frames} frames "
                f"(stride {self.frame_step}) and {spec.num_actions} actions (step {self.action_step}); "
                "use pad=True or a shorter ClipSpec"
            )
        self.normalizer = (
            Normalizer.from_lerobot_stats(
                joined_stats(meta.stats, cfg.state_key),
                {cfg.state_key: "mean_std", cfg.action_key: "mean_std", **cfg.norm_modes},
            )
            if meta.stats
            else None
        )
        self.video_time = spec.video_time(self.fps)
        self.action_time = spec.action_time(self.fps)
        self._columns: dict[str, np.ndarray] | None = None  # read_without_video's table, on first use

    # ---- validation ----------------------------------------------------------------------------
    def _check_keys(self, meta) -> None:
        cfg = self.config
        required = [cfg.image_key, *self.state_keys] + ([cfg.action_key] if cfg.spec.num_actions > 0 else [])
        for key in required:
            if key not in meta.features:
                raise ValueError(
                    f"dataset {self.name}: missing key {key!r}; it has {sorted(meta.features)} "
                    f"(set image_key/state_key/action_key in ClipDatasetConfig)"
                )
        if meta.features[cfg.image_key]["dtype"] not in ("video", "image"):
            raise ValueError(f"dataset {self.name}: key {cfg.image_key!r} is not an image/video feature")

    def _check_episodes(self, meta) -> None:
        if meta.total_episodes == 0 or meta.episodes is None:
            raise ValueError(f"dataset {self.name}: has no episodes")
        lengths = dict(zip(meta.episodes["episode_index"], meta.episodes["length"], strict=True))
        wanted = self.config.episodes if self.config.episodes is not None else sorted(lengths)
        for ep in wanted:
            if ep not in lengths:
                raise ValueError(f"dataset {self.name}: episode {ep} does not exist (it has {len(lengths)})")
            if lengths[ep] < 2:
                raise ValueError(
                    f"dataset {self.name}: episode {ep} has {lengths[ep]} frame(s); clips need >= 2 "
                    "(drop it with ClipDatasetConfig(episodes=[...]))"
                )

    def _check_videos(self, meta) -> None:
        key = self.config.image_key
        if key not in meta.video_keys:
            return
        import av

        wanted = self.config.episodes if self.config.episodes is not None else range(meta.total_episodes)
        by_file: dict[Path, list[int]] = {}
        for ep in wanted:
            by_file.setdefault(Path(meta.root) / meta.get_video_file_path(ep, key), []).append(int(ep))
        for path, eps in by_file.items():
            where = f"dataset {self.name}: key {key!r}, episodes {eps[:5]}{'...' if len(eps) > 5 else ''}"
            if not path.exists():
                raise FileNotFoundError(f"{where}: video file {path} is missing")
            try:
                with av.open(str(path)) as c:
                    if not c.streams.video:
                        raise ValueError("no video stream")
            except Exception as e:  # av raises its own error types
                raise ValueError(f"{where}: unreadable video file {path}: {e}") from e

    def _check_finite(self, table) -> None:
        cfg = self.config
        keys = self.state_keys + ([cfg.action_key] if cfg.spec.num_actions > 0 else [])
        for key in keys:
            col = table.column(key).combine_chunks()
            values = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float64)
            values = values.reshape(len(col), -1)
            bad = ~np.isfinite(values).all(axis=1)
            if bad.any():
                rows = np.flatnonzero(bad)
                eps = sorted({int(self.row_episode[r]) for r in rows})
                raise ValueError(
                    f"dataset {self.name}: key {key!r} has non-finite values in episode(s) {eps[:10]} "
                    f"(frames {[int(self.row_frame[r]) for r in rows[:5]]}); drop those episodes with "
                    "ClipDatasetConfig(episodes=[...]) or fix the data"
                )

    def _anchors(self) -> np.ndarray:
        rows = np.arange(len(self.row_episode))
        if self.config.spec.pad:
            return rows
        spec = self.config.spec
        need = max((spec.num_frames - 1) * self.frame_step, (spec.num_actions - 1) * self.action_step, 0)
        return rows[self.row_frame + need < self.row_length]

    # ---- access --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.anchors)

    def __getitem__(self, i: int) -> dict[str, Any]:
        cfg = self.config
        row = int(self.anchors[i])
        try:
            item = self.lerobot[row]
        except Exception as e:
            raise ClipReadError(
                f"dataset {self.name}: cannot read clip {i} (episode {int(self.row_episode[row])}, "
                f"frame {int(self.row_frame[row])}, keys {cfg.image_key!r}/{cfg.action_key!r}): {e}"
            ) from e
        return {"video": item[cfg.image_key], **self._sample(item, i)}

    # ---- reading without decoding video ----------------------------------------------------------
    def without_video(self) -> ClipsWithoutVideo:
        """This dataset's clips with every key but `video`, read from the table alone (no decoding):
        for training on latents a cache already holds."""
        return ClipsWithoutVideo(self)

    def read_without_video(self, i: int) -> dict[str, Any]:
        """Sample i minus `video`, plus `clip_index` = i. The windows are LeRobot's: frame k of the
        clip is episode frame anchor + delta_k clamped into the episode, padded where it was clamped."""
        cfg = self.config
        if self._columns is None:
            self._columns = self._table_columns()
        cols = self._columns
        row = int(self.anchors[i])
        frame, length = int(self.row_frame[row]), int(self.row_length[row])
        item: dict[str, Any] = {}
        for key, step, n in self._windows():
            wanted = frame + step * np.arange(n)
            rows = row - frame + np.clip(wanted, 0, length - 1)
            item[f"{key}_is_pad"] = torch.from_numpy((wanted < 0) | (wanted >= length))
            if key != cfg.image_key:
                item[key] = torch.from_numpy(cols[key][rows])
        for key in ("episode_index", "frame_index", "timestamp", "task_index"):
            item[key] = torch.tensor(cols[key][row])
        item["task"] = self.lerobot.meta.tasks.iloc[int(cols["task_index"][row])].name
        return {**self._sample(item, i), "clip_index": i}

    def _windows(self) -> list[tuple[str, int, int]]:
        cfg, spec = self.config, self.config.spec
        out = [(key, self.frame_step, spec.num_frames) for key in [cfg.image_key, *self.state_keys]]
        if self.has_env_state and cfg.env_state_key not in self.state_keys:
            out.append((cfg.env_state_key, self.frame_step, spec.num_frames))
        if spec.num_actions > 0:
            out.append((cfg.action_key, self.action_step, spec.num_actions))
        return out

    def _table_columns(self) -> dict[str, np.ndarray]:
        """Every numeric column a clip reads, as (rows, ...) arrays of the table's own dtype."""
        rows = len(self.row_episode)
        # Rows must hold each episode's frames 0..L-1 in order, as LeRobot writes them.
        first = np.r_[True, self.row_episode[1:] != self.row_episode[:-1]]
        if not (np.all(self.row_frame[first] == 0) and np.all(np.diff(self.row_frame)[~first[1:]] == 1)):
            raise ValueError(
                f"dataset {self.name}: rows are not in episode/frame order; read clips with video"
            )
        table = self.lerobot.hf_dataset.data
        cols: dict[str, np.ndarray] = {}
        for key, _, _ in self._windows():
            if key != self.config.image_key:
                col = table.column(key).combine_chunks()
                shape = self.lerobot.meta.features[key]["shape"]
                cols[key] = np.asarray(col.flatten().to_numpy(zero_copy_only=False)).reshape(rows, *shape)
        for key in ("episode_index", "frame_index", "timestamp", "task_index"):
            cols[key] = table.column(key).to_numpy()
        return cols

    def _sample(self, item: dict[str, Any], i: int) -> dict[str, Any]:
        """The clip's keys from a LeRobot item (every key but `video`)."""
        cfg = self.config
        state = torch.cat([item[part].float() for part in self.state_keys], dim=-1)
        out: dict[str, Any] = {
            "video_time": self.video_time.clone(),
            "video_valid": ~item[f"{cfg.image_key}_is_pad"],
            "state": state,
            "task": item["task"],
            "episode_index": int(item["episode_index"]),
            "frame_index": int(item["frame_index"]),
            "clip_start_time": float(item["timestamp"]),
            "fps": self.fps,
        }
        if cfg.spec.num_actions > 0:
            out["action"] = item[cfg.action_key].float()
            out["action_time"] = self.action_time.clone()
            out["action_valid"] = ~item[f"{cfg.action_key}_is_pad"]
        if self.has_env_state:
            out["environment_state"] = item[cfg.env_state_key].float()
        if cfg.normalize and self.normalizer is not None:
            out["state"] = self.normalizer.normalize(cfg.state_key, out["state"])
            if "action" in out:
                out["action"] = self.normalizer.normalize(cfg.action_key, out["action"])
        return out

    @property
    def episodes(self) -> list[int]:
        return sorted({int(e) for e in self.row_episode})


class ClipsWithoutVideo(torch.utils.data.Dataset):
    """A ClipDataset's samples without `video` (see `ClipDataset.read_without_video`)."""

    def __init__(self, clips: ClipDataset) -> None:
        self.clips = clips

    def __len__(self) -> int:
        return len(self.clips)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.clips.read_without_video(i)


def common_rate(*fps: float) -> float:
    """Largest rate dividing every given fps (e.g. 10, 15, 30 -> 5): a ClipSpec rate valid for all."""
    g = 0
    for f in fps:
        g = math.gcd(g, int(round(f)))
    return float(g)
