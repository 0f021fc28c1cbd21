"""Whole episodes, from a LeRobot dataset or a folder of videos: what `label` and the VAE read.

    for ep in read_episodes(open_source("data/push")):       # or a folder of .mp4 / .webm files
        ep.frames    # uint8 (T, H, W, 3)
        ep.state     # (T, D) float32, or None (video files have none)
        ep.actions   # (T, A) float32, or None (action-free)

A LeRobot episode's frames are decoded in one pass over its video file (one decoder call for the
episode, not one per frame); its other columns come from the parquet table without decoding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.processors.frames import resize_frames, to_uint8
from cosmos3_robot.processors.normalize import key_parts

VIDEO_SUFFIXES = (".mp4", ".webm", ".mkv", ".mov", ".avi")


@dataclass
class SourceEpisode:
    index: int
    frames: np.ndarray  # uint8 (T, H, W, 3)
    fps: float
    task: str
    state: np.ndarray | None = None  # (T, D)
    actions: np.ndarray | None = None  # (T, A)
    name: str = ""


@dataclass
class Source:
    """Where episodes come from: a LeRobot dataset (`dataset` set) or a video folder (`files`)."""

    path: Path
    dataset: Any = None
    files: list[Path] | None = None
    image_key: str = "observation.image"
    state_key: str = "observation.state"
    action_key: str = "action"

    @property
    def num_episodes(self) -> int:
        return self.dataset.meta.total_episodes if self.dataset is not None else len(self.files)

    @property
    def has_actions(self) -> bool:
        return self.dataset is not None and self.action_key in self.dataset.meta.features

    @property
    def has_state(self) -> bool:
        if self.dataset is None:
            return False
        return all(k in self.dataset.meta.features for k in key_parts(self.state_key))


def open_source(path: str | Path, image_key: str = "observation.image", repo_id: str | None = None) -> Source:
    """A LeRobot dataset folder (meta/info.json) or a folder of video files; anything else raises."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; give a LeRobot dataset folder or a folder of videos")
    if path.is_file():
        if path.suffix.lower() in VIDEO_SUFFIXES:
            return Source(path.parent, files=[path], image_key=image_key)
        raise ValueError(f"{path} is not a video file ({', '.join(VIDEO_SUFFIXES)}) nor a dataset folder")
    if (path / "meta" / "info.json").exists():
        from cosmos3_robot.datasets.sources import open_lerobot_dataset

        dataset = open_lerobot_dataset(repo_id, path)
        if image_key not in dataset.meta.features:
            keys = [k for k, f in dataset.meta.features.items() if f["dtype"] in ("video", "image")]
            raise ValueError(f"dataset {path} has no image key {image_key!r}; its image keys are {keys}")
        return Source(path, dataset=dataset, image_key=image_key)
    files = sorted(p for p in path.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES)
    if not files:
        raise ValueError(
            f"{path} is neither a LeRobot dataset (no meta/info.json) nor a folder of videos ({', '.join(VIDEO_SUFFIXES)})"
        )
    return Source(path, files=files, image_key=image_key)


def episode_frames(dataset: Any, video_key: str, episode: int) -> tuple[Tensor, Tensor]:
    """All frames of one LeRobot episode: uint8 (T, 3, H, W) and their timestamps (T,) in seconds."""
    if video_key not in dataset.meta.features:
        keys = ", ".join(k for k, f in dataset.meta.features.items() if f["dtype"] in ("video", "image"))
        raise ValueError(f"dataset has no feature {video_key!r}; its image/video keys are: {keys}")
    ep = dataset.meta.episodes[episode]
    lo, hi = ep["dataset_from_index"], ep["dataset_to_index"]
    table = dataset.hf_dataset.data
    times = torch.tensor(table.column("timestamp").to_numpy()[lo:hi], dtype=torch.float64)
    if dataset.meta.features[video_key]["dtype"] == "video":
        from lerobot.datasets.video_utils import decode_video_frames

        path = dataset.root / dataset.meta.get_video_file_path(episode, video_key)
        start = float(ep[f"videos/{video_key}/from_timestamp"])
        from lerobot.utils.import_utils import get_safe_default_video_backend

        backend = getattr(dataset, "_video_backend", None) or get_safe_default_video_backend()
        frames = decode_video_frames(path, (start + times).tolist(), dataset.tolerance_s, backend)
        return to_uint8(frames), times
    frames = [to_uint8(dataset[i][video_key]) for i in range(lo, hi)]
    return torch.stack(frames), times


def iter_lerobot_episodes(
    dataset: Any, video_key: str, episodes=None, size: int | None = None
) -> Iterator[tuple[int, Tensor, Tensor]]:
    """(episode_index, frames uint8 (T, 3, H, W), times (T,)) for each requested episode."""
    for ep in range(dataset.meta.total_episodes) if episodes is None else episodes:
        frames, times = episode_frames(dataset, video_key, ep)
        yield ep, resize_frames(frames, size), times


def episode_column(dataset: Any, key: str, lo: int, hi: int) -> np.ndarray:
    """Rows lo..hi of a numeric column (T, D) float32; a joined key ("a+b") concatenates its parts."""
    out = []
    for part in key_parts(key):
        col = dataset.hf_dataset.data.column(part).combine_chunks()
        flat = np.asarray(col.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)
        out.append(flat.reshape(len(col), -1)[lo:hi])
    return np.concatenate(out, axis=-1)


def _video_file(path: Path) -> tuple[np.ndarray, float]:
    import av

    with av.open(str(path)) as c:
        stream = c.streams.video[0]
        rate = float(stream.average_rate) if stream.average_rate else 0.0
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(stream)])
    if not rate > 0:
        raise ValueError(f"video {path} does not say its frame rate")
    return frames, rate


def read_episodes(
    source: Source, episodes: list[int] | None = None, default_task: str = ""
) -> Iterator[SourceEpisode]:
    """Whole episodes of `source`, in index order (only `episodes` when given)."""
    wanted = range(source.num_episodes) if episodes is None else episodes
    for e in wanted:
        if not 0 <= e < source.num_episodes:
            raise ValueError(
                f"{source.path} has episodes 0..{source.num_episodes - 1}; there is no episode {e}"
            )
        if source.dataset is not None:
            ds = source.dataset
            frames, _ = episode_frames(ds, source.image_key, e)
            ep = ds.meta.episodes[e]
            lo, hi = ep["dataset_from_index"], ep["dataset_to_index"]
            tasks = ep.get("tasks") or [default_task]
            yield SourceEpisode(
                index=e,
                frames=frames.permute(0, 2, 3, 1).numpy(),
                fps=float(ds.fps),
                task=str(tasks[0]),
                state=episode_column(ds, source.state_key, lo, hi) if source.has_state else None,
                actions=episode_column(ds, source.action_key, lo, hi) if source.has_actions else None,
                name=f"episode {e}",
            )
        else:
            path = source.files[e]
            try:
                frames, fps = _video_file(path)
            except Exception as err:  # av raises its own error types
                raise ValueError(f"unreadable video file {path}: {err}") from None
            task_file = path.with_suffix(".txt")
            task = task_file.read_text().strip() if task_file.exists() else default_task
            yield SourceEpisode(index=e, frames=frames, fps=fps, task=task, name=path.name)
