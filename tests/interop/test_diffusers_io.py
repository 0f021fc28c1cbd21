"""Cosmos 3 checkpoints from Diffusers: import / export against `Cosmos3OmniTransformer` itself.

Random Diffusers transformers (every parameter randomised — Diffusers zero-inits the modality
embeddings, which would hide a wrong mapping) are saved, imported, and run on the same requests as
the Diffusers pipeline builds them (its own `_prepare_*_segment` code); velocities must agree.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_cosmos3 import Cosmos3OmniTransformer  # noqa: E402
from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import get_3d_mrope_ids_vae_tokens  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

from cosmos3_robot.flow import EulerSampler, guided  # noqa: E402
from cosmos3_robot.interop.checkpoint import load_model  # noqa: E402
from cosmos3_robot.interop.diffusers_io import (  # noqa: E402
    WEIGHTS_NAME,
    config_from_diffusers,
    export_diffusers_cosmos3,
    load_diffusers_cosmos3,
    tensor_mapping,
)
from cosmos3_robot.interop.diffusers_positions import (  # noqa: E402
    cosmos3_gen_input,
    diffusers_request,
    diffusers_step,
    pipeline_sigma,
    sound_positions,
)
from cosmos3_robot.model import ReasonerCache, unpatchify  # noqa: E402
from cosmos3_robot.scripts.interop import export_diffusers_main as export_main
from cosmos3_robot.scripts.interop import import_diffusers_main as import_main

# Two small configs: (A) actions + sound, MHA-ish 2:1 GQA, Qwen3 QK-norm everywhere;
# (B) GQA 4:1, Cosmos 3 Edge key norm (no text QK-norm), biases, other margin/fps, no spatial reset.
CONFIG_A = dict(
    head_dim=16, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
    num_hidden_layers=2, latent_channel=4, patch_latent_dim=16, vocab_size=97, rope_axes_dim=[4, 2, 2],
    action_gen=True, action_dim=5, num_embodiment_domains=3, sound_gen=True, sound_dim=6,
)  # fmt: skip
CONFIG_B = dict(
    head_dim=8, hidden_size=48, intermediate_size=64, num_attention_heads=8, num_key_value_heads=2,
    num_hidden_layers=2, latent_channel=4, patch_latent_dim=16, vocab_size=97, rope_axes_dim=[2, 1, 1],
    qk_norm_for_text=False, use_und_k_norm_for_gen=True, attention_bias=True,
    unified_3d_mrope_temporal_modality_margin=500, base_fps=30, unified_3d_mrope_reset_spatial_ids=False,
)  # fmt: skip


def random_diffusers(cfg: dict, seed: int = 0) -> Cosmos3OmniTransformer:
    torch.manual_seed(seed)
    m = Cosmos3OmniTransformer(**cfg).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.3 * torch.randn_like(p))  # biases and modality embeddings
            elif name.endswith("fc.weight"):
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1] ** 0.5))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
    return m


def from_pretrained(folder) -> Cosmos3OmniTransformer:
    """Diffusers' own loader, as a user would call it (it needs `accelerate`, a dependency)."""
    return Cosmos3OmniTransformer.from_pretrained(folder).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{name: (diffusers model, folder)} for both configs."""
    out = {}
    for name, cfg in (("A", CONFIG_A), ("B", CONFIG_B)):
        m = random_diffusers(cfg, seed=len(out))
        folder = tmp_path_factory.mktemp(f"diffusers_{name}")
        m.save_pretrained(folder)
        out[name] = (m, folder)
    return out


# A request: text, 3 latent frames of a 4x6 latent grid at 15 fps, 6 actions, 5 sound tokens.
def make_request(cfg: dict, seed: int = 0, text_len: int = 11):
    g = torch.Generator().manual_seed(seed)
    req = {
        "ids": torch.randint(0, cfg["vocab_size"], (text_len,), generator=g).tolist(),
        "video": torch.randn(1, cfg["latent_channel"], 3, 4, 6, generator=g),
        "vision_cond": [0],
        "fps": 15.0,
    }
    if cfg.get("action_gen"):
        req.update(action=torch.randn(6, cfg["action_dim"], generator=g), action_cond=[0, 1], domain=2)
    if cfg.get("sound_gen"):
        req.update(sound=torch.randn(cfg["sound_dim"], 5, generator=g))
    return req


def diffusers_velocity(m, req, sigma: float, ids=None):
    static = diffusers_request(
        m, ids or req["ids"], tuple(req["video"].shape), req["vision_cond"], req["fps"],
        sound_len=req["sound"].shape[1] if "sound" in req else None,
        action_len=req["action"].shape[0] if "action" in req else None,
        action_cond=req.get("action_cond"), domain_id=req.get("domain", 0),
    )  # fmt: skip
    kw = diffusers_step(static, sigma * 1000, req["video"], req.get("sound"), req.get("action"))
    with torch.no_grad():
        vis, snd, act = m(**kw)
    return {
        "video": vis[0],
        "audio": None if snd is None else snd[0],
        "action": None if act is None else act[0],
    }


def noisy_masks(req):
    t = req["video"].shape[2]
    masks = {"video": torch.tensor([i not in req["vision_cond"] for i in range(t)])}
    if "action" in req:
        masks["action"] = torch.tensor([i not in req["action_cond"] for i in range(req["action"].shape[0])])
    if "sound" in req:
        masks["audio"] = torch.ones(req["sound"].shape[1], dtype=torch.bool)
    return masks


def our_gen(patch: int, compat, req, sigma, text_lens: list[int], quirk: bool = True):
    b = len(text_lens)
    m = noisy_masks(req)
    rep = lambda x: None if x is None else x.expand(b, *x.shape[1:])  # noqa: E731
    return cosmos3_gen_input(
        compat, text_lens, rep(req["video"]), m["video"], sigma, req["fps"], patch,
        action=rep(req["action"][None]) if "action" in req else None, action_noisy=m.get("action"),
        embodiment=torch.full((b,), req.get("domain", 0)) if "action" in req else None,
        sound=rep(req["sound"].T[None]) if "sound" in req else None, diffusers_sound_quirk=quirk,
    )  # fmt: skip


def to_diffusers_layout(model, req, v: dict) -> dict:
    """Our per-token velocities (batch row 0) -> Diffusers' per-item layout, zero at clean tokens."""
    m = noisy_masks(req)
    c, t, h, w = req["video"].shape[1:]
    out = {
        "video": unpatchify(v["video"][:1], (c, t, h, w), model.config.patch_size)
        * m["video"].view(1, 1, t, 1, 1)
    }
    out["audio"] = v["audio"][0].T * m["audio"] if "audio" in v else None
    out["action"] = v["action"][0] * m["action"][:, None] if "action" in v else None
    return out


