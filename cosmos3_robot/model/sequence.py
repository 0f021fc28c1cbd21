"""The Generator's sequence container: for every token, its modality, timestamp, grid position, σ.

Axis glossary:  B batch · N tokens of one modality · C latent channels · T latent frames ·
                H, W latent rows/cols · p patch size (2)

A Generator segment is up to four `Stream`s — video, audio, action, state — each right-padded over
the batch with a `valid` mask (state tokens are always clean: proprioceptive conditioning). Every token says whether it is *noisy* (generated: gets the noise-level
embedding and the loss) or *clean* (conditioning: σ = 0). Full attention is order-free, so the
segment is simply [video; audio; action; state] with padding wherever a stream is shorter; positions come
from the timestamps (see `rope.py`), never from the order.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

MODALITIES = ("video", "audio", "action", "state")


@dataclass
class Stream:
    """One modality's tokens for a batch."""

    latents: Tensor  # (B, N, C) token features; video tokens are 2x2-merged patches (see `patchify`)
    time_s: Tensor  # (B, N) real time of each token, seconds
    sigma: Tensor  # (B, N) noise level in [0, 1]; exactly 0 on clean tokens
    noisy: Tensor  # (B, N) bool: generated tokens
    valid: Tensor | None = None  # (B, N) bool; None = every token is real
    grid: Tensor | None = None  # (B, N, 2) row/col on the merged latent grid (video); None = (0, 0)
    embodiment: Tensor | None = None  # (B,) long, selects the action/state projection
    positions: Tensor | None = None  # (B, 3, N) explicit RoPE positions (imports); None = from time_s

    @property
    def batch(self) -> int:
        return self.latents.shape[0]

    @property
    def length(self) -> int:
        return self.latents.shape[1]

    def validate(self, name: str, width: int | None) -> None:
        """Raise ValueError naming the field when this stream is inconsistent."""
        if self.latents.ndim != 3:
            raise ValueError(f"{name}.latents must have shape (B, N, C), got {tuple(self.latents.shape)}")
        b, n, c = self.latents.shape
        if width is not None and c != width:
            raise ValueError(f"{name}.latents has {c} channels but the model expects {width} for {name}")
        for field_name, want in (("time_s", (b, n)), ("sigma", (b, n)), ("noisy", (b, n)), ("valid", (b, n))):
            value = getattr(self, field_name)
            if value is not None and tuple(value.shape) != want:
                raise ValueError(f"{name}.{field_name} must have shape {want}, got {tuple(value.shape)}")
        if self.noisy.dtype != torch.bool or (self.valid is not None and self.valid.dtype != torch.bool):
            raise ValueError(f"{name}.noisy and {name}.valid must be bool tensors")
        if not torch.isfinite(self.time_s).all():
            raise ValueError(f"{name}.time_s contains non-finite timestamps")
        if not torch.isfinite(self.sigma).all() or (self.sigma < 0).any() or (self.sigma > 1).any():
            raise ValueError(f"{name}.sigma must lie in [0, 1]")
        if (self.sigma[~self.noisy] != 0).any():
            raise ValueError(f"{name}.sigma must be 0 on clean (noisy=False) tokens")
        if not torch.isfinite(self.latents).all():
            raise ValueError(f"{name}.latents contains non-finite values")
        if self.grid is not None and tuple(self.grid.shape) != (b, n, 2):
            raise ValueError(f"{name}.grid must have shape {(b, n, 2)}, got {tuple(self.grid.shape)}")
        if self.positions is not None and tuple(self.positions.shape) != (b, 3, n):
            raise ValueError(
                f"{name}.positions must have shape {(b, 3, n)}, got {tuple(self.positions.shape)}"
            )
        if name in ("action", "state"):
            if self.embodiment is None or tuple(self.embodiment.shape) != (b,):
                raise ValueError(f"{name}.embodiment must be a (B,) = ({b},) long tensor of embodiment ids")
        elif self.embodiment is not None:
            raise ValueError(f"{name}.embodiment is only meaningful for actions and state")
        if name == "state" and bool(self.noisy.any()):
            raise ValueError("state tokens are conditioning only: state.noisy must be all False")

    def with_latents(self, latents: Tensor, sigma: Tensor | None = None) -> Stream:
        return replace(self, latents=latents, sigma=self.sigma if sigma is None else sigma)

    def valid_mask(self) -> Tensor:
        if self.valid is None:
            return torch.ones(self.latents.shape[:2], dtype=torch.bool, device=self.latents.device)
        return self.valid


