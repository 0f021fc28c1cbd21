"""Action-free clips from a folder of video files (mp4 by default), timestamps from the container.

Each file is one episode. Frame times are the decoded frames' presentation timestamps
(pts x time_base) minus the first frame's, so variable-frame-rate files keep their real timing.
A clip anchored at frame i takes, for k < T, the frame nearest to t_i + k / video_fps (or every
`frame_stride`-th frame); targets past the end of the file are padded (last frame) and flagged.
Optional `<stem>.txt` next to a video holds its task text.

Samples share the ClipDataset keys `video`, `video_time`, `video_valid`, `task`, `episode_index`,
`frame_index`, `clip_start_time`; with `action_dim` set they also carry all-invalid zero `action`
(Ta, A), `action_time` and `action_valid` so they batch with action-labelled clips (docs/design.md,
"The three action modes": video-only samples have no actions in the sequence, no loss).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cosmos3_robot.datasets.clips import ClipReadError, ClipSpec


@dataclass
class VideoFolderConfig:
    folder: str | Path
    spec: ClipSpec = field(default_factory=lambda: ClipSpec(num_actions=0))
    pattern: str = "*.mp4"
    image_size: int | None = None  # resize to a square of this size; None keeps the native size
    action_dim: int | None = None
    return_uint8: bool = False
    default_task: str = ""

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        if self.image_size is not None and self.image_size < 8:
            raise ValueError(f"image_size={self.image_size} must be >= 8 or None")
        if self.action_dim is not None and self.action_dim < 1:
            raise ValueError(f"action_dim={self.action_dim} must be >= 1 or None")


def _frame_times(path: Path) -> tuple[np.ndarray, float]:
    """Presentation times (s, sorted) of every video frame by demuxing (no decoding), native fps."""
    import av

    with av.open(str(path)) as c:
        if not c.streams.video:
            raise ValueError("no video stream")
        stream = c.streams.video[0]
        tb = float(stream.time_base)
        pts = [p.pts for p in c.demux(stream) if p.pts is not None and p.size > 0]
        rate = float(stream.average_rate or stream.guessed_rate or 0.0)
    if not pts:
        raise ValueError("no decodable frames")
    times = np.sort(np.asarray(pts, dtype=np.float64) * tb)
    return times, rate


class VideoFolderDataset(torch.utils.data.Dataset):
    def __init__(self, config: VideoFolderConfig | None = None, **kwargs: Any) -> None:
        self.config = cfg = config or VideoFolderConfig(**kwargs)
        folder = Path(cfg.folder)
        if not folder.is_dir():
            raise FileNotFoundError(f"video folder {folder} does not exist")
        self.files = sorted(folder.glob(cfg.pattern))
        if not self.files:
            raise ValueError(f"video folder {folder}: no files match {cfg.pattern!r}")
        self.times: list[np.ndarray] = []
        self.native_fps: list[float] = []
        for ep, path in enumerate(self.files):
            try:
                times, rate = _frame_times(path)
            except Exception as e:  # av raises its own error types
                raise ValueError(
                    f"video folder {folder}: episode {ep}: unreadable video file {path.name}: {e}"
                ) from e
            if len(times) < 2:
                raise ValueError(
                    f"video folder {folder}: episode {ep} ({path.name}) has {len(times)} frame(s); need >= 2"
                )
            self.times.append(times - times[0])
            self.native_fps.append(rate or 1.0 / float(np.median(np.diff(times))))
        spec = cfg.spec
        anchors = []
        for ep, times in enumerate(self.times):
            for i in range(len(times)):
                if spec.pad or self._targets(ep, i)[1].all():
                    anchors.append((ep, i))
        if not anchors:
            raise ValueError(
                f"video folder {folder}: no video is long enough for one full clip; use pad=True"
            )
        self.anchors = anchors

    def _targets(self, ep: int, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Frame indices for a clip anchored at frame i of episode ep, and their validity."""
        spec, times = self.config.spec, self.times[ep]
        k = np.arange(spec.num_frames)
        if spec.video_fps is None:
            idx = i + k * (spec.frame_stride or 1)
            valid = idx < len(times)
            return np.minimum(idx, len(times) - 1), valid
        target = times[i] + k / spec.video_fps
        half = 0.5 / self.native_fps[ep]
        idx = np.clip(np.searchsorted(times, target - half), 0, len(times) - 1)
        valid = target <= times[-1] + half
        return idx, valid

    def __len__(self) -> int:
        return len(self.anchors)

    def _decode(self, ep: int, wanted: np.ndarray) -> dict[int, np.ndarray]:
        import av

        path = self.files[ep]
        need = set(int(j) for j in wanted)
        last = max(need)
        frames: dict[int, np.ndarray] = {}
        size = self.config.image_size
        with av.open(str(path)) as c:
            stream = c.streams.video[0]
            stream.thread_type = "AUTO"
            for j, frame in enumerate(c.decode(stream)):  # files are short; decode from the start
                if j in need:
                    if size is not None:
                        frame = frame.reformat(width=size, height=size)
                    frames[j] = frame.to_ndarray(format="rgb24")
                if j >= last:
                    break
        if len(frames) < len(need):
            raise ValueError(f"decoded {len(frames)} of {len(need)} requested frames")
        return frames

    def __getitem__(self, n: int) -> dict[str, Any]:
        cfg, spec = self.config, self.config.spec
        ep, i = self.anchors[n]
        idx, valid = self._targets(ep, i)
        try:
            frames = self._decode(ep, idx)
        except Exception as e:
            raise ClipReadError(
                f"video folder {cfg.folder}: episode {ep} ({self.files[ep].name}), key 'video', frame {i}: {e}"
            ) from e
        video = torch.from_numpy(np.stack([frames[int(j)] for j in idx])).permute(0, 3, 1, 2).contiguous()
        if not cfg.return_uint8:
            video = video.float().div_(255.0)
        times = self.times[ep]
        video_time = times[idx] - times[i]
        # padded slots: nominal times continuing the clip, so the axis stays monotonic
        step = 1.0 / spec.video_fps if spec.video_fps else (spec.frame_stride or 1) / self.native_fps[ep]
        video_time = np.where(valid, video_time, np.arange(spec.num_frames) * step)
        task_file = self.files[ep].with_suffix(".txt")
        out: dict[str, Any] = {
            "video": video,
            "video_time": torch.as_tensor(video_time, dtype=torch.float32),
            "video_valid": torch.as_tensor(valid),
            "task": task_file.read_text().strip() if task_file.exists() else cfg.default_task,
            "episode_index": ep,
            "frame_index": i,
            "clip_start_time": float(times[i]),
            "fps": float(spec.video_fps or self.native_fps[ep]),
        }
        if cfg.action_dim is not None and spec.num_actions > 0:
            hz = spec.action_hz or out["fps"]
            out["action"] = torch.zeros(spec.num_actions, cfg.action_dim)
            out["action_time"] = torch.arange(spec.num_actions, dtype=torch.float32) / hz
            out["action_valid"] = torch.zeros(spec.num_actions, dtype=torch.bool)
        return out
