"""Flow matching: exact targets, per-modality σ, samplers against analytic flows, cached sampling."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from cosmos3_robot.flow import (
    EulerSampler,
    HeunSampler,
    SigmaSampler,
    add_noise,
    flow_loss,
    make_sigmas,
    shift_sigma,
    velocity_target,
)
from cosmos3_robot.model import GenInput, MoT, ReasonerCache, TextCache, preset
from cosmos3_robot.tasks.sampling import Prompt, sample
from tests.builders import make_gen


def test_target_is_exact_velocity_of_the_path():
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(4, 10, 3, generator=g, dtype=torch.float64)
    eps = torch.randn(4, 10, 3, generator=g, dtype=torch.float64)
    # The path is linear in σ, so any finite difference is the exact derivative.
    s1, s2 = torch.full((4,), 0.2, dtype=torch.float64), torch.full((4,), 0.7, dtype=torch.float64)
    fd = (add_noise(x0, eps, s2) - add_noise(x0, eps, s1)) / 0.5
    torch.testing.assert_close(fd, velocity_target(x0, eps), atol=1e-12, rtol=0)
    assert torch.equal(velocity_target(x0, eps), eps - x0)
    assert torch.equal(add_noise(x0, eps, torch.zeros(4, dtype=torch.float64)), x0)
    assert torch.equal(add_noise(x0, eps, torch.ones(4, dtype=torch.float64)), eps)


def test_sigma_is_independent_across_modalities():
    names = ["video", "audio", "action"]
    sig = SigmaSampler(kind="logit_normal", shift=3.0).per_modality(
        8192, names, torch.Generator().manual_seed(0)
    )
    for i, a in enumerate(names):
        assert sig[a].shape == (8192,) and 0 < sig[a].min() and sig[a].max() <= 1
        for b in names[i + 1 :]:
            c = torch.corrcoef(torch.stack([sig[a], sig[b]]))[0, 1]
            assert abs(float(c)) < 0.05, (a, b, float(c))
            assert not torch.equal(sig[a], sig[b])
    # The shift moves mass toward noise: median of shifted logit-normal is shift/(1+shift) = 0.75.
    assert float(sig["video"].median()) == pytest.approx(0.75, abs=0.02)
    u = SigmaSampler(kind="uniform")((20000,), torch.Generator().manual_seed(1))
    assert float(u.mean()) == pytest.approx(0.5, abs=0.01)


def test_loss_covers_only_noised_valid_tokens_with_weights():
    pred = {"video": torch.zeros(2, 4, 3), "action": torch.zeros(2, 3, 2)}
    target = {"video": torch.ones(2, 4, 3), "action": torch.full((2, 3, 2), 2.0)}
    noisy = {"video": torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]]).bool(), "action": torch.ones(2, 3).bool()}
    target["video"][~noisy["video"]] = 100.0  # clean tokens: any error there must be ignored
    valid = {"video": None, "action": torch.tensor([[1, 1, 0], [1, 0, 0]]).bool()}
    target["action"][~valid["action"]] = 100.0
    total, parts = flow_loss(pred, target, noisy, valid, weights={"video": 1.0, "action": 0.5})
    assert float(parts["video"]) == pytest.approx(1.0)
    assert float(parts["action"]) == pytest.approx(4.0)
    assert float(total) == pytest.approx(1.0 + 0.5 * 4.0)


def _mixture_velocity(x: torch.Tensor, sigma: float, mus, stds, weights) -> torch.Tensor:
    """Exact marginal velocity E[ε − x₀ | x_σ] for x₀ ~ Σ π_k N(μ_k, s_k² I), ε ~ N(0, I)."""
    logps, vs = [], []
    for mu, s, w in zip(mus, stds, weights, strict=True):
        mu = torch.tensor(mu, dtype=x.dtype)
        var = sigma**2 + (1 - sigma) ** 2 * s**2
        r = x - (1 - sigma) * mu
        logps.append(math.log(w) - 0.5 * (r**2).sum(-1) / var - x.shape[-1] * 0.5 * math.log(var))
        e_eps = sigma / var * r
        e_x0 = mu + (1 - sigma) * s**2 / var * r
        vs.append(e_eps - e_x0)
    post = torch.softmax(torch.stack(logps, -1), -1)  # (N, K)
    return (post[..., None] * torch.stack(vs, -2)).sum(-2)


def test_euler_on_exact_2d_flow_reaches_target_mixture():
    mus, stds, weights = [(-2.0, 1.0), (3.0, -1.0)], [0.3, 0.5], [0.3, 0.7]
    x = torch.randn(20000, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s = EulerSampler()
    s.set_timesteps(200)
    while not s.done:
        x = s.step(_mixture_velocity(x, s.sigma, mus, stds, weights), x)
    d0 = (x - torch.tensor(mus[0], dtype=x.dtype)).norm(dim=-1)
    d1 = (x - torch.tensor(mus[1], dtype=x.dtype)).norm(dim=-1)
    in0 = d0 < d1
    assert float(in0.double().mean()) == pytest.approx(0.3, abs=0.015)
    for mask, mu, sd in ((in0, mus[0], stds[0]), (~in0, mus[1], stds[1])):
        pts = x[mask]
        torch.testing.assert_close(pts.mean(0), torch.tensor(mu, dtype=x.dtype), atol=0.03, rtol=0)
        torch.testing.assert_close(pts.std(0), torch.tensor([sd, sd], dtype=x.dtype), atol=0.04, rtol=0)


def test_heun_is_second_order_on_gaussian_flow():
    # For x0 ~ N(μ, s²) the flow maps noise x1 to exactly μ + s·x1.
    mu, sd = 1.5, 0.4
    x1 = torch.linspace(-2, 2, 9, dtype=torch.float64)[:, None]
    exact = mu + sd * x1

    def run(sampler, steps):
        x = x1.clone()
        sampler.set_timesteps(steps, shift=2.0)
        calls = 0
        while not sampler.done:
            x = sampler.step(_mixture_velocity(x, sampler.sigma, [(mu,)], [sd], [1.0]), x)
            calls += 1
        return float((x - exact).abs().max()), calls

    e_euler, calls_euler = run(EulerSampler(), 8)
    e_heun, calls_heun = run(HeunSampler(), 8)
    e_heun2, _ = run(HeunSampler(), 16)
    assert calls_euler == 8 and calls_heun == 16
    assert e_heun < e_euler / 5
    assert e_heun2 < e_heun / 3  # halving the step cuts the error ~4x


def test_sampler_bad_input():
    with pytest.raises(ValueError, match="positive"):
        make_sigmas(0)
    with pytest.raises(ValueError, match="decreasing"):
        EulerSampler().set_timesteps(3, sigmas=torch.tensor([1.0, 0.3, 0.5, 0.0]))
    with pytest.raises(ValueError, match="set_timesteps"):
        EulerSampler().step(torch.zeros(1), torch.zeros(1))
    sig = make_sigmas(10, shift=3.0)
    assert sig[0] == 1 and sig[-1] == 0 and bool((sig[1:] < sig[:-1]).all())
    torch.testing.assert_close(sig, shift_sigma(torch.linspace(1, 0, 11), 3.0))


# ------------------------------------------------------------------------------------------------
# Cached Reasoner == recompute-everything, with batch, guidance and audio
# ------------------------------------------------------------------------------------------------


def _model() -> MoT:
    torch.manual_seed(0)
    cfg = dataclasses.replace(preset("tiny"), null_condition=True)
    return MoT(cfg).eval()


def _prompts(b: int, vocab: int):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, vocab, (b, 9), generator=g)
    cond = Prompt(ids, lengths=torch.tensor([9, 6, 8][:b]))
    null = Prompt(torch.zeros(b, 1, dtype=torch.long))
    return cond, null


# Euler without guidance takes the fused path (`SamplingRequest.euler_step`: velocity and update in
# one call); the recomputed side always integrates through the sampler's own `step`.
@pytest.mark.parametrize("guidance", [1.0, 3.0])
@pytest.mark.parametrize("sampler_cls", [EulerSampler, HeunSampler])
def test_cached_generation_equals_recomputed_generation(sampler_cls, guidance):
    m = _model()
    b = 3
    gen = make_gen(b, frames=[2, 2, 1], actions=[5, 4, 5], audio=[3, 3, 2])
    # audio generated too (make_gen marks audio clean; generate it here)
    gen = dataclasses.replace(
        gen, audio=dataclasses.replace(gen.audio, noisy=torch.ones_like(gen.audio.noisy))
    )
    cond, null = _prompts(b, m.config.vocab_size)
    kw = dict(num_steps=4, shift=2.0, guidance=guidance, null_prompt=null)
    cached = sample(m, gen, sampler_cls(), cond, generator=torch.Generator().manual_seed(5), **kw)
    recomputed = sample(
        m, gen, sampler_cls(), cond, generator=torch.Generator().manual_seed(5), reuse_cache=False, **kw
    )
    for n in cached:
        torch.testing.assert_close(cached[n], recomputed[n], atol=1e-5, rtol=1e-5)
    # Clean tokens untouched, generated ones moved.
    clean = ~gen.video.noisy
    assert torch.equal(cached["video"][clean], gen.video.latents[clean])
    assert not torch.allclose(cached["action"], gen.action.latents)


def test_guidance_batch_is_exactly_separate_calls():
    """The [cond; uncond] batched call equals two separate Generator calls (padding is masked)."""
    from cosmos3_robot.model import GenInput, ReasonerCache

    m = _model()
    gen = make_gen(2, [2, 2], [3, 3], [2, 2])
    cond, null = _prompts(2, m.config.vocab_size)
    with torch.no_grad():
        c, u = cond.run(m), null.run(m)
        both = m.denoise(ReasonerCache.cat([c, u]), GenInput.cat([gen, gen]))
        vc, vu = m.denoise(c, gen), m.denoise(u, gen)
    for n in vc:
        torch.testing.assert_close(both[n][:2], vc[n], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(both[n][2:], vu[n], atol=1e-5, rtol=1e-5)


def test_cache_with_room_is_overwritten_each_step_and_checked():
    """Steps write their keys into the request buffer in place: each call must equal the concatenating
    path, whatever the previous call left there; a wrong size or autograd is refused."""
    m = _model()
    gen = make_gen(2, [2, 1], [3, 2], [2, 2])
    cond, _ = _prompts(2, m.config.vocab_size)
    ld = gen.length
    with torch.no_grad():
        cache = cond.run(m)
        roomy = cache.with_room(ld)
        assert roomy.length == cache.length and roomy.kv[0][0].shape[2] == cache.length + ld
        for seed in (1, 2, 1):
            g = torch.Generator().manual_seed(seed)
            step = gen.replace_latents({n: torch.randn(s.latents.shape, generator=g) for n, s in gen.items()})
            want, got = m.denoise(cache, step), m.denoise(roomy, step)
            for n in want:
                torch.testing.assert_close(got[n], want[n], atol=1e-6, rtol=1e-6)
        with pytest.raises(ValueError, match="room for"):
            m.denoise(cache.with_room(ld + 1), gen)
        for (k, v), (k0, v0) in zip(roomy.reasoner_kv, cache.kv, strict=True):  # never written
            assert torch.equal(k, k0) and torch.equal(v, v0)
    with pytest.raises(ValueError, match="written in place"):
        m.train()
        m.denoise(roomy, gen)


def test_noisy_only_outputs_equal_full_outputs_at_noisy_tokens():
    """Skipping clean tokens' queries in the last layer changes no velocity that a sampler reads."""
    m = _model()
    gen = make_gen(3, frames=[2, 3, 1], actions=[4, 2, 3], audio=[2, 2, 1])  # audio clean, padding
    noisy = gen.action.noisy.clone()
    noisy[1, 0] = False  # a pattern that differs across the batch
    gen = dataclasses.replace(
        gen, action=dataclasses.replace(gen.action, noisy=noisy, sigma=gen.action.sigma * noisy)
    )
    cond, _ = _prompts(3, m.config.vocab_size)
    with torch.no_grad():
        cache = cond.run(m)
        full, part = m.denoise(cache, gen), m.denoise(cache, gen, noisy_only=True)
    for name, s in gen.items():
        union = s.noisy.any(dim=0)[None].expand_as(s.noisy)
        torch.testing.assert_close(part[name][union], full[name][union], atol=1e-6, rtol=1e-6)
        assert torch.equal(part[name][~union], torch.zeros_like(part[name][~union]))
    assert not gen.audio.noisy.any() and torch.equal(part["audio"], torch.zeros_like(part["audio"]))