@dataclass
class GenInput:
    """The Generator segment of a batch: any subset of video, audio, action and state streams."""

    video: Stream | None = None
    audio: Stream | None = None
    action: Stream | None = None
    state: Stream | None = None

    @classmethod
    def from_dict(cls, streams: dict[str, Stream]) -> GenInput:
        unknown = sorted(set(streams) - set(MODALITIES))
        if unknown:
            raise ValueError(f"unknown Generator modality {unknown}; every token needs one of {MODALITIES}")
        return cls(**streams)

    def items(self) -> list[tuple[str, Stream]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self) if getattr(self, f.name) is not None]

    @property
    def length(self) -> int:
        """Ld: tokens over all streams."""
        return sum(s.length for _, s in self.items())

    @property
    def batch(self) -> int:
        items = self.items()
        if not items:
            raise ValueError("GenInput is empty: give at least one of video, audio, action")
        sizes = {s.batch for _, s in items}
        if len(sizes) != 1:
            raise ValueError(f"Generator streams disagree on batch size: { {n: s.batch for n, s in items} }")
        return sizes.pop()

    @staticmethod
    def cat(inputs: list[GenInput]) -> GenInput:
        """Stack Generator inputs along the batch (same streams and token counts in each)."""
        names = [n for n, _ in inputs[0].items()]
        out = {}
        for n in names:
            ss = [getattr(g, n) for g in inputs]
            if any(s is None for s in ss) or len({s.length for s in ss}) != 1:
                raise ValueError(
                    f"cannot batch Generator inputs: stream {n!r} is missing or differs in length"
                )

            def cat_field(field: str, ss=ss, n=n):
                vals = [getattr(s, field) for s in ss]
                if all(v is None for v in vals):
                    return None
                if field == "valid":
                    vals = [s.valid_mask() for s in ss]
                if any(v is None for v in vals):
                    raise ValueError(
                        f"cannot batch Generator inputs: {n}.{field} is set in some and not others"
                    )
                return torch.cat(vals, dim=0)

            out[n] = Stream(**{f.name: cat_field(f.name) for f in fields(Stream)})
        return GenInput(**out)

    def replace_latents(self, latents: dict[str, Tensor], sigma: dict[str, Tensor] | None = None) -> GenInput:
        sigma = sigma or {}
        return GenInput(
            **{n: s.with_latents(latents.get(n, s.latents), sigma.get(n)) for n, s in self.items()}
        )


# ----------------------------------------------------------------------------------------------
# Video tokens: the 2x2 patch merge of the Generator's input projection.
# ----------------------------------------------------------------------------------------------