def assert_same(ours: dict, ref: dict, atol: float = 1e-4):
    for k, r in ref.items():
        if r is None:
            assert ours.get(k) is None
            continue
        assert ours[k].shape == r.shape, k
        err = (ours[k] - r).abs().max().item()
        assert err <= atol, f"{k}: max |ours - diffusers| = {err:.2e}"
        assert r.abs().max() > 1e-2, f"{k}: reference is trivially small"


@pytest.mark.parametrize("name", ["A", "B"])
def test_import_and_export_match_diffusers_one_step(saved, tmp_path, monkeypatch, name):
    ref_model, folder = saved[name]
    cfg = CONFIG_A if name == "A" else CONFIG_B
    model, compat = load_diffusers_cosmos3(folder)
    req = make_request(cfg, seed=3)
    sigma = 0.73
    ref = diffusers_velocity(ref_model, req, sigma)
    with torch.no_grad():
        r = model.reason(torch.tensor(req["ids"])[None], logits=False)
        v = model.denoise(r.cache, our_gen(2, compat, req, sigma, [len(req["ids"])]))
    assert_same(to_diffusers_layout(model, req, v), ref)

    # Export -> Diffusers from_pretrained -> the same outputs again (and every tensor bit-identical).
    export_diffusers_cosmos3(model, tmp_path / "exported", compat)
    back = from_pretrained(tmp_path / "exported")
    assert_same(diffusers_velocity(back, req, sigma), ref, atol=0.0)
    orig = ref_model.state_dict()
    for k, t in load_file(str(tmp_path / "exported" / WEIGHTS_NAME)).items():
        assert torch.equal(t, orig[k]), k
    assert set(orig) == {m.diffusers for m in tensor_mapping(model.config)}