def test_planned_step_equals_denoise_with_per_token_sigma():
    """A sampling step from a plan (noise-level embeddings of the schedule, computed once) equals
    `denoise` reading σ from every token, for levels in the schedule and outside it."""
    m = _model()
    gen = make_gen(3, frames=[2, 3, 1], actions=[4, 2, 3], audio=[2, 2, 1])  # padding, audio clean
    noisy = gen.action.noisy.clone()
    noisy[1, 0] = False  # a pattern that differs across the batch
    gen = dataclasses.replace(
        gen, action=dataclasses.replace(gen.action, noisy=noisy, sigma=gen.action.sigma * noisy)
    )
    cond, _ = _prompts(3, m.config.vocab_size)
    sigmas = EulerSampler().set_timesteps(4, shift=3.0)
    with torch.no_grad():
        cache = cond.run(m)
        plan = m.plan_steps(gen, sigmas)
        assert plan.outputs is not None and plan.dm_valid is not None
        rope = m.generator_rope(cache.with_room(gen.length), gen)
        # the schedule's levels are looked up, not embedded again
        assert float(sigmas[0]) in plan.levels and float(sigmas[2]) in plan.levels
        for sigma in [float(sigmas[0]), float(sigmas[2]), 0.1234]:  # the last is not in the schedule
            per_token = gen.replace_latents(
                {n: s.latents for n, s in gen.items()},
                {n: s.noisy.float() * sigma for n, s in gen.items()},
            )
            want = m.denoise(cache, per_token, noisy_only=True)
            got = m.denoise_step(cache, gen, plan, sigma)
            roomy = m.denoise_step(cache.with_room(gen.length), gen, plan, sigma, rope)
            request = m.prepare_request(cache, gen, sigmas).velocity(gen, sigma)  # the protocol's owner
            for n in want:
                torch.testing.assert_close(got[n], want[n], atol=1e-6, rtol=1e-5)
                torch.testing.assert_close(roomy[n], want[n], atol=1e-6, rtol=1e-5)
                torch.testing.assert_close(request[n], want[n], atol=1e-6, rtol=1e-5)
        with pytest.raises(ValueError, match="plan was built for"):  # guidance doubles the input
            m.denoise_step(
                ReasonerCache.cat([cache, cache]), GenInput.cat([gen, gen]), plan, float(sigmas[0])
            )
    bad = dataclasses.replace(
        gen, action=dataclasses.replace(gen.action, embodiment=gen.action.embodiment + 9)
    )
    with pytest.raises(ValueError, match="embodiment ids"):
        m.plan_steps(bad, sigmas)  # the plan validates the request, once


