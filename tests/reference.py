"""Dense-mask reference implementation of the MoT stack — the oracle for tests only.

Written from the maths, independently of `cosmos3_robot.model.attention/block/rope`: one sample at
a time, no padding, the joint [ar; dm] sequence with an explicit L×L boolean mask
(ar rows: causal over ar; dm rows: everything), explicit softmax, explicit GQA head repetition and
its own interleaved-mRoPE. Only the model's *weights* are read.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rms(x: Tensor, w: Tensor, eps: float) -> Tensor:
    x64 = x.double()
    return (x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w.double()).to(x.dtype)


def ref_rope(x: Tensor, pos: Tensor, theta: float, sections) -> Tensor:
    """x (H, L, D), pos (3, L). Pair j rotates (x[j], x[j + D/2]) by pos[axis_j] * theta^(-2j/D)."""
    _, _, d = x.shape
    half = d // 2
    _, h, w = sections
    out = x.clone().double()
    for j in range(half):
        axis = 1 if (j % 3 == 1 and j < 3 * h) else 2 if (j % 3 == 2 and j < 3 * w) else 0
        ang = pos[axis].double() * theta ** (-2.0 * j / d)
        c, s = torch.cos(ang), torch.sin(ang)
        a, b = x[..., j].double(), x[..., j + half].double()
        out[..., j] = a * c - b * s
        out[..., j + half] = b * c + a * s
    return out.to(x.dtype)


def _tower_qkv(tw, x, cfg, eps):
    a = cfg.attention
    n = x.shape[0]
    hx = rms(x, tw.input_layernorm.weight, eps)
    q = (hx @ tw.self_attn.q_proj.weight.T).view(n, a.num_heads, a.head_dim).transpose(0, 1)
    k = (hx @ tw.self_attn.k_proj.weight.T).view(n, a.num_kv_heads, a.head_dim).transpose(0, 1)
    v = (hx @ tw.self_attn.v_proj.weight.T).view(n, a.num_kv_heads, a.head_dim).transpose(0, 1)
    if hasattr(tw.self_attn.q_norm, "weight"):
        q = rms(q, tw.self_attn.q_norm.weight, eps)
        k = rms(k, tw.self_attn.k_norm.weight, eps)
    return q, k, v


def _tower_finish(tw, x, o, eps):
    x = x + o @ tw.self_attn.o_proj.weight.T
    h = rms(x, tw.post_attention_layernorm.weight, eps)
    m = tw.mlp
    return (
        x
        + (torch.nn.functional.silu(h @ m.gate_proj.weight.T) * (h @ m.up_proj.weight.T))
        @ m.down_proj.weight.T
    )


def dense_forward(model, x_ar: Tensor, pos_ar: Tensor, x_dm: Tensor, pos_dm: Tensor) -> tuple[Tensor, Tensor]:
    """One sample. x_ar (La, C), pos_ar (3, La), x_dm (Ld, C), pos_dm (3, Ld) -> normed hidden (ar, dm)."""
    cfg = model.config
    a = cfg.attention
    eps = cfg.reasoner.rms_norm_eps
    la, ld = x_ar.shape[0], x_dm.shape[0]
    L = la + ld
    mask = torch.zeros(L, L, dtype=torch.bool)
    mask[:la, :la] = torch.tril(torch.ones(la, la, dtype=torch.bool))
    mask[la:, :] = True
    pos = torch.cat([pos_ar, pos_dm], dim=1)
    rep = a.num_heads // a.num_kv_heads
    for layer in model.layers:
        qa, ka, va = _tower_qkv(layer.ar, x_ar, cfg, eps)
        qd, kd, vd = _tower_qkv(layer.dm, x_dm, cfg, eps)
        q = torch.cat([qa, qd], dim=1)
        k = torch.cat([ka, kd], dim=1)
        v = torch.cat([va, vd], dim=1)
        q = ref_rope(q, pos, a.rope_theta, a.rope_sections)
        k = ref_rope(k, pos, a.rope_theta, a.rope_sections)
        k = k.repeat_interleave(rep, dim=0)
        v = v.repeat_interleave(rep, dim=0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(a.head_dim)
        scores = scores.masked_fill(~mask, float("-inf"))
        o = torch.softmax(scores, dim=-1) @ v  # (H, L, D)
        o = o.transpose(0, 1).reshape(L, -1)
        x_ar = _tower_finish(layer.ar, x_ar, o[:la], eps)
        x_dm = _tower_finish(layer.dm, x_dm, o[la:], eps)
    return rms(x_ar, model.norm.weight, eps), rms(x_dm, model.norm_dm.weight, cfg.generator.rms_norm_eps)
