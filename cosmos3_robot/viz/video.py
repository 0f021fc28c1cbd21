"""MP4 files of frames (H.264 through PyAV), written atomically.

    write_mp4("episode_000.mp4", frames, fps=10)     # frames uint8 (T, H, W, 3)

PyAV (a LeRobot dependency) is imported inside the function. Odd sizes are padded to even ones, as
H.264's 4:2:0 chroma needs.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def write_mp4(path: str | Path, frames: np.ndarray, fps: float) -> Path:
    import av

    frames = np.asarray(frames)
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 (T, H, W, 3), got {frames.dtype} {frames.shape}")
    if len(frames) == 0:
        raise ValueError("no frames to write")
    if not fps > 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    h, w = frames.shape[1:3]
    pad = ((0, 0), (0, h % 2), (0, w % 2), (0, 0))
    frames = np.pad(frames, pad, mode="edge") if (h % 2 or w % 2) else frames
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    from fractions import Fraction

    with av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("libx264", rate=Fraction(fps).limit_denominator(1000))
        stream.width, stream.height = frames.shape[2], frames.shape[1]
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": "18", "preset": "veryfast"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    os.replace(tmp, path)
    return path


def read_mp4(path: str | Path) -> np.ndarray:
    """Every frame of a video file, uint8 (T, H, W, 3)."""
    import av

    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(video=0)])
