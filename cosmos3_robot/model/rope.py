"""3D multimodal RoPE on a real-time axis.

Axis glossary:  B batch · L tokens · D head_dim · P = D/2 rotation pairs · 3 = (t, h, w)

Every token carries a position (t, h, w), possibly non-integer:
  text / Reasoner tokens      (i, i, i)                 — plain 1-D RoPE, as the VLM expects
  video latent frame k        (O + time_k · r, row, col) — row/col on the merged latent grid
  audio and action tokens     (O + time · r, 0, 0)       — time axis only
where `time` is the token's real timestamp in seconds, `r` is `time_units_per_second` (default
6 = one unit per 24 fps frame compressed 4x in time), and O is the first position after the
Reasoner segment plus a margin (Cosmos 3: 15000). So a video frame at 0.5 s (from 24 fps or
10 fps video) and an action sampled at 0.5 s (from a 20 Hz or 50 Hz stream) share a time position.

The P rotation pairs are split into (t, h, w) sections and *interleaved* like Qwen3-VL's mRoPE:
pair j uses the h position if j % 3 == 1 and j < 3·h_pairs, the w position if j % 3 == 2 and
j < 3·w_pairs, and the t position otherwise. With (i, i, i) positions this is exactly 1-D RoPE.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _check_finite(name: str, x: Tensor) -> None:
    if not torch.isfinite(x).all():
        raise ValueError(
            f"{name} contains non-finite values (NaN or inf); timestamps and positions must be finite"
        )


def section_index(head_dim: int, sections: tuple[int, int, int]) -> Tensor:
    """(P,) long: which of (t, h, w) drives each rotation pair, interleaved as in Qwen3-VL."""
    pairs = head_dim // 2
    _, h, w = sections
    axis = torch.zeros(pairs, dtype=torch.long)
    j = torch.arange(pairs)
    axis[(j % 3 == 1) & (j < 3 * h)] = 1
    axis[(j % 3 == 2) & (j < 3 * w)] = 2
    return axis


def rope_cos_sin(
    positions: Tensor, head_dim: int, theta: float, sections: tuple[int, int, int]
) -> tuple[Tensor, Tensor]:
    """positions (B, 3, L) float -> cos, sin (B, L, D) in float32, "rotate-half" layout."""
    if positions.ndim != 3 or positions.shape[1] != 3:
        raise ValueError(f"positions must have shape (B, 3, L), got {tuple(positions.shape)}")
    # float32 throughout, the way Qwen3-VL (transformers) and Cosmos 3 (Diffusers) compute it, so
    # that pretrained weights see exactly the rotations they were trained with.
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=positions.device) / head_dim)
    )
    axis = section_index(head_dim, sections).to(positions.device)
    pos = positions.float()[:, axis, :]  # (B, P, L): the position each pair rotates by
    angles = (pos * inv_freq[None, :, None]).transpose(1, 2)  # (B, L, P)
    angles = torch.cat([angles, angles], dim=-1)  # (B, L, D)
    return angles.cos(), angles.sin()


def rotation_table(cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
    """(cos, sin) (..., L, D) -> (cos, signed sin) (..., L, 1, D) for `rotate_heads`.

    Rotate-half layout: pair j is (x[j], x[j + D/2]). The sign of the rotation is folded into sin
    once per request, so rotating a tensor costs a flip, a multiply and one fused multiply-add.
    """
    half = sin.shape[-1] // 2
    signed = torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)
    return cos.unsqueeze(-2), signed.unsqueeze(-2)


def rotate_heads(x: Tensor, cos: Tensor, signed_sin: Tensor) -> Tensor:
    """x (..., L, N, D) rotated by a `rotation_table` (..., L, 1, D):
    (x1, x2) -> (x1·cos - x2·sin, x2·cos + x1·sin), in float32, returned in x's dtype."""
    xf = x.float()
    swapped = xf.unflatten(-1, (2, -1)).flip(-2).flatten(-2)  # (x2, x1): rotate-half without its sign
    return torch.addcmul(xf * cos, swapped, signed_sin).to(x.dtype)


# ----------------------------------------------------------------------------------------------
# Position builders. All return float tensors of shape (B, 3, N).
# ----------------------------------------------------------------------------------------------


def text_positions(batch: int, length: int, start: float = 0.0, device=None) -> Tensor:
    """(i, i, i) for i = start, start+1, ... — Reasoner text tokens."""
    i = torch.arange(length, device=device, dtype=torch.float32) + start
    return i.view(1, 1, length).expand(batch, 3, length).clone()


def time_positions(times_s: Tensor, offset: Tensor, units_per_second: float) -> Tensor:
    """Audio / action tokens: (O + t·r, 0, 0). times_s (B, N) seconds, offset (B,) position units."""
    if times_s.ndim != 2:
        raise ValueError(f"times_s must have shape (B, N), got {tuple(times_s.shape)}")
    _check_finite("times_s", times_s)
    t = offset.to(torch.float64)[:, None] + times_s.to(torch.float64) * units_per_second
    zeros = torch.zeros_like(t)
    return torch.stack([t, zeros, zeros], dim=1).float()


def video_positions(
    frame_times_s: Tensor, grid: tuple[int, int], offset: Tensor, units_per_second: float
) -> Tensor:
    """Video latent tokens, frame-major then row-major: (O + t_k·r, row, col).

    frame_times_s (B, T) seconds per latent frame; grid = (rows, cols) of merged tokens per frame.
    Returns (B, 3, T·rows·cols).
    """
    if frame_times_s.ndim != 2:
        raise ValueError(f"frame_times_s must have shape (B, T), got {tuple(frame_times_s.shape)}")
    _check_finite("frame_times_s", frame_times_s)
    rows, cols = grid
    b, t = frame_times_s.shape
    tt = offset.to(torch.float64)[:, None] + frame_times_s.to(torch.float64) * units_per_second  # (B, T)
    tt = tt[:, :, None].expand(b, t, rows * cols)
    r = torch.arange(rows, dtype=torch.float64, device=frame_times_s.device)
    c = torch.arange(cols, dtype=torch.float64, device=frame_times_s.device)
    rr = r[:, None].expand(rows, cols).reshape(1, 1, -1).expand(b, t, -1)
    cc = c[None, :].expand(rows, cols).reshape(1, 1, -1).expand(b, t, -1)
    return torch.stack([tt, rr, cc], dim=1).reshape(b, 3, t * rows * cols).float()
