"""Fused CPU kernels: RMSNorm and QK-norm + rotation equal the maths, and decline what they do not cover."""

from __future__ import annotations

import copy
import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from cosmos3_robot.infra import cpu_kernels
from cosmos3_robot.infra.cpu_pack import CPUTowerAttention, FusedRMSNorm, pack_for_cpu, unpack
from cosmos3_robot.model.caches import TextCache
from cosmos3_robot.model.rope import rotation_table
from tests.builders import make_gen, tiny_model

needs_kernels = pytest.mark.skipif(not cpu_kernels.available(), reason="no C compiler: the kernels are off")


def rms_reference(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x64 = x.double()
    return (x64 / torch.sqrt(x64.square().mean(-1, keepdim=True) + eps) * w.double()).float()


def rope_reference(u: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """RoPE on rotate-half pairs (u[i], u[i + D/2]) by angles (B, L, D/2), in float64, from the definition."""
    h = u.shape[-1] // 2
    u1, u2 = u[..., :h].double(), u[..., h:].double()
    c, s = angles.cos()[:, :, None].double(), angles.sin()[:, :, None].double()
    return torch.cat([u1 * c - u2 * s, u2 * c + u1 * s], dim=-1).float()


@needs_kernels
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(64, 256),
        lambda: torch.randn(2, 5, 33),  # a width that is no multiple of the vector length
        lambda: torch.randn(3, 7, 96)[..., 8:48],  # a column slice: rows 96 apart
        lambda: torch.randn(4, 1, 2, 32)[..., :16],  # a size-1 dim among strided rows
        lambda: torch.randn(1, 1, 8),
    ],
)
def test_rms_norm_kernel_equals_the_formula(make):
    torch.manual_seed(0)
    x = 3 * make()
    w = torch.rand(x.shape[-1]) + 0.5
    y = cpu_kernels.rms_norm(x, w, 1e-6)
    assert y is not None and y.shape == x.shape and y.is_contiguous()
    torch.testing.assert_close(y, rms_reference(x, w, 1e-6), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(y, F.rms_norm(x, (x.shape[-1],), w, 1e-6), rtol=1e-5, atol=1e-6)


@needs_kernels
@pytest.mark.parametrize(
    ("seq", "rope_batch", "expanded"),
    [(5, 2, False), (5, 1, False), (1, 2, False), (5, 2, True)],
    ids=["per-sample-rope", "shared-rope", "one-token", "expanded-rope"],
)
def test_qk_norm_rope_kernel_equals_norm_then_rotation(seq, rope_batch, expanded):
    torch.manual_seed(0)
    b, heads, d = 2, 3, 16
    proj = torch.randn(b, seq, (heads + 2) * d)  # packed q|k|v output; q is a strided view of it
    q = proj[..., : heads * d].unflatten(-1, (heads, d))
    w = torch.rand(d) + 0.5
    angles = torch.rand(rope_batch if not expanded else 1, seq, d // 2) * 20
    full = torch.cat([angles, angles], dim=-1)
    cos, signed_sin = rotation_table(full.cos(), full.sin())
    if expanded:  # one table broadcast to every sample: batch stride 0
        cos, signed_sin = cos.expand(b, -1, -1, -1), signed_sin.expand(b, -1, -1, -1)
    y = cpu_kernels.qk_norm_rope(q, w, 1e-6, cos, signed_sin)
    assert y is not None and y.shape == q.shape and y.is_contiguous()
    expected = rope_reference(rms_reference(q, w, 1e-6), angles.expand(b, seq, d // 2))
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)


@needs_kernels
# importing forward AD's decompositions warns inside torch
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_kernels_decline_what_they_do_not_cover():
    w = torch.rand(16)
    x = torch.randn(4, 16)
    assert cpu_kernels.rms_norm(x.bfloat16(), w.bfloat16(), 1e-6) is None  # dtype
    assert cpu_kernels.rms_norm(x, w.double(), 1e-6) is None  # weight dtype differs
    assert cpu_kernels.rms_norm(x, torch.rand(8), 1e-6) is None  # weight of another width
    assert cpu_kernels.rms_norm(torch.randn(16, 4).t(), w, 1e-6) is None  # last dim not unit-stride
    assert cpu_kernels.rms_norm(torch.randn(4, 6, 16)[:, :3], w, 1e-6) is None  # rows unevenly spaced
    big = torch.randn(cpu_kernels.MAX_ELEMENTS // 16 + 1, 16)
    assert cpu_kernels.rms_norm(big, w, 1e-6) is None  # large: PyTorch's threads win
    wg = w.clone().requires_grad_()
    assert cpu_kernels.rms_norm(x, wg, 1e-6) is None  # autograd must record the graph
    with torch.no_grad():
        assert cpu_kernels.rms_norm(x, wg, 1e-6) is not None  # nothing to record
    q = torch.randn(1, 3, 2, 16)
    cos, sin = rotation_table(torch.ones(1, 3, 16), torch.zeros(1, 3, 16))
    assert cpu_kernels.qk_norm_rope(q, w, 1e-6, cos, sin) is not None
    assert cpu_kernels.qk_norm_rope(q.transpose(1, 2), w, 1e-6, cos, sin) is None  # heads not D apart
    assert cpu_kernels.qk_norm_rope(q, w, 1e-6, cos[:, :2], sin[:, :2]) is None  # rope for other positions
    assert cpu_kernels.qk_norm_rope(q, w, 1e-6, cos.double(), sin.double()) is None
    with torch.autograd.forward_ad.dual_level():  # a forward-mode tangent would be dropped
        dual = torch.autograd.forward_ad.make_dual(x, torch.ones_like(x))
        assert cpu_kernels.rms_norm(dual, w, 1e-6) is None


def _count_kernel_calls(monkeypatch) -> dict[str, int]:
    calls = {"rms_norm": 0, "qk_norm_rope": 0}
    for name in calls:
        real = getattr(cpu_kernels, name)

        def counted(*args, _real=real, _name=name):
            y = _real(*args)
            calls[_name] += y is not None
            return y

        monkeypatch.setattr(cpu_kernels, name, counted)
    return calls


@needs_kernels
def test_packed_model_with_fused_kernels_matches_the_eager_model(monkeypatch):
    m = tiny_model()
    ids = torch.randint(0, m.config.vocab_size, (2, 6))
    gen = make_gen(2, frames=[2, 3], actions=[4, 2], audio=[2, 1])
    with torch.no_grad():
        r = m.reason(ids, keep_text_kv=True)
        v = m.denoise(r.cache, gen)
        token = m.decode(r.logits[:, -1].argmax(-1), TextCache.start(r, 2))
    packed = pack_for_cpu(copy.deepcopy(m))
    calls = _count_kernel_calls(monkeypatch)
    with torch.no_grad():
        rp = packed.reason(ids, keep_text_kv=True)
        vp = packed.denoise(rp.cache, gen)
        token_p = packed.decode(rp.logits[:, -1].argmax(-1), TextCache.start(rp, 2))
    layers = m.config.attention.num_layers
    # Reasoner, Generator and decoding: two norms and one fused q/k call per tower and layer
    assert calls["rms_norm"] >= 3 * 2 * layers and calls["qk_norm_rope"] >= 3 * 2 * layers
    torch.testing.assert_close(rp.logits, r.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(token_p, token, rtol=1e-4, atol=1e-5)
    for k in v:
        torch.testing.assert_close(vp[k], v[k], rtol=1e-4, atol=1e-5)

    # Training through a packed model: autograd needs the PyTorch ops, and gets them
    calls.update(rms_norm=0, qk_norm_rope=0)
    packed.train()
    packed.reason(ids).logits.square().mean().backward()
    assert calls == {"rms_norm": 0, "qk_norm_rope": 0}
    assert all(p.grad is not None for p in packed.layers[0].ar.parameters())

    unpack(packed)
    assert not any(isinstance(x, FusedRMSNorm | CPUTowerAttention) for x in packed.modules())


def test_without_a_compiler_the_kernels_are_off_with_a_warning(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setenv("COSMOS3_ROBOT_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "no-such-compiler-cc")
    with pytest.warns(UserWarning, match="no C compiler 'no-such-compiler-cc'"):
        assert not cpu_kernels.available()
    x, w = torch.randn(4, 16), torch.rand(16)
    assert cpu_kernels.rms_norm(x, w, 1e-6) is None
    eager = tiny_model()
    packed = pack_for_cpu(copy.deepcopy(eager))  # still runs, on PyTorch ops
    ids = torch.randint(0, eager.config.vocab_size, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(packed.reason(ids).logits, eager.reason(ids).logits, rtol=1e-4, atol=1e-5)

    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setenv("COSMOS3_ROBOT_CPU_KERNELS", "0")  # switched off on purpose: no warning
    monkeypatch.delenv("CC")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not cpu_kernels.available()


@pytest.mark.skipif(not cpu_kernels.available(), reason="no C compiler")
def test_the_library_is_built_once_into_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("COSMOS3_ROBOT_CACHE", str(tmp_path))
    path = cpu_kernels._build()
    assert path.parent == tmp_path / "cpu_kernels" and path.exists()
    stamp = path.stat().st_mtime_ns
    assert cpu_kernels._build() == path and path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left behind
    assert os.access(path, os.R_OK)
