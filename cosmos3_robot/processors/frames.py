"""Frame conversion shared by training and inference: uint8 <-> [0, 1] float, and resizing.

Layout: frames are (..., 3, H, W), RGB, channel-first per frame (LeRobot's layout).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def to_uint8(frames: Tensor) -> Tensor:
    """Frames float in [0, 1] (LeRobot decodes uint8 / 255, the VAE decodes to [0, 1]) -> uint8;
    uint8 frames pass through unchanged."""
    return frames if frames.dtype == torch.uint8 else (frames * 255).round().clamp(0, 255).to(torch.uint8)


def resize_frames(frames: Tensor, size: int | None) -> Tensor:
    """Resize uint8 (T, 3, H, W) to (T, 3, size, size) with antialiasing; None keeps the size.
    Non-square frames are refused rather than squashed (that would change what the model sees)."""
    if size is None or tuple(frames.shape[-2:]) == (size, size):
        return frames
    h, w = frames.shape[-2:]
    if h != w:
        raise ValueError(
            f"frames are {h}x{w} px (not square); resizing them to {size}x{size} would squash them: "
            "record square frames (record --image-size) or crop them to a square first"
        )
    x = F.interpolate(frames.float(), size=(size, size), mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp(0, 255).to(torch.uint8)