def test_euler_sampling_with_guidance_matches_diffusers(saved):
    ref_model, folder = saved["A"]
    model, compat = load_diffusers_cosmos3(folder)
    req = make_request(CONFIG_A, seed=5, text_len=13)
    uncond_ids = req["ids"][:7]  # a shorter negative prompt: uncond cache padded inside ReasonerCache.cat
    masks = noisy_masks(req)
    steps, scale = 4, 3.0
    x0 = {"video": req["video"], "sound": req["sound"], "action": req["action"]}

    # Diffusers: two full forwards per step (cond, uncond), Euler on the noisy tokens.
    sampler = EulerSampler()
    sampler.set_timesteps(steps, shift=3.0)
    x = dict(x0)
    while not sampler.done:
        s = sampler.sigma
        r = {**req, "video": x["video"], "sound": x["sound"], "action": x["action"]}
        vc = diffusers_velocity(ref_model, r, s)
        vu = diffusers_velocity(ref_model, r, s, ids=uncond_ids)
        v = guided(vc, vu, scale)
        x = sampler.step({"video": v["video"], "sound": v["audio"], "action": v["action"]}, x)
    ref_final = x

    # Ours: Reasoner once per prompt, caches batched, one Generator pass per step.
    with torch.no_grad():
        rc = model.reason(torch.tensor(req["ids"])[None], logits=False).cache
        ru = model.reason(torch.tensor(uncond_ids)[None], logits=False).cache
        cache = ReasonerCache.cat([rc, ru])
        sampler.set_timesteps(steps, shift=3.0)
        y = {"video": req["video"], "audio": req["sound"].T[None], "action": req["action"][None]}
        lens = [len(req["ids"]), len(uncond_ids)]
        while not sampler.done:
            r = {**req, "video": y["video"], "sound": y["audio"][0].T, "action": y["action"][0]}
            v = model.denoise(cache, our_gen(2, compat, r, sampler.sigma, lens))
            v = {k: guided(t[:1], t[1:], scale) for k, t in v.items()}
            c, t, h, w = req["video"].shape[1:]
            v["video"] = unpatchify(v["video"], (c, t, h, w), 2) * masks["video"].view(1, 1, t, 1, 1)
            v["action"] = v["action"] * masks["action"][None, :, None]
            y = sampler.step(v, y)
    assert_same(
        {"video": y["video"], "sound": y["audio"][0].T, "action": y["action"][0]},
        {"video": ref_final["video"], "sound": ref_final["sound"], "action": ref_final["action"]},
    )
    assert not torch.allclose(ref_final["video"], req["video"])


@pytest.mark.parametrize("name", ["A", "B"])
def test_positions_match_the_pipeline(saved, name):
    ref_model, _ = saved[name]
    cfg = CONFIG_A if name == "A" else CONFIG_B
    _, compat = config_from_diffusers(dict(ref_model.config, _class_name="Cosmos3OmniTransformer"))
    for text_len, frames, fps, n_act, n_snd in ((11, 3, 15.0, 6, 5), (4, 1, 24.0, 1, 1), (9, 2, 10.0, 2, 7)):
        req = {
            "ids": list(range(text_len)),
            "video": torch.zeros(1, cfg["latent_channel"], frames, 4, 6),
            "vision_cond": [0],
            "fps": fps,
        }
        if cfg.get("action_gen"):
            req.update(action=torch.zeros(n_act, cfg["action_dim"]), action_cond=[])
        if cfg.get("sound_gen"):
            req.update(sound=torch.zeros(cfg["sound_dim"], n_snd))
        static = diffusers_request(
            ref_model, req["ids"], tuple(req["video"].shape), [0], fps,
            sound_len=n_snd if "sound" in req else None, action_len=n_act if "action" in req else None,
        )  # fmt: skip
        gen = our_gen(2, compat, req, 0.5, [text_len])
        ours = torch.cat([s.positions[0] for _, s in gen.items()], dim=1)
        ref = static["position_ids"][:, text_len:].float()
        assert torch.equal(ours, ref), (text_len, frames, fps)
    if cfg.get("sound_gen"):  # the physical default puts 25 Hz sound 4x closer than Diffusers does
        phys, quirk = (
            sound_positions(compat, 10, 5),
            sound_positions(compat, 10, 5, diffusers_sound_quirk=True),
        )
        o = 10 + compat.modality_margin
        # (float32 ids near 15000 carry an ulp of 2e-3)
        torch.testing.assert_close(quirk[0] - o, 4 * (phys[0] - o), atol=4e-3, rtol=0)
        torch.testing.assert_close(phys[0] - o, torch.arange(5) / 25 * 6, atol=4e-3, rtol=0)
    # UniPC hands the transformer int64 timesteps: it conditions on floor(σ·1000)/1000.
    assert pipeline_sigma(0.7349) == 0.734
    # The pipeline's own helper agrees with the integer fallback of a single latent frame.
    ids, _ = get_3d_mrope_ids_vae_tokens(1, 2, 2, temporal_offset=7, fps=30.0)
    assert ids.dtype == torch.long and ids[0].tolist() == [7, 7, 7, 7]