def patchify(latents: Tensor, p: int = 2) -> Tensor:
    """(B, C, T, H, W) VAE latents -> (B, T·H/p·W/p, p·p·C) tokens, frame-major, row-major.

    Feature order inside a token is (dy, dx, c), as Cosmos 3's `proj_in` expects.
    """
    if latents.ndim != 5:
        raise ValueError(f"video latents must have shape (B, C, T, H, W), got {tuple(latents.shape)}")
    b, c, t, h, w = latents.shape
    if h % p or w % p:
        raise ValueError(
            f"latent grid {h}x{w} is not divisible by the patch size {p}; frames must be a multiple of "
            f"{16 * p} pixels per side"
        )
    x = latents.reshape(b, c, t, h // p, p, w // p, p)
    x = x.permute(0, 2, 3, 5, 4, 6, 1)  # (B, T, H/p, W/p, dy, dx, C)
    return x.reshape(b, t * (h // p) * (w // p), p * p * c)


def unpatchify(tokens: Tensor, shape: tuple[int, int, int, int], p: int = 2) -> Tensor:
    """Inverse of `patchify`: (B, T·H/p·W/p, p·p·C) -> (B, C, T, H, W); shape = (C, T, H, W)."""
    c, t, h, w = shape
    b = tokens.shape[0]
    if tokens.shape[1:] != (t * (h // p) * (w // p), p * p * c):
        raise ValueError(
            f"tokens of shape {tuple(tokens.shape)} do not match latent shape {shape} with patch {p}"
        )
    x = tokens.reshape(b, t, h // p, w // p, p, p, c)
    x = x.permute(0, 6, 1, 2, 4, 3, 5)  # (B, C, T, H/p, dy, W/p, dx)
    return x.reshape(b, c, t, h, w)


def video_stream(
    latents: Tensor,
    frame_time_s: Tensor,
    noisy_frames: Tensor,
    sigma: Tensor | None = None,
    p: int = 2,
    frame_valid: Tensor | None = None,
) -> Stream:
    """Build a video Stream from VAE latents.

    latents (B, C, T, H, W); frame_time_s (B, T) real time of each latent frame; noisy_frames (B, T)
    bool; sigma (B,) or (B, T) noise level of the noisy frames (0 on clean frames is enforced);
    frame_valid (B, T) bool for clips shorter than T.
    """
    b, _, t, h, w = latents.shape
    if frame_time_s.shape != (b, t):
        raise ValueError(f"frame_time_s must have shape (B, T) = {(b, t)}, got {tuple(frame_time_s.shape)}")
    if noisy_frames.shape != (b, t) or noisy_frames.dtype != torch.bool:
        raise ValueError(f"noisy_frames must be a bool tensor of shape {(b, t)}")
    per = (h // p) * (w // p)
    if sigma is None:
        sigma = torch.zeros(b, t, device=latents.device)
    if sigma.ndim == 1:
        sigma = sigma[:, None].expand(b, t)
    sigma = torch.where(
        noisy_frames, sigma.to(latents.device).float(), torch.zeros((), device=latents.device)
    )
    rows = torch.arange(h // p, device=latents.device)
    cols = torch.arange(w // p, device=latents.device)
    grid = (
        torch.stack(torch.meshgrid(rows, cols, indexing="ij"), dim=-1)
        .reshape(1, 1, per, 2)
        .expand(b, t, per, 2)
    )

    def rep(x: Tensor) -> Tensor:  # (B, T) -> (B, T·per)
        return x[:, :, None].expand(b, t, per).reshape(b, t * per)

    return Stream(
        latents=patchify(latents, p),
        time_s=rep(frame_time_s.float()),
        sigma=rep(sigma),
        noisy=rep(noisy_frames),
        valid=None if frame_valid is None else rep(frame_valid),
        grid=grid.reshape(b, t * per, 2).float(),
    )


def series_stream(
    latents: Tensor,
    time_s: Tensor,
    noisy: Tensor,
    sigma: Tensor | None = None,
    valid: Tensor | None = None,
    embodiment: Tensor | None = None,
) -> Stream:
    """Build an audio or action Stream: latents (B, N, C), time_s (B, N), noisy (B, N) bool,
    sigma (B,) or (B, N) for the noisy tokens."""
    b, n, _ = latents.shape
    if sigma is None:
        sigma = torch.zeros(b, n, device=latents.device)
    if sigma.ndim == 1:
        sigma = sigma[:, None].expand(b, n)
    if noisy.shape != (b, n):
        raise ValueError(f"noisy must have shape {(b, n)}, got {tuple(noisy.shape)}")
    sigma = torch.where(noisy, sigma.to(latents.device).float(), torch.zeros((), device=latents.device))
    return Stream(
        latents=latents, time_s=time_s.float(), sigma=sigma, noisy=noisy, valid=valid, embodiment=embodiment
    )
