"""The MoT core against a dense-mask oracle, the tower-isolation rules, RoPE on real time, presets."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cosmos3_robot.model import GenInput, MoT, count_parameters, preset
from cosmos3_robot.model.config import AttentionConfig, ModelConfig, TowerConfig
from cosmos3_robot.model.rope import rope_cos_sin, text_positions, time_positions, video_positions
from tests.builders import make_gen, tiny_model
from tests.reference import dense_forward


def _select(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x[mask]


def test_batched_padded_attention_matches_dense_mask_reference():
    m = tiny_model()
    b, ar_lens = 3, [9, 5, 7]
    ids = torch.randint(0, m.config.vocab_size, (b, max(ar_lens)))
    gen = make_gen(b, frames=[2, 1, 2], actions=[5, 3, 4], audio=[3, 2, 1])
    with torch.no_grad():
        r = m.reason(ids, lengths=torch.tensor(ar_lens))
        x_dm, pos_dm, dm_valid = m.embed_generator(r.cache, gen)
        h_dm = m.run_generator(r.cache, x_dm, pos_dm, dm_valid)
        for i in range(b):
            la = ar_lens[i]
            keep = dm_valid[i] if dm_valid is not None else torch.ones(x_dm.shape[1], dtype=torch.bool)
            ref_ar, ref_dm = dense_forward(
                m, m.embed_tokens(ids[i, :la]), text_positions(1, la)[0], x_dm[i][keep], pos_dm[i][:, keep]
            )
            torch.testing.assert_close(r.hidden[i, :la], ref_ar, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(h_dm[i][keep], ref_dm, atol=1e-5, rtol=1e-5)


def test_generator_tokens_never_change_reasoner_outputs():
    m = tiny_model()
    ids = torch.randint(0, m.config.vocab_size, (2, 8))
    gen1 = make_gen(2, [2, 2], [4, 4], [2, 2], seed=1)
    gen2 = make_gen(2, [2, 2], [4, 4], [2, 2], seed=2)
    with torch.no_grad():
        r1, v1 = m(ids, gen1)
        r2, v2 = m(ids, gen2)
    assert torch.equal(r1.logits, r2.logits) and torch.equal(r1.hidden, r2.hidden)
    for (k1, v1_), (k2, v2_) in zip(r1.cache.kv, r2.cache.kv, strict=True):
        assert torch.equal(k1, k2) and torch.equal(v1_, v2_)
    # ... while a Reasoner token does change the Generator.
    ids2 = ids.clone()
    ids2[:, 3] = (ids2[:, 3] + 1) % m.config.vocab_size
    with torch.no_grad():
        _, v3 = m(ids2, gen1)
    assert not torch.allclose(v1["video"], v3["video"])
    assert not torch.allclose(v1["action"], v3["action"])


def test_reasoning_never_reads_generator_weights():
    m = tiny_model()
    ids = torch.randint(0, m.config.vocab_size, (2, 7))
    with torch.no_grad():
        ref = m.reason(ids, lengths=torch.tensor([7, 4])).logits
        for p in m.generator_parameters():
            p.fill_(float("nan"))
        nan_gen = m.reason(ids, lengths=torch.tensor([7, 4])).logits
    assert torch.equal(ref, nan_gen)
    # A Reasoner-only model (Generator weights absent) loads the Reasoner weights and reasons alike.
    ro = MoT(dataclasses.replace(m.config, generator=None)).eval()
    missing, unexpected = ro.load_state_dict(m.state_dict(), strict=False)
    assert not missing and all(".dm." in k or not k.startswith("layers") for k in unexpected)
    assert not any(".dm." in n for n, _ in ro.named_parameters())
    with torch.no_grad():
        assert torch.equal(ro.reason(ids, lengths=torch.tensor([7, 4])).logits, ref)
    with pytest.raises(ValueError, match="no Generator"):
        ro.denoise(ro.reason(ids).cache, make_gen(2, [1, 1], [2, 2], [1, 1]))


def test_generator_with_reasoner_weights_reproduces_reasoner_hidden_states():
    m = tiny_model()
    with torch.no_grad():
        for layer in m.layers:
            layer.dm.load_state_dict(layer.ar.state_dict())
        m.norm_dm.load_state_dict(m.norm.state_dict())
    n = 9
    ids = torch.randint(0, m.config.vocab_size, (1, n))
    with torch.no_grad():
        full = m.reason(ids).hidden
        for k in range(1, n):
            # Prefix 0..k-1 in the Reasoner, token k as the single clean Generator token at position k:
            # the Generator's full attention over [prefix; token k] is the Reasoner's causal row k.
            cache = m.reason(ids[:, :k]).cache
            x = m.embed_tokens(ids[:, k : k + 1])
            pos = torch.full((1, 3, 1), float(k))
            h = m.run_generator(cache, x, pos, None)
            torch.testing.assert_close(h[0, 0], full[0, k], atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# RoPE on a real-time axis
# ------------------------------------------------------------------------------------------------


def _time_pairs(cfg: ModelConfig) -> torch.Tensor:
    from cosmos3_robot.model.rope import section_index

    return section_index(cfg.attention.head_dim, cfg.attention.rope_sections) == 0


def test_rope_same_time_rotation_across_rates_and_modalities():
    cfg = preset("sim-small")
    a = cfg.attention
    off = torch.tensor([100.0])
    rate = cfg.time_units_per_second
    video24 = video_positions(torch.tensor([[12 / 24]]), (2, 2), off, rate)  # frame 12 of 24 fps
    video10 = video_positions(torch.tensor([[5 / 10]]), (2, 2), off, rate)  # frame 5 of 10 fps
    act20 = time_positions(torch.tensor([[10 / 20]]), off, rate)  # sample 10 of a 20 Hz stream
    act50 = time_positions(torch.tensor([[25 / 50]]), off, rate)  # sample 25 of a 50 Hz stream
    tp = _time_pairs(cfg)
    tp = torch.cat([tp, tp])
    cs = [
        rope_cos_sin(p, a.head_dim, a.rope_theta, a.rope_sections) for p in (video24, video10, act20, act50)
    ]
    for cos, sin in cs[1:]:
        torch.testing.assert_close(cos[0, 0, tp], cs[0][0][0, 0, tp], atol=0, rtol=0)
        torch.testing.assert_close(sin[0, 0, tp], cs[0][1][0, 0, tp], atol=0, rtol=0)
    # The time axis carries the physical time: 0.5 s = 3 units at 6 units/s.
    assert float(act20[0, 0, 0]) == pytest.approx(103.0)


def test_rope_audio_and_action_tokens_have_no_spatial_rotation():
    cfg = preset("sim-small")
    a = cfg.attention
    pos = time_positions(torch.tensor([[0.0, 0.04, 0.5]]), torch.tensor([50.0]), cfg.time_units_per_second)
    assert torch.equal(pos[:, 1:], torch.zeros_like(pos[:, 1:]))
    cos, sin = rope_cos_sin(pos, a.head_dim, a.rope_theta, a.rope_sections)
    hw = ~torch.cat([_time_pairs(cfg), _time_pairs(cfg)])
    assert torch.equal(cos[..., hw], torch.ones_like(cos[..., hw]))
    assert torch.equal(sin[..., hw], torch.zeros_like(sin[..., hw]))


def test_rope_relative_position_property_on_time_axis():
    from cosmos3_robot.model.rope import rotate_heads, rotation_table

    cfg = preset("sim-small")
    a = cfg.attention
    torch.manual_seed(0)
    q = torch.randn(1, 1, 1, a.head_dim, dtype=torch.float64)
    k = torch.randn(1, 1, 1, a.head_dim, dtype=torch.float64)

    def score(tq: float, tk: float) -> float:
        pq = torch.tensor([[[tq], [2.0], [3.0]]])
        pk = torch.tensor([[[tk], [2.0], [3.0]]])
        cq, sq = rope_cos_sin(pq, a.head_dim, a.rope_theta, a.rope_sections)
        ck, sk = rope_cos_sin(pk, a.head_dim, a.rope_theta, a.rope_sections)
        return float(
            (rotate_heads(q, *rotation_table(cq, sq)) * rotate_heads(k, *rotation_table(ck, sk))).sum()
        )

    base = score(10.5, 7.0)
    for shift in (1.0, 13.25, 200.0):
        assert score(10.5 + shift, 7.0 + shift) == pytest.approx(base, abs=2e-4)
    assert abs(score(10.5, 7.0) - score(10.5, 9.0)) > 1e-3


def test_text_positions_reduce_to_1d_rope():
    cfg = preset("tiny")
    a = cfg.attention
    cos, sin = rope_cos_sin(text_positions(1, 5), a.head_dim, a.rope_theta, a.rope_sections)
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, a.head_dim, 2).float() / a.head_dim))
    ang = torch.arange(5).float()[:, None] * inv
    torch.testing.assert_close(cos[0], torch.cat([ang, ang], -1).cos())


# ------------------------------------------------------------------------------------------------
# Presets and bad input
# ------------------------------------------------------------------------------------------------


def test_preset_sizes():
    assert count_parameters(MoT(preset("tiny"))) < 2_000_000
    with torch.device("meta"):
        nano = count_parameters(MoT(preset("nano")))
        sup = count_parameters(MoT(preset("super")))
    # Released Cosmos 3 Nano is 8B + 8B, Super 32B + 32B (language towers and embeddings; the ViT
    # adds ~0.6 B on top when present).
    assert 14.5e9 < nano < 17e9, nano
    assert 60e9 < sup < 68e9, sup


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="num_kv_heads"):
        AttentionConfig(num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match="does not divide"):
        ModelConfig(attention=AttentionConfig(head_dim=None, num_heads=7))
    with pytest.raises(ValueError, match="hidden_size"):
        TowerConfig(hidden_size=0)
    with pytest.raises(ValueError, match="unknown keys"):
        ModelConfig.from_dict({"vocab_size": 10, "bogus": 1})
    cfg = preset("sim-small")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_bad_generator_input_raises():
    m = tiny_model()
    ids = torch.randint(0, m.config.vocab_size, (2, 5))
    cache = m.reason(ids).cache
    good = make_gen(2, [2, 2], [3, 3], [2, 2])
    with pytest.raises(ValueError, match="sigma must lie"):
        bad = dataclasses.replace(good.action, sigma=good.action.sigma + 1.5)
        m.denoise(cache, dataclasses.replace(good, action=bad))
    with pytest.raises(ValueError, match="non-finite"):
        t = good.video.time_s.clone()
        t[0, 0] = float("nan")
        m.denoise(cache, dataclasses.replace(good, video=dataclasses.replace(good.video, time_s=t)))
    with pytest.raises(ValueError, match="channels"):
        m.denoise(
            cache,
            dataclasses.replace(good, audio=dataclasses.replace(good.audio, latents=torch.zeros(2, 2, 3))),
        )
    with pytest.raises(ValueError, match="time_s must have shape"):
        m.denoise(
            cache, dataclasses.replace(good, audio=dataclasses.replace(good.audio, time_s=torch.zeros(2, 5)))
        )
    with pytest.raises(ValueError, match="modality"):
        GenInput.from_dict({"video": good.video, "smell": good.audio})
    with pytest.raises(ValueError, match="clean"):
        s = good.audio.sigma.clone()
        s[:] = 0.5
        m.denoise(cache, dataclasses.replace(good, audio=dataclasses.replace(good.audio, sigma=s)))
    with pytest.raises(ValueError, match="batch"):
        m.denoise(m.reason(ids[:1]).cache, good)
    with pytest.raises(ValueError, match="embodiment"):
        m.denoise(cache, dataclasses.replace(good, action=dataclasses.replace(good.action, embodiment=None)))


def test_noise_level_embedding_per_token_on_noisy_tokens_only():
    """The embedding MLP runs once per distinct σ; the result must equal embedding every token alone."""
    m = tiny_model()
    gen = make_gen(3, frames=[2, 3, 1], actions=[4, 2, 3], audio=[2, 2, 1])
    # Per-token σ: every video token of sample 0 gets its own level.
    vid = gen.video
    sigma = torch.where(
        vid.noisy, torch.rand(vid.sigma.shape, generator=torch.Generator().manual_seed(3)), 0.0
    )
    gen = dataclasses.replace(gen, video=dataclasses.replace(vid, sigma=sigma))
    cache = m.reason(torch.randint(0, m.config.vocab_size, (3, 5)), logits=False).cache
    with torch.no_grad():
        x, _ = m._embed_tokens(cache, gen, validate=True)
        parts = []
        for name, s in gen.items():
            base = {"video": lambda s: m.video_in(s.latents),
                    "audio": lambda s: m.audio_in(s.latents) + m.audio_embed,
                    "action": lambda s: m.action_in(s.latents, s.embodiment) + m.action_embed}[name](s)  # fmt: skip
            tok = base.clone()
            for i in range(s.batch):
                for j in range(s.length):
                    if s.noisy[i, j]:
                        tok[i, j] += m.time_embed(s.sigma[i, j : j + 1] * m.config.sigma_scale)[0]
            parts.append(tok)
    torch.testing.assert_close(x, torch.cat(parts, dim=1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rmsnorm_matches_transformers_qwen3(dtype):
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    from cosmos3_robot.model.layers import RMSNorm

    torch.manual_seed(0)
    ours, theirs = RMSNorm(64, eps=1e-6), Qwen3RMSNorm(64, eps=1e-6)
    w = 1 + 0.3 * torch.randn(64)
    ours.weight.data, theirs.weight.data = w.clone(), w.clone()
    ours, theirs = ours.to(dtype), theirs.to(dtype)
    for shape in [(3, 7, 64), (2, 5, 4, 64)]:
        x = (4 * torch.randn(shape)).to(dtype)
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-6 if dtype == torch.float32 else 0, atol=0)