def test_guidance_bad_input():
    m = _model()
    gen = make_gen(2, [2, 2], [3, 3], [2, 2])
    cond, null = _prompts(2, m.config.vocab_size)
    with pytest.raises(ValueError, match="null_prompt"):
        sample(m, gen, EulerSampler(), cond, num_steps=2, guidance=2.0)
    m2 = MoT(preset("tiny")).eval()
    with pytest.raises(ValueError, match="null condition"):
        sample(m2, gen, EulerSampler(), cond, num_steps=2, guidance=2.0, null_prompt=null)
    with pytest.raises(ValueError, match="positive"):
        sample(m, gen, EulerSampler(), cond, num_steps=0)
    with pytest.raises(ValueError, match="batch"):
        sample(m, gen, EulerSampler(), Prompt(cond.input_ids[:1]), num_steps=2)


def test_incremental_text_decoding_equals_full_forward():
    """KV-cached decoding, batched with different prompt lengths, equals re-running the prompt."""
    m = _model()
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([6, 3])
    ids = torch.randint(0, m.config.vocab_size, (2, 6), generator=g)
    new = torch.randint(0, m.config.vocab_size, (2, 4), generator=g)
    with torch.no_grad():
        out = m.reason(ids, lengths=lengths, keep_text_kv=True)
        cache = TextCache.start(out, max_new_tokens=4)
        for step in range(4):
            logits = m.decode(new[:, step], cache)
            for i in range(2):
                seq = torch.cat([ids[i, : lengths[i]], new[i, : step + 1]])[None]
                ref = m.reason(seq).logits[0, -1]
                torch.testing.assert_close(logits[i], ref, atol=1e-5, rtol=1e-5)
        with pytest.raises(ValueError, match="full"):
            m.decode(new[:, 0], cache)
