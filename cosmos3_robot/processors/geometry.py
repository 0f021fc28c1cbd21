"""Clip geometry: the compression the video VAE imposes (4x causal in time, 16x in space, and the
Generator's 2x2 patch merge: 4x32x32 overall), the real time of each latent frame, and the shape of
one training clip (`ClipGeometry`), which travels with a trained model in its `DataState`.

Axis glossary:  T video frames (T = 1 + 4k) · T_lat latent frames · Na actions per clip
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

TEMPORAL_FACTOR = 4  # latent frame k >= 1 covers 4 video frames
SPATIAL_FACTOR = 16  # patchify 2 × three 2× downsamples
SPATIAL_MULTIPLE = 32  # SPATIAL_FACTOR × the Generator's 2×2 patch merge


def num_latent_frames(num_frames: int) -> int:
    """T_lat for a clip of T frames; raises unless T = 1 + 4k (k >= 0)."""
    if num_frames < 1 or (num_frames - 1) % TEMPORAL_FACTOR != 0:
        lo = 1 + TEMPORAL_FACTOR * max(0, (num_frames - 1) // TEMPORAL_FACTOR)
        raise ValueError(
            f"a clip of {num_frames} frames does not fit the causal 4x temporal compression: the VAE "
            f"encodes the first frame alone and then groups of {TEMPORAL_FACTOR}, so T must be 1 + 4k "
            f"(1, 5, 9, 13, 17, ...). Trim the clip to {lo} frames or extend it to {lo + TEMPORAL_FACTOR}."
        )
    return 1 + (num_frames - 1) // TEMPORAL_FACTOR


def check_spatial_size(height: int, width: int) -> None:
    """Raise unless H and W are multiples of 32 (16x VAE × 2x2 Generator patch merge)."""
    bad = [f"{n}={v}" for n, v in (("H", height), ("W", width)) if v <= 0 or v % SPATIAL_MULTIPLE]
    if bad:
        fix = ", ".join(
            f"{v} -> {max(SPATIAL_MULTIPLE, round(v / SPATIAL_MULTIPLE) * SPATIAL_MULTIPLE)}"
            for v in (height, width)
        )
        raise ValueError(
            f"frame size {height}x{width} is not divisible by {SPATIAL_MULTIPLE} ({', '.join(bad)}): the VAE "
            f"downsamples 16x and the Generator merges 2x2 latent patches. Resize or crop the frames "
            f"({fix})."
        )


def latent_frame_times(frame_times_s: Tensor) -> Tensor:
    """The real time (seconds) each latent frame stands for, for the RoPE time axis.

    frame_times_s: (T,) timestamps of the clip's frames, T = 1 + 4k. Returns (T_lat,).

    Latent 0 encodes frame 0 alone and gets its time. Latent k >= 1 encodes frames 4k-3 .. 4k and
    gets the time of the LAST of them, frame 4k. Why the last frame rather than the mean:
      * the encoder is causal, so latent k has seen exactly the frames up to t[4k] and nothing
        later — stamping it at t[4k] never places information before it exists (a policy that
        conditions on latent k at time t[4k] does not peek into the future);
      * at a constant frame rate the latent times are then t[0], t[4], t[8], ... — evenly spaced by
        4 / fps, including the step from latent 0 to latent 1 (the mean would give a 2.5-frame step
        there and 4-frame steps after), which matches the unit of docs/design.md ("Position encoding") of "one latent frame at 24 fps".
    """
    if frame_times_s.ndim != 1:
        raise ValueError(f"frame_times_s must be 1-D (T,), got shape {tuple(frame_times_s.shape)}")
    num_latent_frames(frame_times_s.shape[0])
    return frame_times_s[::TEMPORAL_FACTOR].clone()


@dataclass(frozen=True)
class ClipGeometry:
    """What one training clip looked like, in dataset frames and seconds."""

    fps: float  # dataset frame rate (= control rate of the recorded env)
    num_frames: int  # video frames per clip (1 + 4k)
    frame_step: int  # dataset frames between clip frames
    num_actions: int
    action_step: int  # dataset frames between actions
    obs_frames: int  # observed latent frames
    image_size: int

    def __post_init__(self) -> None:
        num_latent_frames(self.num_frames)
        check_spatial_size(self.image_size, self.image_size)
        if not self.fps > 0:
            raise ValueError(f"ClipGeometry.fps must be positive, got {self.fps}")
        for name in ("frame_step", "action_step", "obs_frames"):
            if getattr(self, name) < 1:
                raise ValueError(f"ClipGeometry.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def latent_frames(self) -> int:
        return num_latent_frames(self.num_frames)

    def video_time(self) -> Tensor:
        """(T_lat,) seconds of each latent frame from the clip start."""
        frame_t = torch.arange(self.num_frames, dtype=torch.float64) * self.frame_step / self.fps
        return latent_frame_times(frame_t).float()

    def action_time(self) -> Tensor:
        """(Na,) seconds of each action from the clip start."""
        return (torch.arange(self.num_actions, dtype=torch.float64) * self.action_step / self.fps).float()

    @property
    def visible_actions(self) -> int:
        """How many of the clip's actions (from the first) its video shows: action j, taken at dataset
        frame j * action_step, shows from the next frame on, so only if that frame is in the clip
        (j * action_step < (num_frames - 1) * frame_step). Inverse dynamics can recover these only."""
        span = (self.num_frames - 1) * self.frame_step
        return min(self.num_actions, -(-span // self.action_step))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ClipGeometry:
        return cls(
            fps=float(d["fps"]),
            num_frames=int(d["num_frames"]),
            frame_step=int(d["frame_step"]),
            num_actions=int(d["num_actions"]),
            action_step=int(d["action_step"]),
            obs_frames=int(d["obs_frames"]),
            image_size=int(d["image_size"]),
        )
