"""Two-tower attention: two kernel calls, no dense mask.

Axis glossary:  B batch · H query heads · G kv heads · La Reasoner tokens · Ld Generator tokens · D head_dim

    Reasoner (ar):  softmax(Q_ar K_ar^T, causal)            V_ar          -> o_ar
    Generator (dm): softmax(Q_dm [K_ar'; K_dm]^T, full)    [V_ar; V_dm]  -> o_dm

             ar tokens ──► Q_ar K_ar V_ar ──(causal SDPA)──────────────► o_ar
                                  │    │
                                  ▼    ▼  (K_ar' = K_ar, or RMSNorm(K_ar) for Cosmos 3 Edge)
             dm tokens ──► Q_dm K_dm V_dm ──(full SDPA over [ar; dm])──► o_dm

The Reasoner never reads Generator tokens, so its K/V can be computed once per request and reused
by every denoising step (see `mot.MoT.reason` / `mot.MoT.denoise`).

Batches are right-padded with per-sample lengths. The Reasoner needs no mask: with right padding,
causal attention never lets a real token see a pad. The Generator gets a (B, 1, 1, Lk) key-padding
mask only when some sample is padded; it is never an L×L mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cosmos3_robot.model.layers import RMSNorm
from cosmos3_robot.model.rope import rotate_heads


class TowerAttention(nn.Module):
    """One tower's attention weights: Q/K/V/O projections and QK-norm (Qwen3 names)."""

    def __init__(
        self,
        hidden: int,
        num_heads: int,
        num_kv_heads: int,
        head_dim: int,
        bias: bool,
        qk_norm: bool,
        eps: float,
    ):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.q_proj = nn.Linear(hidden, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(hidden, num_kv_heads * head_dim, bias=bias)
        self.o_proj = nn.Linear(num_heads * head_dim, hidden, bias=bias)
        self.q_norm = RMSNorm(head_dim, eps) if qk_norm else nn.Identity()
        self.k_norm = RMSNorm(head_dim, eps) if qk_norm else nn.Identity()

    def qkv(
        self, x: Tensor, rope: tuple[Tensor, Tensor], extra_key_norm: RMSNorm | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """x (B, L, C) -> rotated q (B, H, L, D), rotated k (B, G, L, D), v (B, G, L, D), and, given
        `extra_key_norm`, the rotated extra_key_norm(k) (Cosmos 3 Edge's Reasoner keys for the
        Generator), else None. q and k are QK-normed before rotation; rope is a `rotation_table`."""
        b, n, _ = x.shape
        h, g, d = self.num_heads, self.num_kv_heads, self.head_dim
        q, k, v = self.project(x)
        q, k, extra = self.norm_and_rotate(q.view(b, n, h, d), k.view(b, n, g, d), rope, extra_key_norm)
        return q.transpose(1, 2), k.transpose(1, 2), v.view(b, n, g, d).transpose(1, 2), extra

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x (B, L, C) -> q (B, L, H·D), k and v (B, L, G·D) (`infra.cpu_pack` runs them as one product)."""
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def norm_and_rotate(
        self, q: Tensor, k: Tensor, rope: tuple[Tensor, Tensor], extra_key_norm: RMSNorm | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """q (B, L, H, D), k (B, L, G, D) -> QK-normed and rotated q and k (same shapes), and the
        rotated extra_key_norm(k) as (B, G, L, D), or None (`infra.cpu_kernels` fuses the common case)."""
        q = rotate_heads(self.q_norm(q), *rope)
        k = self.k_norm(k)
        extra = None if extra_key_norm is None else rotate_heads(extra_key_norm(k), *rope).transpose(1, 2)
        return q, rotate_heads(k, *rope), extra

    def output(self, o: Tensor) -> Tensor:
        """o (B, H, L, D) -> (B, L, C)."""
        b, _, n, _ = o.shape
        return self.o_proj(o.transpose(1, 2).reshape(b, n, self.num_heads * self.head_dim))


def _sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)


def key_padding_mask(*valid: Tensor | None) -> Tensor | None:
    """Concatenate (B, L_i) validity masks into a (B, 1, 1, sum L_i) SDPA mask; None if nothing is padded."""
    parts = [m for m in valid if m is not None]
    if not parts:
        return None
    mask = torch.cat(parts, dim=1)
    if bool(mask.all()):
        return None
    return mask[:, None, None, :]


def reasoner_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal self-attention over Reasoner tokens only. q (B, H, La, D), k/v (B, G, La, D)."""
    return _sdpa(q, k, v, causal=True)


def decode_attention(q: Tensor, k: Tensor, v: Tensor, key_valid: Tensor | None) -> Tensor:
    """One new Reasoner token per sample attending to its cache (already containing itself)."""
    mask = None if key_valid is None or bool(key_valid.all()) else key_valid[:, None, None, :]
    return _sdpa(q, k, v, mask=mask)


def generator_attention(
    q_dm: Tensor,
    k_ar: Tensor,
    v_ar: Tensor,
    k_dm: Tensor,
    v_dm: Tensor,
    ar_valid: Tensor | None = None,
    dm_valid: Tensor | None = None,
    ar_len: int | None = None,
) -> Tensor:
    """Full attention of Generator queries over [Reasoner; Generator] keys.

    q_dm (B, H, Ld, D); k_ar/v_ar (B, G, La, D) — the Reasoner's (cached) keys and values;
    k_dm/v_dm (B, G, Ld, D); ar_valid (B, La), dm_valid (B, Ld) bool, None = no padding.
    With ar_len = La, k_ar/v_ar are (B, G, La + Ld, D) request buffers (`ReasonerCache.with_room`):
    k_dm/v_dm are written into their last Ld slots instead of being concatenated (inference only).
    """
    b = k_dm.shape[0]
    if ar_len is None:
        ar_len = k_ar.shape[2]
        k = torch.cat([k_ar.to(k_dm.dtype), k_dm], dim=2)
        v = torch.cat([v_ar.to(v_dm.dtype), v_dm], dim=2)
    else:
        if k_dm.requires_grad:
            raise ValueError("a cache with room is written in place: sample with it, do not train")
        k_ar[:, :, ar_len:], v_ar[:, :, ar_len:] = k_dm, v_dm
        k, v = k_ar, v_ar
    if ar_valid is None and dm_valid is not None:
        ar_valid = torch.ones(b, ar_len, dtype=torch.bool, device=k_dm.device)
    if dm_valid is None and ar_valid is not None:
        dm_valid = torch.ones(b, k_dm.shape[2], dtype=torch.bool, device=k_dm.device)
    return _sdpa(q_dm, k, v, mask=key_padding_mask(ar_valid, dm_valid))