def test_sharded_import_and_cli_round_trip(saved, tmp_path, monkeypatch):
    ref_model, _ = saved["B"]
    sharded = tmp_path / "sharded"
    ref_model.save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "diffusion_pytorch_model.safetensors.index.json").exists()
    assert import_main([str(sharded), str(tmp_path / "ours")]) == 0
    _, _, meta = load_model(tmp_path / "ours")
    compat = meta["diffusers_compat"]
    assert compat["modality_margin"] == 500 and not compat["reset_spatial_ids"]
    assert export_main([str(tmp_path / "ours"), str(tmp_path / "back"), "--max-shard-gb", "0.00003"]) == 0
    back = from_pretrained(tmp_path / "back")
    orig = ref_model.state_dict()
    for k, t in back.state_dict().items():
        assert torch.equal(t, orig[k]), k
    assert (tmp_path / "back" / "diffusion_pytorch_model.safetensors.index.json").exists()


def _rewrite(folder, tmp_path, edit_tensors=None, edit_config=None):
    out = tmp_path / "edited"
    out.mkdir()
    tensors = load_file(str(folder / WEIGHTS_NAME))
    if edit_tensors:
        edit_tensors(tensors)
    save_file(tensors, str(out / WEIGHTS_NAME))
    cfg = json.loads((folder / "config.json").read_text())
    if edit_config:
        edit_config(cfg)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


@pytest.mark.parametrize(
    "edit_tensors, edit_config, match",
    [
        (None, lambda c: c.update(_class_name="WanTransformer3DModel"), "_class_name"),
        (None, lambda c: c.update(hidden_act="relu2"), "hidden_act"),
        (None, lambda c: c.update(fancy_new_option=True), "fancy_new_option"),
        (None, lambda c: c.update(patch_latent_dim=20), "patch_latent_dim"),
        (lambda t: t.pop("layers.1.mlp_moe_gen.up_proj.weight"), None, "layers.1.mlp_moe_gen.up_proj.weight"),
        (lambda t: t.update(extra_head=torch.zeros(3)), None, "extra_head"),
        (lambda t: t.update({"proj_out.bias": torch.zeros(17)}), None, r"proj_out\.bias.*\(17,\)"),
        (
            lambda t: t.update({"action_proj_in.fc.weight": torch.zeros(3, 5, 64)}),
            None,
            "action_proj_in.fc.weight",
        ),
    ],
)
def test_bad_checkpoints_raise_naming_the_culprit(saved, tmp_path, edit_tensors, edit_config, match):
    _, folder = saved["A"]
    bad = _rewrite(folder, tmp_path, edit_tensors, edit_config)
    with pytest.raises(ValueError, match=match):
        load_diffusers_cosmos3(bad)


def test_bf16_import_keeps_time_embedder_fp32(saved):
    _, folder = saved["B"]
    model, _ = load_diffusers_cosmos3(folder, dtype=torch.bfloat16)
    assert model.config.null_condition  # Cosmos 3 is sampled with classifier-free guidance
    assert model.time_embed.linear_1.weight.dtype == torch.float32
    assert model.layers[0].dm.mlp.up_proj.weight.dtype == torch.bfloat16
    assert not any(p.is_meta for p in model.parameters())
