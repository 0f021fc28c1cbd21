"""Qwen3-VL import: our Reasoner + ViT reproduce transformers' Qwen3-VL exactly (fp32), the Generator
starts as the VLM, the config mapping is explicit, and bad folders fail with the offending names.

Tiny random `Qwen3VLForConditionalGeneration` models are built from a config, saved with
`save_pretrained` and loaded back with our loader; nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from cosmos3_robot.encoders.vision_inputs import (
    build_reasoner_inputs,
    image_placeholder,
    token_types,
    video_placeholder,
)
from cosmos3_robot.encoders.vit import image_patches
from cosmos3_robot.interop.checkpoint import load_model
from cosmos3_robot.interop.qwen3vl import load_qwen3vl, model_config_from_hf, vit_config_from_hf
from cosmos3_robot.model import preset
from cosmos3_robot.processors.tokenizers import VisionTokenIds
from cosmos3_robot.scripts.interop import import_qwen3vl_main as import_main
from cosmos3_robot.tasks.text_generation import generate

transformers = pytest.importorskip("transformers")

FIXTURE = Path(__file__).parents[1] / "fixtures" / "qwen3_vl_8b_config.json"
TOK = dict(image_token_id=290, video_token_id=291, vision_start_token_id=292, vision_end_token_id=293)
VISION = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=4, temporal_patch_size=2,
              num_position_embeddings=16, deepstack_visual_indexes=[0, 1])  # fmt: skip
SHAPES = {
    # GQA (4 q heads over 2 kv heads), separate lm_head, 3 layers (one without DeepStack).
    "gqa": dict(hidden=64, layers=3, heads=4, kv=2, head_dim=16, section=[4, 2, 2], tie=False),
    # Tied embeddings, plain multi-head attention, narrow heads.
    "tied": dict(hidden=32, layers=2, heads=4, kv=4, head_dim=8, section=[2, 1, 1], tie=True),
}
PATCH_DIM = 3 * 2 * 4 * 4
IMG_GRID, VID_GRID = (1, 4, 6), (2, 4, 4)  # in patches: 6 image tokens; 2 frames x 4 video tokens


def hf_config(hidden, layers, heads, kv, head_dim, section, tie):
    text = dict(
        vocab_size=300, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=section, mrope_interleaved=True),
    )  # fmt: skip
    return transformers.Qwen3VLConfig(
        text_config=text, vision_config=dict(VISION, out_hidden_size=hidden), tie_word_embeddings=tie, **TOK
    )


@pytest.fixture(scope="module", params=sorted(SHAPES))
def pair(request, tmp_path_factory):
    """(HF model, our MoT, our ViT, meta, folder) for one tiny shape."""
    torch.manual_seed(0)
    hf = transformers.Qwen3VLForConditionalGeneration(hf_config(**SHAPES[request.param])).eval()
    with torch.no_grad():  # non-trivial norms so that a mis-wired norm cannot hide
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    folder = tmp_path_factory.mktemp(f"qwen3vl-{request.param}")
    hf.save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text('{"model_max_length": 64}')
    mot, vit, meta = load_qwen3vl(folder)
    return hf, mot, vit, meta, folder


def ids_of(meta) -> VisionTokenIds:
    return VisionTokenIds(**meta["token_ids"])


def image_prompt(ids: VisionTokenIds) -> list[int]:
    return [5, 6, 7] + image_placeholder(IMG_GRID, ids) + [8, 9, 10, 11]


def video_prompt(ids: VisionTokenIds) -> list[int]:
    # Qwen3-VL writes each temporal patch's timestamp as text before it; any tokens do here.
    return [5, 6] + video_placeholder(VID_GRID, ids, frame_prefixes=[[20, 21], [22, 23]]) + [8, 9, 10]


def pixels(n: int, seed: int) -> torch.Tensor:
    return torch.randn(n, PATCH_DIM, generator=torch.Generator().manual_seed(seed))


def hf_logits(hf, input_ids, ids, **vision):
    with torch.no_grad():
        return hf(input_ids=input_ids, mm_token_type_ids=token_types(input_ids, ids), **vision).logits


def our_logits(mot, vit, input_ids, ids, lengths=None, **vision):
    with torch.no_grad():
        inputs = build_reasoner_inputs(mot, vit, input_ids, ids, lengths=lengths, **vision)
        return mot.reason(**inputs.reason_kwargs()).logits


# ------------------------------------------------------------------------------------------------
# Config mapping
# ------------------------------------------------------------------------------------------------


def test_nano_preset_language_dims_equal_qwen3_vl_8b_config():
    hf = json.loads(FIXTURE.read_text())
    mapped = model_config_from_hf(hf)
    nano = preset("nano")
    assert mapped.reasoner == nano.reasoner and mapped.generator == nano.generator
    assert mapped.attention == nano.attention
    assert mapped.attention.rope_sections == (24, 20, 20) and mapped.attention.rope_theta == 5_000_000.0
    assert (mapped.vocab_size, mapped.tie_word_embeddings) == (nano.vocab_size, nano.tie_word_embeddings)
    assert mapped == nano  # Generator-only fields come from the nano template
    v = vit_config_from_hf(hf)
    assert (v.depth, v.hidden_size, v.num_heads, v.patch_size, v.out_hidden_size) == (27, 1152, 16, 16, 4096)
    assert v.deepstack_indexes == (8, 16, 24) and v.num_position_embeddings == 2304


def test_config_mapping_of_tiny_models(pair):
    hf, mot, vit, meta, _ = pair
    t = hf.config.text_config
    c = mot.config
    assert (c.reasoner.hidden_size, c.reasoner.intermediate_size) == (t.hidden_size, t.intermediate_size)
    assert (c.attention.num_layers, c.attention.num_heads) == (t.num_hidden_layers, t.num_attention_heads)
    assert (c.attention.num_kv_heads, c.attention.head_dim) == (t.num_key_value_heads, t.head_dim)
    assert list(c.attention.rope_sections) == t.rope_parameters["mrope_section"]
    assert c.tie_word_embeddings == hf.config.tie_word_embeddings
    assert (mot.lm_head.weight is mot.embed_tokens.weight) == c.tie_word_embeddings
    assert vit.config.deepstack_indexes == (0, 1) and ids_of(meta) == VisionTokenIds(**TOK)


@pytest.mark.parametrize(
    "edit, match",
    [
        (lambda c: c.update(model_type="llava"), "not a Qwen3-VL"),
        (lambda c: c.update(model_type="qwen3_vl_moe"), "MoE"),
        (lambda c: c["text_config"].update(num_experts=8), r"mixture-of-experts fields \['num_experts'\]"),
        (lambda c: c["text_config"]["rope_scaling"].update(rope_type="yarn"), "rope type 'yarn'"),
        (lambda c: c["text_config"]["rope_scaling"].update(mrope_interleaved=False), "mrope_interleaved"),
        (
            lambda c: c["text_config"].update(fancy_new_thing=1),
            r"unsupported config fields \['fancy_new_thing'\]",
        ),
        (lambda c: c["vision_config"].update(out_hidden_size=2048), "out_hidden_size"),
        (lambda c: c.update(quantization_config={"quant_method": "fp8"}), "quantised"),
    ],
)
def test_unsupported_configs_raise(edit, match):
    hf = json.loads(FIXTURE.read_text())
    edit(hf)
    with pytest.raises(ValueError, match=match):
        model_config_from_hf(hf)
        vit_config_from_hf(hf)


# ------------------------------------------------------------------------------------------------
# Exactness against transformers
# ------------------------------------------------------------------------------------------------


def test_vit_matches_hf_visual(pair):
    hf, _, vit, _, _ = pair
    grid = torch.tensor([IMG_GRID, VID_GRID])
    pix = pixels(24 + 32, seed=1)
    with torch.no_grad():
        ref = hf.model.visual(pix, grid_thw=grid)
        ours = vit(pix, grid)
    torch.testing.assert_close(ours.tokens, ref.pooler_output, atol=1e-5, rtol=1e-5)
    for a, b in zip(ours.deepstack, ref.deepstack_features, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_text_only_logits_match(pair):
    hf, mot, vit, meta, _ = pair
    ids = torch.randint(0, 290, (2, 13), generator=torch.Generator().manual_seed(0))
    diff = (our_logits(mot, vit, ids, ids_of(meta)) - hf_logits(hf, ids, ids_of(meta))).abs().max()
    assert diff.item() <= 1e-4


def test_image_text_logits_match(pair):
    hf, mot, vit, meta, _ = pair
    ids = ids_of(meta)
    input_ids = torch.tensor([image_prompt(ids)])
    vision = dict(pixel_values=pixels(24, seed=2), image_grid_thw=torch.tensor([IMG_GRID]))
    diff = (
        (our_logits(mot, vit, input_ids, ids, **vision) - hf_logits(hf, input_ids, ids, **vision)).abs().max()
    )
    assert diff.item() <= 1e-4


def test_video_text_logits_match(pair):
    hf, mot, vit, meta, _ = pair
    ids = ids_of(meta)
    input_ids = torch.tensor([video_prompt(ids)])
    vision = dict(pixel_values_videos=pixels(32, seed=3), video_grid_thw=torch.tensor([VID_GRID]))
    diff = (
        (our_logits(mot, vit, input_ids, ids, **vision) - hf_logits(hf, input_ids, ids, **vision)).abs().max()
    )
    assert diff.item() <= 1e-4


def test_padded_batch_with_images_and_video_matches_per_sample(pair):
    """Right-padded batch: sample 0 image + video, sample 1 two images; each equals HF run alone."""
    hf, mot, vit, meta, _ = pair
    ids = ids_of(meta)
    small = (1, 4, 4)
    p0 = image_prompt(ids) + video_prompt(ids)
    p1 = [3] + image_placeholder(small, ids) + [4] + image_placeholder(IMG_GRID, ids) + [5]
    n = max(len(p0), len(p1))
    batch = torch.tensor([p0 + [0] * (n - len(p0)), p1 + [0] * (n - len(p1))])
    img0, vid0, img1a, img1b = pixels(24, 4), pixels(32, 5), pixels(16, 6), pixels(24, 7)
    ours = our_logits(
        mot, vit, batch, ids, lengths=torch.tensor([len(p0), len(p1)]),
        pixel_values=torch.cat([img0, img1a, img1b]), image_grid_thw=torch.tensor([IMG_GRID, small, IMG_GRID]),
        pixel_values_videos=vid0, video_grid_thw=torch.tensor([VID_GRID]),
    )  # fmt: skip
    ref0 = hf_logits(
        hf, torch.tensor([p0]), ids, pixel_values=img0, image_grid_thw=torch.tensor([IMG_GRID]),
        pixel_values_videos=vid0, video_grid_thw=torch.tensor([VID_GRID]),
    )  # fmt: skip
    ref1 = hf_logits(
        hf, torch.tensor([p1]), ids, pixel_values=torch.cat([img1a, img1b]),
        image_grid_thw=torch.tensor([small, IMG_GRID]),
    )  # fmt: skip
    torch.testing.assert_close(ours[0, : len(p0)], ref0[0], atol=1e-4, rtol=0)
    torch.testing.assert_close(ours[1, : len(p1)], ref1[0], atol=1e-4, rtol=0)


def _hf_greedy(hf, input_ids, ids, n, **vision):
    out = hf.generate(
        input_ids=input_ids, mm_token_type_ids=token_types(input_ids, ids), max_new_tokens=n, min_new_tokens=n,
        do_sample=False, pad_token_id=0, **vision,
    )  # fmt: skip
    return out[:, input_ids.shape[1] :]


def test_greedy_generation_matches_hf_generate(pair):
    hf, mot, vit, meta, _ = pair
    ids = ids_of(meta)
    text = torch.randint(0, 290, (1, 9), generator=torch.Generator().manual_seed(8))
    ours = generate(mot, text, max_new_tokens=20).tokens
    assert torch.equal(ours, _hf_greedy(hf, text, ids, 20))
    # With an image the decode positions continue from the prompt's largest mRoPE position.
    input_ids = torch.tensor([image_prompt(ids)])
    vision = dict(pixel_values=pixels(24, seed=9), image_grid_thw=torch.tensor([IMG_GRID]))
    with torch.no_grad():
        inputs = build_reasoner_inputs(mot, vit, input_ids, ids, **vision)
    ours = generate(mot, **inputs.reason_kwargs(), max_new_tokens=20).tokens
    assert torch.equal(ours, _hf_greedy(hf, input_ids, ids, 20, **vision))


# ------------------------------------------------------------------------------------------------
# The Generator starts as the VLM
# ------------------------------------------------------------------------------------------------


def test_generator_tower_equals_reasoner_after_loading(pair):
    _, mot, _, _, _ = pair
    for layer in mot.layers:
        ar, dm = layer.ar.state_dict(), layer.dm.state_dict()
        assert ar.keys() == dm.keys() and all(torch.equal(ar[k], dm[k]) for k in ar)
        assert all(
            a.data_ptr() != d.data_ptr()
            for a, d in zip(layer.ar.parameters(), layer.dm.parameters(), strict=True)
        )
    assert torch.equal(mot.norm_dm.weight, mot.norm.weight)
    assert (
        not mot.time_embed.linear_2.weight.any() and not mot.audio_embed.any() and not mot.action_embed.any()
    )


def test_generator_output_on_ar_only_attention_equals_reasoner(pair):
    """Prefix [0, k) in the Reasoner (with an image); token k as one clean Generator token at its
    own mRoPE position: the Generator's full attention over [prefix; k] is the Reasoner's causal row k."""
    _, mot, vit, meta, _ = pair
    ids = ids_of(meta)
    input_ids = torch.tensor([image_prompt(ids)])
    vision = dict(pixel_values=pixels(24, seed=10), image_grid_thw=torch.tensor([IMG_GRID]))
    with torch.no_grad():
        inp = build_reasoner_inputs(mot, vit, input_ids, ids, **vision)
        full = mot.reason(**inp.reason_kwargs()).hidden
        n = input_ids.shape[1]
        for k in range(n - 4, n):  # the text tokens after the image
            cache = mot.reason(
                inputs_embeds=inp.inputs_embeds[:, :k], positions=inp.positions[:, :, :k],
                deepstack=[d[:, :k] for d in inp.deepstack],
            ).cache  # fmt: skip
            h = mot.run_generator(
                cache, inp.inputs_embeds[:, k : k + 1], inp.positions[:, :, k : k + 1], None
            )
            torch.testing.assert_close(h[0, 0], full[0, k], atol=1e-5, rtol=1e-5)


def test_reasoner_only_load_has_no_generator_and_same_logits(pair):
    _, mot, vit, meta, folder = pair
    ro, _, _ = load_qwen3vl(folder, with_generator=False)
    assert ro.config.generator is None and not any(".dm." in n for n, _ in ro.named_parameters())
    ids = torch.randint(0, 290, (1, 7), generator=torch.Generator().manual_seed(11))
    with torch.no_grad():
        assert torch.equal(ro.reason(ids).logits, mot.reason(ids).logits)


# ------------------------------------------------------------------------------------------------
# Folders, shards, dtypes, export
# ------------------------------------------------------------------------------------------------


def test_sharded_folder_and_bf16(pair, tmp_path):
    hf, mot, _, _, _ = pair
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    sharded, _, _ = load_qwen3vl(tmp_path)
    fresh = ("time_embed.", "video_", "audio_", "action_")  # Generator-only, randomly initialised
    for (n, a), (_, b) in zip(mot.named_parameters(), sharded.named_parameters(), strict=True):
        assert n.startswith(fresh) or torch.equal(a, b), n
    half, vit16, _ = load_qwen3vl(tmp_path, dtype="bfloat16")
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16} == {p.dtype for p in vit16.parameters()}


def test_import_cli_writes_a_checkpoint_that_reasons_alike(pair, tmp_path):
    _, mot, _, _, folder = pair
    ids = torch.randint(0, 290, (1, 6), generator=torch.Generator().manual_seed(12))
    assert import_main([str(folder), str(tmp_path / "full")]) == 0
    assert (tmp_path / "full" / "tokenizer_config.json").is_file()  # passed through
    full, vit, meta = load_model(tmp_path / "full")
    assert vit is not None and meta["token_ids"] == TOK
    assert import_main([str(folder), str(tmp_path / "ro"), "--reasoner-only"]) == 0
    ro, _, _ = load_model(tmp_path / "ro")
    assert ro.config.generator is None
    with torch.no_grad():
        ref = mot.reason(ids).logits
        assert torch.equal(full.reason(ids).logits, ref) and torch.equal(ro.reason(ids).logits, ref)


def test_patchify_matches_qwen_video_processor_layout():
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    cfg = dataclasses.replace(vit_config_from_hf(json.loads(FIXTURE.read_text())), patch_size=4)
    frames = torch.randn(3, 3, 16, 24)  # 3 frames: the last one is repeated to fill the temporal patch
    ours, grid = image_patches(frames, cfg)
    ref, t, h, w = Qwen3VLVideoProcessor.patchify(None, frames[None], 4, 2, 2)
    assert grid.tolist() == [[t, h, w]] and torch.equal(ours, ref[0])


# ------------------------------------------------------------------------------------------------
# Bad input names the problem
# ------------------------------------------------------------------------------------------------


@pytest.fixture
def hf_folder(pair, tmp_path) -> Path:
    folder = tmp_path / "copy"
    shutil.copytree(pair[4], folder)
    return folder


def _rewrite(folder: Path, change) -> None:
    path = folder / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    change(tensors)
    save_file(tensors, str(path))


def test_folder_errors(tmp_path, hf_folder):
    with pytest.raises(FileNotFoundError, match="not a folder"):
        load_qwen3vl(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_qwen3vl(tmp_path / "empty")
    (hf_folder / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        load_qwen3vl(hf_folder)


def test_other_architecture_raises(hf_folder):
    cfg = json.loads((hf_folder / "config.json").read_text())
    cfg["architectures"] = ["Qwen2_5_VLForConditionalGeneration"]
    (hf_folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="Qwen2_5_VLForConditionalGeneration"):
        load_qwen3vl(hf_folder)


def test_missing_extra_and_misshapen_tensors_are_named(hf_folder):
    q = "model.language_model.layers.1.self_attn.q_proj.weight"

    def break_it(t):
        del t["model.visual.merger.linear_fc2.bias"]
        t["model.visual.bogus.weight"] = torch.zeros(2)
        t[q] = torch.zeros(3, 3)

    _rewrite(hf_folder, break_it)
    with pytest.raises(ValueError, match=r"missing \['model.visual.merger.linear_fc2.bias'\].*bogus"):
        load_qwen3vl(hf_folder)
    bias = "model.visual.merger.linear_fc2.bias"
    _rewrite(
        hf_folder,
        lambda t: (
            t.pop("model.visual.bogus.weight"),
            t.update({bias: t["model.language_model.norm.weight"].clone()}),
        ),
    )
    with pytest.raises(ValueError, match=f"shape mismatches.*{q}: \\(3, 3\\)"):
        load_qwen3vl(hf_folder)


def test_dtypes_that_cannot_be_honoured(hf_folder):
    with pytest.raises(ValueError, match="int8"):
        load_qwen3vl(hf_folder, dtype="int8")
    with pytest.raises(ValueError, match="cannot be honoured"):
        load_qwen3vl(hf_folder, dtype=torch.int64)
    name = "model.language_model.norm.weight"
    _rewrite(hf_folder, lambda t: t.update({name: t[name].to(torch.bfloat16)}))
    with pytest.raises(ValueError, match=f"mixed stored dtypes.*BF16.*{name}"):
        load_qwen3vl(hf_folder)
    assert load_qwen3vl(hf_folder, dtype=torch.float32)[0].norm.weight.dtype == torch.float32
    _rewrite(hf_folder, lambda t: t.update({name: t[name].to(torch.int8)}))
    with pytest.raises(ValueError, match=f"{name}.*not floating point"):
        load_qwen3vl(hf_folder, dtype="float32")


def test_placeholder_count_mismatch_raises(pair):
    _, mot, vit, meta, _ = pair
    ids = ids_of(meta)
    input_ids = torch.tensor([image_prompt(ids)[:-6]])  # image cut short
    with pytest.raises(ValueError, match="image"):
        build_reasoner_inputs(
            mot, vit, input_ids, ids, pixel_values=pixels(24, 0), image_grid_thw=torch.tensor([IMG_GRID])
        )
