"""The vision encoder (ViT) that turns images and video frames into Reasoner tokens.

Architecture and parameter names follow Qwen3-VL's vision tower, so a Qwen3-VL checkpoint loads
one to one (see `qwen3vl.py`), and a small config (`vit_preset("sim-small", ...)`) can be trained
from scratch on simulation frames.

Axis glossary:  N patches (all images/frames packed) · M = N / m² merged tokens · C ViT width ·
                H heads · D head_dim · O output width (= Reasoner hidden size) · m spatial merge size

    pixels (N, 3·T·P·P) ─► patch_embed ─► + interpolated pos_embed ─► blocks (2-D RoPE, attention
    within each frame) ─┬───────────────────────────────► merger ───────────► tokens (M, O)
                        └─ after block i in deepstack_indexes: deepstack_merger[j] ─► deepstack[j] (M, O)

Input layout (what Qwen's processors produce, and `image_patches` below): patches of T frames × P × P
pixels, ordered frame-major, then by m×m merge block (row-major), then within the block. Every m×m
group of consecutive patches becomes one token in the merger ("2×2 token merge").

DeepStack (Qwen3-VL; Meng et al. 2024, arXiv 2406.04334): intermediate ViT features, merged like
the output tokens, are added to the Reasoner's hidden state at the visual positions after its first
few layers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cosmos3_robot.model.config import require_positive
from cosmos3_robot.model.rope import rotate_heads, rotation_table


@dataclass
class ViTConfig:
    depth: int = 2
    hidden_size: int = 32
    intermediate_size: int = 64
    num_heads: int = 2
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    out_hidden_size: int = 64  # must equal the Reasoner's hidden size
    num_position_embeddings: int = 16  # a square number: a (side x side) learned grid
    deepstack_indexes: tuple[int, ...] = ()  # blocks whose output feeds DeepStack
    hidden_act: str = "gelu_pytorch_tanh"
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        require_positive(
            self,
            "depth",
            "hidden_size",
            "intermediate_size",
            "num_heads",
            "in_channels",
            "patch_size",
            "temporal_patch_size",
            "spatial_merge_size",
            "out_hidden_size",
            "num_position_embeddings",
        )
        self.deepstack_indexes = tuple(int(i) for i in self.deepstack_indexes)
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise ValueError(
                f"ViTConfig.hidden_size ({self.hidden_size}) / num_heads ({self.num_heads}) must be a multiple "
                "of 4 (2-D RoPE rotates h and w pairs)"
            )
        side = math.isqrt(self.num_position_embeddings)
        if side * side != self.num_position_embeddings:
            raise ValueError(
                f"ViTConfig.num_position_embeddings must be a square number, got {self.num_position_embeddings}"
            )
        bad = [i for i in self.deepstack_indexes if not 0 <= i < self.depth]
        if bad or len(set(self.deepstack_indexes)) != len(self.deepstack_indexes):
            raise ValueError(
                f"ViTConfig.deepstack_indexes {self.deepstack_indexes} must be distinct block indices in [0, {self.depth})"
            )
        if self.hidden_act not in _ACTS:
            raise ValueError(
                f"ViTConfig.hidden_act={self.hidden_act!r} is not supported; use one of {sorted(_ACTS)}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        """Width of one flattened input patch: channels x temporal_patch x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size**2

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ViTConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"ViTConfig: unknown keys {unknown}; known keys are {sorted(known)}")
        return cls(**data)


_ACTS = {
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,
    "silu": F.silu,
}


def vit_preset(name: str, out_hidden_size: int) -> ViTConfig:
    """Named ViT configs. `tiny`: unit tests. `sim-small`: trained from scratch on simulation frames
    (e.g. 224x224 -> 14x14 patches of 16 -> 49 tokens per frame pair)."""
    presets = {
        "tiny": dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4,
                     num_position_embeddings=16, deepstack_indexes=(0, 1)),
        "sim-small": dict(depth=6, hidden_size=192, intermediate_size=768, num_heads=3, patch_size=16,
                          num_position_embeddings=196, deepstack_indexes=(1, 3)),
    }  # fmt: skip
    if name not in presets:
        raise ValueError(f"unknown ViT preset {name!r}; choose one of {sorted(presets)}")
    return ViTConfig(out_hidden_size=out_hidden_size, **presets[name])


# ------------------------------------------------------------------------------------------------
# Blocks
# ------------------------------------------------------------------------------------------------


