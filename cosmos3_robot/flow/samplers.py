"""Samplers for the flow ODE dx/dσ = v(x, σ), integrated from σ = 1 (noise) to σ = 0 (data).

Small interface, as Diffusers' schedulers: `set_timesteps(n, shift)` then, until `done`, evaluate
the model at `sampler.sigma` and call `x = sampler.step(v, x)`. `x` and `v` may be tensors or dicts
of tensors (one per modality). Euler is one model call per step; Heun (2nd order) two, the last
corrector included (a rectified-flow velocity is defined at σ = 0, unlike an EDM denoiser's
σ-scaled output, so the final step stays second order).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from cosmos3_robot.flow.paths import shift_sigma


def _map(fn, *trees: Any) -> Any:
    if isinstance(trees[0], dict):
        return {k: fn(*(t[k] for t in trees)) for k in trees[0]}
    return fn(*trees)


def make_sigmas(num_steps: int, shift: float = 1.0, sigma_max: float = 1.0) -> Tensor:
    """num_steps + 1 noise levels from sigma_max down to 0, shifted; strictly decreasing."""
    if not isinstance(num_steps, int) or num_steps <= 0:
        raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
    if not 0 < sigma_max <= 1:
        raise ValueError(f"sigma_max must be in (0, 1], got {sigma_max}")
    s = torch.linspace(sigma_max, 0.0, num_steps + 1, dtype=torch.float64)
    return shift_sigma(s, shift).float()


class Sampler:
    order = 1

    def __init__(self) -> None:
        self.sigmas: Tensor | None = None
        self.index = 0

    def set_timesteps(self, num_steps: int, shift: float = 1.0, sigmas: Tensor | None = None) -> Tensor:
        """Use `num_steps` shifted uniform levels, or an explicit monotone schedule ending at 0."""
        if sigmas is None:
            sigmas = make_sigmas(num_steps, shift)
        else:
            sigmas = torch.as_tensor(sigmas, dtype=torch.float32)
            if sigmas.ndim != 1 or len(sigmas) < 2:
                raise ValueError("sigmas must be a 1-D schedule of at least two levels")
            if not bool((sigmas[1:] < sigmas[:-1]).all()):
                raise ValueError(f"sigmas must be strictly decreasing (noise → data), got {sigmas.tolist()}")
            if sigmas[0] > 1 or sigmas[-1] != 0:
                raise ValueError("sigmas must start at <= 1 and end at exactly 0")
        self.sigmas = sigmas
        self.index = 0
        self._reset()
        return sigmas

    def _reset(self) -> None:
        pass

    def _check(self) -> None:
        if self.sigmas is None:
            raise ValueError("call set_timesteps(num_steps) before sampling")
        if self.done:
            raise ValueError("the sampler has already reached sigma = 0; call set_timesteps again")

    @property
    def num_steps(self) -> int:
        return len(self.sigmas) - 1

    @property
    def done(self) -> bool:
        return self.index >= self.num_steps

    @property
    def sigma(self) -> float:
        """The noise level at which the model must be evaluated next."""
        self._check()
        return float(self.sigmas[self.index])

    def step(self, v: Any, x: Any) -> Any:
        raise NotImplementedError


class EulerSampler(Sampler):
    """x_{i+1} = x_i + (σ_{i+1} − σ_i)·v(x_i, σ_i)."""

    def step(self, v: Any, x: Any) -> Any:
        self._check()
        h = float(self.sigmas[self.index + 1] - self.sigmas[self.index])
        self.index += 1
        return _map(lambda xi, vi: xi + h * vi, x, v)

    def stepped(self) -> None:
        """Move to the next level after the caller made this step's update itself (the same
        x + (σ_{i+1} − σ_i)·v, e.g. `SamplingRequest.euler_step`: velocity and update in one call)."""
        self._check()
        self.index += 1


class HeunSampler(Sampler):
    """Heun's 2nd-order method (the trapezoid rule with an Euler predictor).

    Model calls alternate: at (x_i, σ_i) → predictor; at (x̃, σ_{i+1}) → corrector. `sigma` reports
    the level of the pending call.
    """

    order = 2

    def _reset(self) -> None:
        self._pending: tuple[Any, Any] | None = None  # (x_i, v_i) while a corrector call is due

    @property
    def sigma(self) -> float:
        self._check()
        return float(self.sigmas[self.index + (1 if self._pending is not None else 0)])

    def step(self, v: Any, x: Any) -> Any:
        self._check()
        s0, s1 = float(self.sigmas[self.index]), float(self.sigmas[self.index + 1])
        h = s1 - s0
        if self._pending is None:
            pred = _map(lambda xi, vi: xi + h * vi, x, v)
            self._pending = (x, v)
            return pred
        x0, v0 = self._pending
        self._pending = None
        self.index += 1
        return _map(lambda xi, va, vb: xi + h * 0.5 * (va + vb), x0, v0, v)


SAMPLERS = {"euler": EulerSampler, "heun": HeunSampler}


def make_sampler(name: str) -> Sampler:
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}; choose one of {sorted(SAMPLERS)}")
    return SAMPLERS[name]()


def guided(v_cond: Any, v_uncond: Any, scale: float) -> Any:
    """Classifier-free guidance: v_u + s·(v_c − v_u)."""
    return _map(lambda c, u: u + scale * (c - u), v_cond, v_uncond)
