"""One sampling request: the protocol of a cached denoising loop, owned by one object.

    request = model.prepare_request(cache, gen, sigmas)   # validate once, plan once
    for sigma in sigmas[:-1]:
        v = request.velocity(step_input, sigma)           # Generator tower only
        # or, for an Euler sampler: x = request.euler_step(step_input, sigma), velocity and update in one

What a request keeps fixed across its steps, computed once in `MoT.prepare_request`:
  - the Reasoner cache laid out as [K_ar | room for this request's Generator keys] per layer
    (`ReasonerCache.with_room`), so a step writes its keys in place instead of concatenating;
  - the plan (`MoT.plan_steps`): noisy layout, padding, which outputs are read, and the noise-level
    embedding of every σ of the schedule;
  - the rotary tables of the Generator positions (they depend on the cache and the layout only);
  - each step's σ_next − σ as a tensor, for `euler_step` (a tensor, so that a compiled step is one
    program for every step).

Callers cannot replay the protocol in the wrong order or with a stale piece (as openpi's
`sample_actions` owns its KV-once loop).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from cosmos3_robot.model.caches import ReasonerCache, StepPlan
from cosmos3_robot.model.sequence import GenInput

if TYPE_CHECKING:
    from cosmos3_robot.model.mot import MoT


class SamplingRequest:
    def __init__(self, model: MoT, cache: ReasonerCache, gen: GenInput, sigmas: Tensor):
        self.model = model
        self.plan: StepPlan = model.plan_steps(gen, sigmas)  # validates the request, once
        self.cache = cache.with_room(gen.length)
        self.rope = model.generator_rope(self.cache, gen, validate=False)
        s = sigmas.detach().float().cpu()
        self.increments = dict(zip(s[:-1].tolist(), (s[1:] - s[:-1]).unbind(0), strict=True))

    def velocity(self, gen: GenInput, sigma: float) -> dict[str, Tensor]:
        """The predicted velocity of one step, {stream: (B, N, width)}: `gen` is the request's input
        with the step's latents (same layout as planned); every noisy token is at level `sigma`."""
        return self.model.denoise_step(self.cache, gen, self.plan, sigma, self.rope)

    def euler_step(self, gen: GenInput, sigma: float) -> dict[str, Tensor]:
        """One Euler step from level `sigma` to the next level of the schedule: the latents of `gen`
        plus (σ_next − σ)·velocity on the noisy tokens, clean tokens unchanged, {stream: (B, N, width)}.
        The same arithmetic as `EulerSampler.step` after `velocity`, in one call (`MoT.euler_step`)."""
        h = self.increments.get(sigma)
        if h is None:
            raise ValueError(f"sigma={sigma} is not a level of this request's schedule (or is its last, 0)")
        self.model.check_step(self.cache, gen, self.plan)
        return self.model.euler_step(self.cache, gen, self.plan, self.plan.levels[sigma], h, self.rope)


def euler_update(gen: GenInput, velocity: dict[str, Tensor], h: Tensor) -> dict[str, Tensor]:
    """x + h·v on the noisy tokens of every stream of `gen`, its latents elsewhere."""
    return {
        n: torch.where(s.noisy[..., None], s.latents + h * velocity[n], s.latents) for n, s in gen.items()
    }
