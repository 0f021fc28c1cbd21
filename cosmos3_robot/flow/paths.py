"""Rectified-flow noising, training targets and noise-level sampling.

    x_σ = σ·ε + (1 − σ)·x₀,      target velocity v = dx_σ/dσ = ε − x₀

σ = 0 is clean data, σ = 1 pure noise. Training draws σ per modality (video, audio, actions
independently — the policy mode generates actions and future frames at unrelated noise levels) and
optionally per latent frame (diffusion forcing). Clean conditioning tokens keep σ = 0 and get no loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def add_noise(x0: Tensor, noise: Tensor, sigma: Tensor) -> Tensor:
    """x_σ = σ·ε + (1 − σ)·x₀; sigma broadcasts against x0 from the left ((B,), (B, N), ...)."""
    s = sigma.reshape(*sigma.shape, *([1] * (x0.ndim - sigma.ndim))).to(x0.dtype)
    return s * noise + (1 - s) * x0


def velocity_target(x0: Tensor, noise: Tensor) -> Tensor:
    """The exact rectified-flow velocity ε − x₀."""
    return noise - x0


def shift_sigma(sigma: Tensor, shift: float) -> Tensor:
    """s·σ / (1 + (s − 1)·σ): shift > 1 moves mass toward high noise (used for sampling and training)."""
    if shift <= 0:
        raise ValueError(f"shift must be > 0, got {shift}")
    return shift * sigma / (1 + (shift - 1) * sigma)


@dataclass
class SigmaSampler:
    """Training noise levels: 'logit_normal' (σ = sigmoid(N(mean, std))) or 'uniform', then shifted."""

    kind: str = "logit_normal"
    mean: float = 0.0
    std: float = 1.0
    shift: float = 1.0
    min_sigma: float = 1e-3  # keep noisy tokens distinguishable from clean ones

    def __post_init__(self) -> None:
        if self.kind not in ("logit_normal", "uniform"):
            raise ValueError(f"SigmaSampler.kind must be 'logit_normal' or 'uniform', got {self.kind!r}")
        if self.std <= 0 or self.shift <= 0 or not 0 <= self.min_sigma < 1:
            raise ValueError("SigmaSampler needs std > 0, shift > 0 and 0 <= min_sigma < 1")

    def __call__(
        self, shape: tuple[int, ...], generator: torch.Generator | None = None, device=None
    ) -> Tensor:
        if self.kind == "logit_normal":
            z = torch.randn(shape, generator=generator, device=device) * self.std + self.mean
            s = torch.sigmoid(z)
        else:
            s = torch.rand(shape, generator=generator, device=device)
        return shift_sigma(s, self.shift).clamp(self.min_sigma, 1.0)

    def per_modality(
        self, batch: int, names: list[str], generator: torch.Generator | None = None, device=None
    ) -> dict[str, Tensor]:
        """One independent σ per sample for each modality: {name: (B,)}."""
        return {n: self((batch,), generator, device) for n in names}
