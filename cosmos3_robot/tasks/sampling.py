"""Sampling the Generator with a cached Reasoner.

The Reasoner never reads Generator tokens, so its per-layer K/V are fixed for a whole request. We run
it once (twice under classifier-free guidance: conditional and unconditional prompts) and every
denoising step runs only the Generator tower against the cached K/V. Conditional and unconditional
passes are one batched call: [cond; uncond] caches stacked along the batch, padded with masked keys.
This holds for any batch size, with guidance, with video + audio + actions in one sequence.

Each step asks a `SamplingRequest` (`MoT.prepare_request`: the cache with room for the Generator
keys, the noisy layout, the noise-level embeddings of the schedule, the rotations) for its velocity,
or, with an Euler sampler and no guidance, for the whole step (velocity and update in one call).
`reuse_cache=False` instead
recomputes the prompt's Reasoner pass, the positions and every token's noise embedding at every step
(`MoT.denoise`) — the behaviour of Diffusers' Cosmos 3 pipeline — and exists as the independent
reference for tests and benchmarks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cosmos3_robot.flow import EulerSampler, Sampler, guided
from cosmos3_robot.model import GenInput, MoT, ReasonerCache


@dataclass
class Prompt:
    """A batch of Reasoner inputs (right-padded token ids and their lengths, or embeddings)."""

    input_ids: Tensor | None = None
    lengths: Tensor | None = None
    inputs_embeds: Tensor | None = None
    positions: Tensor | None = None
    deepstack: list[Tensor] | None = None

    def reasoned(self, model: MoT) -> ReasonedPrompt:
        """Run the Reasoner now, for reuse by several requests (no autograd graph is kept)."""
        with torch.no_grad():
            return ReasonedPrompt(self.run(model))

    def run(self, model: MoT) -> ReasonerCache:
        return model.reason(
            self.input_ids,
            lengths=self.lengths,
            inputs_embeds=self.inputs_embeds,
            positions=self.positions,
            deepstack=self.deepstack,
            logits=False,
        ).cache


@dataclass
class ReasonedPrompt:
    """A prompt whose Reasoner pass is done: `run` returns its cache without running the model.

    For requests that share an instruction, e.g. a closed-loop policy re-planning under one task
    text: the Reasoner runs once for all of them. The cache is only read (`with_room` copies it).
    """

    cache: ReasonerCache

    def run(self, model: MoT) -> ReasonerCache:
        return self.cache


def initial_latents(
    gen: GenInput, generator: torch.Generator | None = None, noise_scale: float = 1.0
) -> dict[str, Tensor]:
    """Clean tokens keep their latents; noisy tokens start as N(0, I) noise (σ = 1), times
    `noise_scale` (< 1: low-temperature sampling, toward the flow's image of the mean)."""
    out = {}
    for name, s in gen.items():
        noise = torch.randn(s.latents.shape, generator=generator, dtype=s.latents.dtype).to(s.latents.device)
        noise = noise * noise_scale if noise_scale != 1.0 else noise
        out[name] = torch.where(s.noisy[..., None], noise, s.latents)
    return out


@torch.no_grad()
def sample(
    model: MoT,
    gen: GenInput,
    sampler: Sampler,
    prompt: Prompt | ReasonedPrompt,
    *,
    num_steps: int,
    shift: float = 1.0,
    guidance: float = 1.0,
    null_prompt: Prompt | ReasonedPrompt | None = None,
    noise: dict[str, Tensor] | None = None,
    generator: torch.Generator | None = None,
    reuse_cache: bool = True,
    noise_scale: float = 1.0,
) -> dict[str, Tensor]:
    """Integrate the Generator's flow from noise to data on the noisy tokens of `gen`; the starting
    noise is scaled by `noise_scale` (1: the trained distribution).

    Returns {stream: (B, N, C) latents}: clean tokens unchanged, noisy tokens generated.
    """
    if guidance != 1.0:
        if null_prompt is None:
            raise ValueError("guidance != 1 needs a null_prompt (the unconditional Reasoner input)")
        if not model.config.null_condition:
            raise ValueError(
                "classifier-free guidance needs a model trained with a null condition "
                "(ModelConfig.null_condition is False); use guidance=1.0"
            )
    sampler.set_timesteps(num_steps, shift)
    b = gen.batch
    x = (
        initial_latents(gen, generator, noise_scale)
        if noise is None
        else {n: torch.where(s.noisy[..., None], noise[n], s.latents) for n, s in gen.items()}
    )
    noisy = {n: s.noisy for n, s in gen.items()}
    noisy_f = {n: s.noisy.to(s.sigma.dtype) for n, s in gen.items()}
    use_cfg = guidance != 1.0

    def step_input(sigma: float) -> GenInput:
        step_in = gen.replace_latents(x, {n: m * sigma for n, m in noisy_f.items()})
        return GenInput.cat([step_in, step_in]) if use_cfg else step_in

    first = step_input(sampler.sigma)

    def caches() -> ReasonerCache:
        c = prompt.run(model)
        if c.batch != b:
            raise ValueError(f"the prompt has batch {c.batch} but the Generator input has batch {b}")
        if use_cfg:
            u = null_prompt.run(model)
            if u.batch != b:
                raise ValueError(f"the null prompt has batch {u.batch} but the Generator input has batch {b}")
            c = ReasonerCache.cat([c, u])
        return c

    # The cached path validates the first step's input once (noise included) and plans what every
    # step shares.
    request = model.prepare_request(caches(), first, sampler.sigmas) if reuse_cache else None
    # Euler, cached: velocity and update in one call; σ fields are unread there (`MoT.denoise_step`).
    fused = request is not None and not use_cfg and isinstance(sampler, EulerSampler)
    first_step = True
    while not sampler.done:
        sigma = sampler.sigma
        if fused:
            x = request.euler_step(gen.replace_latents(x), sigma)
            sampler.stepped()
            continue
        step_in = step_input(sigma)
        if reuse_cache:
            v = request.velocity(step_in, sigma)
        else:  # Diffusers' way: the prompt's Reasoner pass, positions, rotations and per-token noise
            # embeddings recomputed every step (inputs validated once)
            v = model.denoise(caches(), step_in, validate=first_step, noisy_only=True)
        first_step = False
        if use_cfg:
            v = guided({n: t[:b] for n, t in v.items()}, {n: t[b:] for n, t in v.items()}, guidance)
        x_new = sampler.step(v, x)
        x = {n: torch.where(noisy[n][..., None], x_new[n], x[n]) for n in x}
    return x
