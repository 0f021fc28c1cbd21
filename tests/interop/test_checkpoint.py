"""Our checkpoint format: exact round trips, Reasoner-only checkpoints that reason on their own,
atomic replacement, dtype handling and clear errors."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors import safe_open

from cosmos3_robot.encoders.vit import ViT, vit_preset
from cosmos3_robot.interop.checkpoint import load_model, save_model
from cosmos3_robot.model import MoT, preset
from tests.builders import make_gen, tiny_model


def tiny_vit() -> ViT:
    torch.manual_seed(1)
    return ViT(vit_preset("tiny", out_hidden_size=preset("tiny").reasoner.hidden_size)).eval()


def stored_names(folder) -> set[str]:
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return set(f.keys())


@pytest.mark.parametrize("tie", [False, True])
def test_round_trip_is_exact(tmp_path, tie):
    m, vit = tiny_model(tie_word_embeddings=tie), tiny_vit()
    save_model(tmp_path / "ckpt", m, vit, {"note": "hi"})
    m2, vit2, meta = load_model(tmp_path / "ckpt")
    assert meta == {"note": "hi"} and m2.config == m.config and vit2.config == vit.config
    for a, b in ((m, m2), (vit, vit2)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert (m2.lm_head.weight is m2.embed_tokens.weight) == tie
    assert ("lm_head.weight" in stored_names(tmp_path / "ckpt")) != tie  # a tied head is stored once
    ids = torch.randint(0, m.config.vocab_size, (2, 6))
    gen = make_gen(2, [2, 1], [3, 2], [2, 2])
    with torch.no_grad():
        r1, v1 = m(ids, gen)
        r2, v2 = m2(ids, gen)
    assert torch.equal(r1.logits, r2.logits) and all(torch.equal(v1[k], v2[k]) for k in v1)


def test_reasoner_only_checkpoint_holds_no_generator_weight_and_reasons(tmp_path):
    m = tiny_model()
    save_model(tmp_path / "ro", m, reasoner_only=True)
    names = stored_names(tmp_path / "ro")
    gen_names = {n for n, p in m.named_parameters() if any(p is q for q in m.generator_parameters())}
    assert names and not names & gen_names and not any(".dm." in n for n in names)
    assert json.loads((tmp_path / "ro" / "config.json").read_text())["reasoner_only"] is True
    ro, vit, _ = load_model(tmp_path / "ro")
    assert vit is None and ro.config.generator is None
    ids = torch.randint(0, m.config.vocab_size, (2, 7))
    lengths = torch.tensor([7, 3])
    with torch.no_grad():
        assert torch.equal(ro.reason(ids, lengths=lengths).logits, m.reason(ids, lengths=lengths).logits)
        with pytest.raises(ValueError, match="no Generator"):
            ro.denoise(ro.reason(ids).cache, make_gen(2, [1, 1], [2, 2], [1, 1]))


def test_full_checkpoint_loads_reasoner_only(tmp_path):
    m = tiny_model()
    save_model(tmp_path / "full", m)
    ro, _, _ = load_model(tmp_path / "full", with_generator=False)
    assert ro.config == dataclasses.replace(m.config, generator=None)
    ids = torch.randint(0, m.config.vocab_size, (1, 5))
    with torch.no_grad():
        assert torch.equal(ro.reason(ids).logits, m.reason(ids).logits)


def test_save_replaces_atomically_and_a_failed_save_changes_nothing(tmp_path):
    folder = tmp_path / "ckpt"
    save_model(folder, tiny_model(seed=0))
    first = (folder / "model.safetensors").read_bytes()
    with pytest.raises(FileNotFoundError):
        save_model(folder, tiny_model(seed=1), extra_files=[tmp_path / "does-not-exist.json"])
    assert (folder / "model.safetensors").read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary folder left behind
    save_model(folder, tiny_model(seed=1))
    assert (folder / "model.safetensors").read_bytes() != first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_extra_files_are_copied_and_cannot_clobber(tmp_path):
    tok = tmp_path / "tokenizer.json"
    tok.write_text("{}")
    save_model(tmp_path / "ckpt", tiny_model(), extra_files=[tok])
    assert (tmp_path / "ckpt" / "tokenizer.json").read_text() == "{}"
    bad = tmp_path / "config.json"
    bad.write_text("{}")
    with pytest.raises(ValueError, match="config.json"):
        save_model(tmp_path / "ckpt2", tiny_model(), extra_files=[bad])


def test_dtype_on_load_and_errors(tmp_path):
    m = tiny_model()
    save_model(tmp_path / "ckpt", m, tiny_vit())
    half, vit, _ = load_model(tmp_path / "ckpt", dtype="bfloat16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16} == {p.dtype for p in vit.parameters()}
    with pytest.raises(ValueError, match="cannot be honoured"):
        load_model(tmp_path / "ckpt", dtype=torch.int32)
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_model(tmp_path)
    # A checkpoint whose tensors do not match its config names them.
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    cfg["model"]["attention"]["num_layers"] = 1
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="layers.1"):
        load_model(tmp_path / "ckpt")


def test_vit_shapes_and_patchify():
    from cosmos3_robot.encoders.vit import image_patches

    vit = tiny_vit()
    frames = torch.randn(1, 3, 16, 16)  # one image: 4x4 patches -> 4 tokens
    pix, grid = image_patches(frames, vit.config)
    assert grid.tolist() == [[1, 4, 4]] and pix.shape == (16, vit.config.patch_dim)
    with torch.no_grad():
        out = vit(pix, grid)
    assert out.tokens.shape == (4, 64) and [d.shape for d in out.deepstack] == [(4, 64), (4, 64)]
    with pytest.raises(ValueError, match="pixels must have shape"):
        vit(pix[:-1], grid)
    with pytest.raises(ValueError, match="multiples of spatial_merge_size"):
        vit(pix[:12], torch.tensor([[1, 3, 4]]))


def test_reasoner_only_model_saves_too(tmp_path):
    ro = MoT(dataclasses.replace(preset("tiny"), generator=None))
    save_model(tmp_path / "a", ro)
    again, _, _ = load_model(tmp_path / "a")
    assert again.config.generator is None
