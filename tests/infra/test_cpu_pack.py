"""Packed CPU Linear weights: same results as F.linear, kept in step with their weights."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from cosmos3_robot.infra import cpu_pack
from cosmos3_robot.infra.cpu_pack import PackedConcat, PackedLinear, pack_for_cpu, unpack
from cosmos3_robot.model.attention import TowerAttention
from cosmos3_robot.model.layers import GatedMLP
from tests.builders import make_gen, tiny_model

pytestmark = pytest.mark.skipif(not cpu_pack.available(), reason="PyTorch built without oneDNN")


def test_packed_linear_matches_f_linear_and_follows_weight_updates():
    torch.manual_seed(0)
    lin = torch.nn.Linear(48, 80)
    pack_for_cpu(lin)
    assert type(lin) is PackedLinear
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    for _ in range(3):
        x = torch.randn(5, 7, 48)
        with torch.no_grad():
            torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-5)
        assert (
            lin._cache._key is not None and lin._cache._key[0][0][1] == lin.weight._version
        )  # packed path ran
        lin(x).square().mean().backward()  # grad mode: plain F.linear, gradients flow
        assert lin.weight.grad is not None and lin.weight.grad.abs().sum() > 0
        opt.step()  # in-place update: the next no-grad call must repack
        opt.zero_grad()
    lin.load_state_dict({"weight": torch.zeros(80, 48), "bias": torch.ones(80)})
    with torch.inference_mode():
        assert torch.equal(lin(torch.randn(3, 48)), torch.ones(3, 80))


def test_packed_model_matches_eager_model_fp32_and_bf16():
    m = tiny_model()
    ids = torch.randint(0, m.config.vocab_size, (2, 6))
    gen = make_gen(2, frames=[2, 3], actions=[4, 2], audio=[2, 1])
    with torch.no_grad():
        r = m.reason(ids)
        v = m.denoise(r.cache, gen)
    packed = pack_for_cpu(copy.deepcopy(m))
    assert sum(type(x) is PackedLinear for x in packed.modules()) > 0
    assert packed.state_dict().keys() == m.state_dict().keys()
    with torch.no_grad():
        rp = packed.reason(ids)
        vp = packed.denoise(rp.cache, gen)
    torch.testing.assert_close(rp.logits, r.logits, rtol=1e-4, atol=1e-5)
    attns = [tower.self_attn for layer in packed.layers for tower in (layer.ar, layer.dm)]
    assert all(a.concat._key is not None for a in attns)  # both towers ran one q/k/v product
    mlps = [tower.mlp for layer in packed.layers for tower in (layer.ar, layer.dm)]
    assert all(mlp.concat._key is not None for mlp in mlps)  # and one gate/up product
    for k in v:
        torch.testing.assert_close(vp[k], v[k], rtol=1e-4, atol=1e-5)
    # bf16: packed against the same bf16 model eager, at bf16 tolerance
    mb = copy.deepcopy(m).to(torch.bfloat16)
    pb = pack_for_cpu(copy.deepcopy(mb))
    with torch.no_grad():
        torch.testing.assert_close(pb.reason(ids).logits, mb.reason(ids).logits, rtol=2e-2, atol=2e-2)


def test_tied_weights_stay_tied_and_unpack_restores_linear():
    m = tiny_model(tie_word_embeddings=True)
    assert m.lm_head.weight is m.embed_tokens.weight
    pack_for_cpu(m)
    assert m.lm_head.weight is m.embed_tokens.weight
    clone = copy.deepcopy(m)  # the packed cache is not copied, the module is
    with torch.no_grad():
        ids = torch.randint(0, m.config.vocab_size, (1, 4))
        torch.testing.assert_close(clone.reason(ids).logits, m.reason(ids).logits)
    unpack(m)
    assert not any(type(x) is PackedLinear for x in m.modules())
    assert all("_cache" not in x.__dict__ for x in m.modules())


def _qkv(bias: bool) -> torch.nn.Module:
    from cosmos3_robot.model.attention import TowerAttention

    return TowerAttention(32, num_heads=4, num_kv_heads=2, head_dim=8, bias=bias, qk_norm=True, eps=1e-6)


@pytest.mark.parametrize("bias", [False, True])
def test_packed_qkv_is_one_product_equal_to_the_three_projections(bias):
    torch.manual_seed(0)
    attn = pack_for_cpu(_qkv(bias))
    concat = attn.concat
    assert isinstance(concat, PackedConcat)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        q, k, v = attn.project(x)
        assert concat._key is not None  # the packed product ran
        for got, lin in zip((q, k, v), (attn.q_proj, attn.k_proj, attn.v_proj), strict=True):
            torch.testing.assert_close(got, F.linear(x, lin.weight, lin.bias), rtol=1e-5, atol=1e-6)
        # an in-place change of one weight (optimiser step, load_state_dict) repacks the whole product
        attn.k_proj.weight.mul_(-2.0)
        torch.testing.assert_close(attn.project(x)[1], F.linear(x, attn.k_proj.weight, attn.k_proj.bias))
    # autograd: no packed product, the Linears run one by one and gradients reach every weight
    assert concat(x.requires_grad_(), (attn.q_proj, attn.k_proj, attn.v_proj)) is None
    sum(t.square().sum() for t in attn.project(x)).backward()
    assert all(lin.weight.grad.abs().sum() > 0 for lin in (attn.q_proj, attn.k_proj, attn.v_proj))


def test_packed_qkv_follows_copies_and_replaced_linears_and_unpack_removes_it():
    torch.manual_seed(0)
    attn = pack_for_cpu(_qkv(bias=False))
    x = torch.randn(1, 3, 32)
    with torch.no_grad():
        attn.project(x)
        clone = copy.deepcopy(attn)
        assert clone.concat._key is None  # the packed cache is not copied
        clone.q_proj.weight.zero_()
        assert torch.equal(clone.project(x)[0], torch.zeros(1, 3, 32))  # it reads the copy's weights
        assert attn.project(x)[0].abs().sum() > 0  # the original is untouched
        attn.v_proj = torch.nn.Linear(32, 16, bias=True)  # a Linear swapped in after packing
        torch.testing.assert_close(attn.project(x)[2], attn.v_proj(x), rtol=1e-5, atol=1e-6)
        attn.to(torch.bfloat16)  # new parameter tensors: the bf16 product is packed anew
        xb = x.bfloat16()
        torch.testing.assert_close(
            attn.project(xb)[0], F.linear(xb, attn.q_proj.weight), rtol=1e-2, atol=1e-2
        )
    unpack(attn)
    assert type(attn) is TowerAttention and "concat" not in attn.__dict__


def test_weights_made_under_inference_mode_run_unpacked():
    # Inference tensors have no version counter, so a packed copy could go stale unseen: F.linear runs.
    with torch.inference_mode():
        attn = pack_for_cpu(_qkv(bias=True))
        lin = pack_for_cpu(torch.nn.Linear(32, 16))
        x = torch.randn(2, 32)
        torch.testing.assert_close(lin(x), F.linear(x, lin.weight, lin.bias))
        assert attn.concat(x, (attn.q_proj, attn.k_proj, attn.v_proj)) is None and lin._cache._key is None
        torch.testing.assert_close(attn.project(x)[2], F.linear(x, attn.v_proj.weight, attn.v_proj.bias))


def test_packed_gate_up_equals_the_qwen3_mlp_formula():

    torch.manual_seed(0)
    mlp = GatedMLP(32, 80)
    x = torch.randn(2, 7, 32)

    def qwen3_mlp(x):
        gate, up = F.linear(x, mlp.gate_proj.weight), F.linear(x, mlp.up_proj.weight)
        return F.linear(F.silu(gate) * up, mlp.down_proj.weight)

    with torch.no_grad():
        want = qwen3_mlp(x)
        pack_for_cpu(mlp)
        torch.testing.assert_close(mlp(x), want, rtol=1e-5, atol=1e-6)
        assert mlp.concat._key is not None  # the packed product ran
        mlp.up_proj.weight.mul_(0.5)  # an in-place change repacks
        want = qwen3_mlp(x)
        torch.testing.assert_close(mlp(x), want, rtol=1e-5, atol=1e-6)
    unpack(mlp)
    assert type(mlp) is GatedMLP and "concat" not in mlp.__dict__


@pytest.mark.parametrize("onednn_bf16", [True, False], ids=["onednn-bf16", "no-bf16-cpu"])
def test_bf16_products_of_a_float32_model_equal_f_linear_on_bf16_rounded_operands(onednn_bf16, monkeypatch):
    """linear_dtype=bf16: each product is the exact product of the bf16-rounded input and weight
    (accumulated in fp32), bias added in fp32; the model's outputs stay float32 and close. On a CPU
    whose oneDNN has no bf16 kernels (AVX2 only) the same products run unpacked, not an error."""
    if onednn_bf16 and not cpu_pack.bf16_available():
        pytest.skip("this CPU has no oneDNN bf16 kernels (AVX512 BW/VL/DQ or AVX-NE-CONVERT)")
    if not onednn_bf16:
        monkeypatch.setattr(cpu_pack, "bf16_available", lambda: False)
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 96)
    pack_for_cpu(lin, torch.bfloat16)
    x = torch.randn(7, 64)
    with torch.no_grad():
        y = lin(x)
        oracle = F.linear(x.bfloat16().double(), lin.weight.bfloat16().double()) + lin.bias.double()
    assert y.dtype == torch.float32
    # the oracle in float64 of the rounded operands; the output is rounded to bf16 once, before the bias
    torch.testing.assert_close(y.double(), oracle, rtol=1e-2, atol=1e-2)
    assert (y - F.linear(x, lin.weight, lin.bias)).abs().max() > 0  # it did run in bf16
    m = tiny_model()
    ids = torch.randint(0, m.config.vocab_size, (2, 6))
    gen = make_gen(2, frames=[2, 3], actions=[4, 2], audio=[2, 1])
    low = pack_for_cpu(copy.deepcopy(m), torch.bfloat16)
    with torch.no_grad():
        r, rl = m.reason(ids), low.reason(ids)
        v, vl = m.denoise(r.cache, gen), low.denoise(rl.cache, gen)
    for k in v:
        assert vl[k].dtype == torch.float32
        torch.testing.assert_close(vl[k], v[k], rtol=5e-2, atol=5e-2)
    pack_for_cpu(low, None)  # back to float32 products: equal to the eager model again
    with torch.no_grad():
        torch.testing.assert_close(low.reason(ids).logits, r.logits, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="linear_dtype must be one of"):
        pack_for_cpu(low, torch.float16)


def test_training_dtype_auto_follows_the_cpu_and_bad_names_are_refused(monkeypatch):
    """auto trains in bf16 only where oneDNN has bf16 kernels (an AVX2-only CPU ran bf16 autocast ~40x
    slower than fp32); explicit names are kept as given."""
    for has, want in ((True, "bf16"), (False, "fp32")):
        monkeypatch.setattr(cpu_pack, "bf16_available", lambda has=has: has)
        assert cpu_pack.training_dtype("auto") == want
        assert cpu_pack.training_dtype("bf16") == "bf16" and cpu_pack.training_dtype("fp32") == "fp32"
    with pytest.raises(ValueError, match="dtype must be one of auto, bf16, fp32"):
        cpu_pack.training_dtype("fp16")