class PatchEmbed(nn.Module):
    """A linear map of each flattened (C, T, P, P) patch: a Conv3d whose stride equals its kernel."""

    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.proj = nn.Linear(cfg.patch_dim, cfg.hidden_size)

    def forward(self, pixels: Tensor) -> Tensor:
        return self.proj(pixels.to(self.proj.weight.dtype))


class VisionAttention(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.num_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.proj = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], seqlens: list[int]) -> Tensor:
        """x (N, C); rope a `rotation_table` (N, 1, D); attention is full within each segment of
        `seqlens` (one frame)."""
        n, c = x.shape
        q, k, v = self.qkv(x).view(n, 3, self.num_heads, -1).unbind(1)  # (N, H, D) each
        q, k = rotate_heads(q, *rope), rotate_heads(k, *rope)
        q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (H, N, D)
        if len(set(seqlens)) == 1:  # all frames the same size: one batched call
            s = seqlens[0]
            q, k, v = (t.reshape(self.num_heads, n // s, s, -1).transpose(0, 1) for t in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v)  # (S, H, s, D)
            o = o.permute(0, 2, 1, 3).reshape(n, c)
        else:
            outs = [
                F.scaled_dot_product_attention(qi, ki, vi)
                for qi, ki, vi in zip(
                    q.split(seqlens, 1), k.split(seqlens, 1), v.split(seqlens, 1), strict=True
                )
            ]
            o = torch.cat(outs, dim=1).transpose(0, 1).reshape(n, c)
        return self.proj(o)


class VisionMLP(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.act = cfg.hidden_act
        self.linear_fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.linear_fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear_fc2(_ACTS[self.act](self.linear_fc1(x)))


class VisionBlock(nn.Module):
    def __init__(self, cfg: ViTConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = VisionAttention(cfg)
        self.mlp = VisionMLP(cfg)

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor], seqlens: list[int]) -> Tensor:
        x = x + self.attn(self.norm1(x), rope, seqlens)
        return x + self.mlp(self.norm2(x))


class PatchMerger(nn.Module):
    """m×m neighbouring patches -> one token: LayerNorm, concat, Linear-GELU-Linear.

    The main merger normalises each patch before the concat; DeepStack mergers normalise the
    concatenated vector (Qwen3-VL's `use_postshuffle_norm`).
    """

    def __init__(self, cfg: ViTConfig, norm_after_concat: bool):
        super().__init__()
        self.merged = cfg.hidden_size * cfg.spatial_merge_size**2
        self.norm_after_concat = norm_after_concat
        self.norm = nn.LayerNorm(
            self.merged if norm_after_concat else cfg.hidden_size, eps=cfg.layer_norm_eps
        )
        self.linear_fc1 = nn.Linear(self.merged, self.merged)
        self.linear_fc2 = nn.Linear(self.merged, cfg.out_hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        """x (N, C) -> (N / m², O)."""
        if self.norm_after_concat:
            x = self.norm(x.reshape(-1, self.merged))
        else:
            x = self.norm(x).reshape(-1, self.merged)
        return self.linear_fc2(F.gelu(self.linear_fc1(x)))


@dataclass
class ViTOutput:
    tokens: Tensor  # (M, O) merged tokens, images/frames in input order
    deepstack: list[Tensor] = field(default_factory=list)  # per DeepStack level, (M, O)


# ------------------------------------------------------------------------------------------------
# The encoder
# ------------------------------------------------------------------------------------------------


def _check_grid(grid_thw: Tensor, merge: int) -> list[tuple[int, int, int]]:
    if grid_thw.ndim != 2 or grid_thw.shape[1] != 3:
        raise ValueError(f"grid_thw must have shape (num_images, 3), got {tuple(grid_thw.shape)}")
    grids = [tuple(int(v) for v in row) for row in grid_thw.tolist()]
    bad = [g for g in grids if min(g) < 1 or g[1] % merge or g[2] % merge]
    if bad:
        raise ValueError(
            f"grid_thw rows {bad}: t, h, w must be >= 1 and h, w multiples of spatial_merge_size={merge}"
        )
    return grids


def _block_order(h: int, w: int, m: int) -> tuple[Tensor, Tensor]:
    """Row and column of each patch of an h×w grid in merge-block order: (h/m, w/m, m, m)."""
    rows = torch.arange(h).view(h // m, 1, m, 1).expand(h // m, w // m, m, m).reshape(-1)
    cols = torch.arange(w).view(1, w // m, 1, m).expand(h // m, w // m, m, m).reshape(-1)
    return rows, cols


class ViT(nn.Module):
    def __init__(self, config: ViTConfig):
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config)
        self.pos_embed = nn.Embedding(config.num_position_embeddings, config.hidden_size)
        self.blocks = nn.ModuleList([VisionBlock(config) for _ in range(config.depth)])
        self.merger = PatchMerger(config, norm_after_concat=False)
        self.deepstack_merger_list = nn.ModuleList(
            [PatchMerger(config, norm_after_concat=True) for _ in config.deepstack_indexes]
        )

    def _positions(self, grids: list[tuple[int, int, int]]) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """Per patch: the learned position embedding (bilinearly resampled from the square grid to
        each image's h×w, align_corners=True) (N, C) and the 2-D RoPE `rotation_table` (N, 1, D)."""
        cfg = self.config
        side = math.isqrt(cfg.num_position_embeddings)
        table = (
            self.pos_embed.weight.view(side, side, -1).permute(2, 0, 1)[None].float()
        )  # (1, C, side, side)
        d = cfg.head_dim
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d // 2, 2, dtype=torch.float32) / (d // 2)))
        embeds, angles = [], []
        for t, h, w in grids:
            rows, cols = _block_order(h, w, cfg.spatial_merge_size)
            grid = F.interpolate(table, size=(h, w), mode="bilinear", align_corners=True)[0]  # (C, h, w)
            embeds.append(grid[:, rows, cols].T.repeat(t, 1))
            ang = torch.cat([rows[:, None] * inv_freq, cols[:, None] * inv_freq], dim=-1)  # (h·w, D/2)
            angles.append(ang.repeat(t, 1))
        dev = self.pos_embed.weight.device
        pos = torch.cat(embeds).to(dev, self.pos_embed.weight.dtype)
        ang = torch.cat(angles).to(dev)
        ang = torch.cat([ang, ang], dim=-1)
        return pos, rotation_table(ang.cos(), ang.sin())

    def forward(self, pixels: Tensor, grid_thw: Tensor) -> ViTOutput:
        """pixels (N, C·T·P·P) in the processor's patch order; grid_thw (n, 3) patches per image/video."""
        cfg = self.config
        grids = _check_grid(grid_thw, cfg.spatial_merge_size)
        n = sum(t * h * w for t, h, w in grids)
        if pixels.ndim != 2 or pixels.shape != (n, cfg.patch_dim):
            raise ValueError(
                f"pixels must have shape (sum t·h·w, C·T·P·P) = ({n}, {cfg.patch_dim}) for grid_thw {grids}, "
                f"got {tuple(pixels.shape)}"
            )
        pos, rope = self._positions(grids)
        x = self.patch_embed(pixels) + pos
        seqlens = [h * w for t, h, w in grids for _ in range(t)]  # attention within each frame
        deepstack = []
        for i, block in enumerate(self.blocks):
            x = block(x, rope, seqlens)
            if i in cfg.deepstack_indexes:
                deepstack.append(self.deepstack_merger_list[cfg.deepstack_indexes.index(i)](x))
        return ViTOutput(tokens=self.merger(x), deepstack=deepstack)


def image_patches(frames: Tensor, cfg: ViTConfig) -> tuple[Tensor, Tensor]:
    """Frames (F, C, H, W), already resized to multiples of patch·merge and normalised, -> the
    ViT's input pixels (N, C·T·P·P) and grid_thw (1, 3). An image is F = 1 (its frame is repeated
    to fill the temporal patch, as Qwen's processors do); a video repeats its last frame likewise."""
    if frames.ndim != 4 or frames.shape[1] != cfg.in_channels:
        raise ValueError(f"frames must have shape (F, {cfg.in_channels}, H, W), got {tuple(frames.shape)}")
    f, c, hh, ww = frames.shape
    p, tp, m = cfg.patch_size, cfg.temporal_patch_size, cfg.spatial_merge_size
    if hh % (p * m) or ww % (p * m):
        raise ValueError(
            f"frame size {hh}x{ww} must be a multiple of patch_size*spatial_merge_size = {p * m}"
        )
    if pad := -f % tp:
        frames = torch.cat([frames, frames[-1:].expand(pad, c, hh, ww)])
    t, h, w = frames.shape[0] // tp, hh // p, ww // p
    x = frames.reshape(t, tp, c, h // m, m, p, w // m, m, p)
    x = x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)  # (t, h/m, w/m, m, m, C, T, P, P)
    return x.reshape(t * h * w, c * tp * p * p), torch.tensor([[t, h, w]])
