"""Small building blocks: RMSNorm, the gated MLP, the noise-level embedding and the
per-embodiment linear map.

Axis glossary:  B batch · L tokens · C channels (hidden width) · E embodiments
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32 (as Qwen3 and Cosmos 3 do)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32 and self.weight.dtype == torch.float32:
            # One fused kernel instead of seven; equal to Qwen3RMSNorm (tests/test_model_core.py).
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        # Qwen3's order in low precision: normalise in float32, round to x's dtype, then scale.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class GatedMLP(nn.Module):
    """down(silu(gate(x)) * up(x)) — the Qwen3 MLP."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.gate_up(x)
        return self.down_proj(F.silu(gate) * up)

    def gate_up(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """The two products that read x (`infra.cpu_pack` runs them as one)."""
        return self.gate_proj(x), self.up_proj(x)


def sinusoidal_embedding(t: Tensor, dim: int, max_period: float = 10000.0) -> Tensor:
    """(...,) -> (..., dim): [cos(t·f), sin(t·f)] with f = max_period^(-k/(dim/2)).

    Same convention as Diffusers' `Timesteps(flip_sin_to_cos=True, downscale_freq_shift=0)`,
    which Cosmos 3's `time_proj` uses.
    """
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[..., None] * freqs
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    """Noise level -> hidden width: sinusoidal features then Linear-SiLU-Linear (kept in float32)."""

    def __init__(self, freq_dim: int, hidden: int):
        super().__init__()
        self.freq_dim = freq_dim
        self.linear_1 = nn.Linear(freq_dim, hidden)
        self.linear_2 = nn.Linear(hidden, hidden)

    def forward(self, t: Tensor) -> Tensor:
        h = sinusoidal_embedding(t, self.freq_dim).to(self.linear_1.weight.dtype)
        return self.linear_2(F.silu(self.linear_1(h)))


class EmbodimentLinear(nn.Module):
    """One affine map per embodiment: y = x @ W[e] + b[e].

    Lets datasets of different robots (different action spaces, padded to one width) share a model,
    as Cosmos 3's per-domain action projections do.
    """

    def __init__(self, in_dim: int, out_dim: int, num_embodiments: int):
        super().__init__()
        self.in_dim, self.out_dim, self.num_embodiments = in_dim, out_dim, num_embodiments
        self.weight = nn.Parameter(torch.empty(num_embodiments, in_dim, out_dim))
        self.bias = nn.Parameter(torch.empty(num_embodiments, out_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_dim)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.zeros_(self.bias)

    @staticmethod
    def _check_shape(embodiment: Tensor, batch: int) -> None:
        if embodiment.shape != (batch,):
            raise ValueError(f"embodiment must have shape (B,) = ({batch},), got {tuple(embodiment.shape)}")

    def check(self, embodiment: Tensor, batch: int) -> None:
        """Raise ValueError unless embodiment is a (batch,) tensor of ids this map has."""
        self._check_shape(embodiment, batch)
        if embodiment.min() < 0 or embodiment.max() >= self.num_embodiments:
            raise ValueError(
                f"embodiment ids must be in [0, {self.num_embodiments}), got {embodiment.tolist()}; "
                "raise ModelConfig.num_embodiments"
            )

    def forward(self, x: Tensor, embodiment: Tensor) -> Tensor:
        """x (B, L, in), embodiment (B,) long -> (B, L, out). Ids are not range-checked here (callers
        validate once per request with `check`): a Generator step must not synchronise on them."""
        self._check_shape(embodiment, x.shape[0])
        w = self.weight[embodiment]  # (B, in, out)
        return torch.bmm(x, w.to(x.dtype)) + self.bias[embodiment].to(x.dtype)[:, None, :]
