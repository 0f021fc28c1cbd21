"""Training data sources (training/data.py): ClipBatches for the Generator, TextBatches for the Reasoner."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields

import pytest
import torch

from cosmos3_robot.datasets.text import direction, scene_points
from cosmos3_robot.model import MoT, preset
from cosmos3_robot.processors.tokenizers import ByteTokenizer
from cosmos3_robot.tasks import ClipBatch
from cosmos3_robot.training.data import (
    IGNORE,
    DataConfig,
    TextBatch,
    make_generator_data,
    make_reasoner_data,
)
from tests._data_fixtures import record_small, write_tiny_dataset

FPS = 10


@pytest.fixture(scope="module")
def reach(tmp_path_factory):
    """3 short Reach episodes (7-16 frames) at 32 px, 10 fps."""
    root = tmp_path_factory.mktemp("data") / "reach"
    record_small(root, episodes=3, fps=FPS, image_size=32)
    return root


def gen_cfg(root, **kw) -> DataConfig:
    base = dict(
        root=str(root),
        num_frames=5,
        num_actions=5,
        batch_size=3,
        val_fraction=0.34,
        seed=0,
        vae_preset="tiny",
    )
    return DataConfig(**{**base, **kw})


def same(a: ClipBatch | TextBatch, b: ClipBatch | TextBatch) -> bool:
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, torch.Tensor):
            if not (isinstance(y, torch.Tensor) and x.shape == y.shape and torch.equal(x, y)):
                return False
        elif x != y:
            return False
    return True


# ---- config ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(num_frames=4), "num_frames"),
        (dict(obs_frames=4), "obs_frames"),
        (dict(batch_size=0), "batch_size"),
        (dict(image_size=48), "image_size"),
        (dict(val_fraction=1.0), "val_fraction"),
        (dict(text="poems"), "text"),
        (dict(action_norm="z"), "action_norm"),
    ],
)
def test_config_errors_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        DataConfig(root="x", **kw)
    with pytest.raises(ValueError, match="root"):
        DataConfig()


# ---- generator ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gen(reach):
    return make_generator_data(gen_cfg(reach), preset("tiny"))


def test_clip_batch_shapes_and_time_alignment(gen):
    mc = preset("tiny")
    batches = list(gen.train_batches(0))
    assert len(batches) == -(-len(gen.train_idx) // 3)
    b = batches[0]
    assert isinstance(b, ClipBatch) and b.batch == 3
    # 5 frames at 32 px -> 2 latent frames of 2x2, the model's latent channels
    assert b.video.shape == (3, mc.latent_channels, 2, 2, 2)
    assert b.video_valid.all() and b.obs_frames == 1
    assert b.action.shape == (3, 5, mc.action_dim)
    assert (
        b.action_mask.shape == (3, mc.action_dim)
        and b.action_mask[:, :2].all()
        and not b.action_mask[:, 2:].any()
    )
    assert (b.action[..., 2:] == 0).all() and b.embodiment.tolist() == [0, 0, 0]
    assert b.input_ids.shape[0] == 3 and (b.lengths >= 1).all()
    # latent frame k stands at the time of video frame 4k: 0 s and 0.4 s at 10 fps
    torch.testing.assert_close(b.video_time, torch.tensor([[0.0, 0.4]] * 3))
    torch.testing.assert_close(b.action_time, torch.arange(5).float().div(FPS).expand(3, 5))
    # the action sample taken with latent frame 1's image shares its time in seconds
    assert b.action_time[0, 4] == pytest.approx(float(b.video_time[0, 1]))
    # the prompt is the task text
    task = ByteTokenizer().decode(b.input_ids[0, : b.lengths[0]])
    assert task.startswith("move the fingertip to the ")


def test_action_normalisation_is_the_dataset_stats_and_invertible(gen):
    i = int(gen.train_idx[0])
    sample = gen.ds[i]
    b = gen.robot_batch([sample])
    raw = sample["action"]
    torch.testing.assert_close(gen.action_transform.decode(b.action[0]), raw, atol=1e-6, rtol=0)
    stats = gen.ds.lerobot.meta.stats["action"]
    lo, hi = torch.as_tensor(stats["min"]).float(), torch.as_tensor(stats["max"]).float()
    torch.testing.assert_close(b.action[0, :, :2], (raw - (hi + lo) / 2) / ((hi - lo) / 2), atol=1e-5, rtol=0)
    assert b.action[0, :, :2].abs().max() <= 1 + 1e-5  # min_max maps the data range into [-1, 1]


def test_deterministic_per_epoch_and_seed(gen, reach):
    first = list(gen.train_batches(0))
    again = list(gen.train_batches(0))
    assert all(same(a, b) for a, b in zip(first, again, strict=True))
    other = list(gen.train_batches(1))
    assert not all(same(a, b) for a, b in zip(first, other, strict=True))
    # a fresh source with the same config (and 1 worker) gives the same batches
    fresh = make_generator_data(gen_cfg(reach, num_workers=1), preset("tiny"))
    assert all(same(a, b) for a, b in zip(first, fresh.train_batches(0), strict=True))
    val = gen.val_batches()
    assert val and val is gen.val_batches()  # computed once, fixed order
    assert set(gen.ds.row_episode[gen.ds.anchors[gen.val_idx]].tolist()) <= set(gen.split.val)
    assert not set(gen.ds.row_episode[gen.ds.anchors[gen.train_idx]].tolist()) & set(gen.split.val)
    json.dumps(gen.state().to_dict())  # saved with checkpoints
    assert gen.state().details["split"]["val"] == gen.split.val


def test_an_epoch_resumed_at_a_batch_gives_the_same_batches_from_there(gen, reach):
    """train_batches(epoch, start) is the epoch's tail: a resumed run sees what it would have seen."""
    from cosmos3_robot.training.data.synthetic import SyntheticData

    txt = make_reasoner_data(DataConfig(root=str(reach), batch_size=2, val_fraction=0.34), preset("tiny"))
    syn = SyntheticData(preset("tiny"), "generator", 2, batches_per_epoch=3)
    for src in (gen, txt, syn):
        full = list(src.train_batches(1))
        assert len(full) >= 2
        tail = list(src.train_batches(1, start=1))
        assert len(tail) == len(full) - 1
        assert all(same(a, b) for a, b in zip(full[1:], tail, strict=True))


def test_latent_cache_gives_identical_batches(gen, reach, tmp_path):
    cached = make_generator_data(gen_cfg(reach, latent_cache=str(tmp_path / "cache")), preset("tiny"))
    for a, b in zip(gen.train_batches(0), cached.train_batches(0), strict=True):
        assert same(a, b)
    assert cached.encoder.hits > 0 and cached.encoder.misses == 0
    for a, b in zip(gen.val_batches(), cached.val_batches(), strict=True):
        assert same(a, b)
    # reopening finds the cache instead of rebuilding it
    again = make_generator_data(gen_cfg(reach, latent_cache=str(tmp_path / "cache")), preset("tiny"))
    assert again.cache_dir == cached.cache_dir


@pytest.mark.parametrize("frame_stride", (1, 2))
def test_cached_training_decodes_no_video(reach, tmp_path, frame_stride):
    """With a cache, clips are read without video, padded clips included (the cache repeats the
    episode's last frame as LeRobot's clamp does), and every batch equals the decode-everything path."""
    kw = dict(num_actions=6, pad=True, batch_size=4, frame_stride=frame_stride)
    plain = make_generator_data(gen_cfg(reach, **kw), preset("tiny"))
    cached = make_generator_data(gen_cfg(reach, latent_cache=str(tmp_path / "c"), **kw), preset("tiny"))
    assert "video" not in cached.robot_clips[0] and "video" in plain.robot_clips[0]
    for a, b in zip(plain.train_batches(0), cached.train_batches(0), strict=True):
        assert same(a, b)
    assert cached.encoder.hits > 0 and cached.encoder.misses == 0
    assert any(not b.video_valid.all() for b in cached.val_batches() + list(cached.train_batches(1)))
    # a clip the cache lacks is decoded after all
    next(cached.cache_dir.glob("episode_*.safetensors")).unlink()
    holey = make_generator_data(gen_cfg(reach, latent_cache=str(tmp_path / "c"), **kw), preset("tiny"))
    for a, b in zip(plain.train_batches(0), holey.train_batches(0), strict=True):
        assert same(a, b)
    assert holey.encoder.misses > 0


def test_frame_stride_cache_and_times(reach, tmp_path):
    """Video at 5 fps (every 2nd frame), actions at 10 Hz: latent 1 sits at 0.8 s = action 8."""
    kw = dict(frame_stride=2, num_actions=9, pad=True, batch_size=4)
    plain = make_generator_data(gen_cfg(reach, **kw), preset("tiny"))
    cached = make_generator_data(gen_cfg(reach, latent_cache=str(tmp_path / "c"), **kw), preset("tiny"))
    a, b = next(plain.train_batches(0)), next(cached.train_batches(0))
    assert same(a, b)
    assert a.video_time[0].tolist() == pytest.approx([0.0, 0.8])
    assert a.action_time[0, 8] == pytest.approx(0.8)
    assert cached.encoder.hits > 0


def test_action_free_clips_mix_in(reach, tmp_path):
    folder = tmp_path / "free"
    folder.mkdir()
    video = next((reach / "videos").rglob("*.mp4"))
    shutil.copy(video, folder / "clip.mp4")
    (folder / "clip.txt").write_text("watch the arm")
    src = make_generator_data(gen_cfg(reach, action_free_folder=str(folder), clip_stride=4), preset("tiny"))
    batches = list(src.train_batches(0))
    free = [b for b in batches if b.action is None]
    robot = [b for b in batches if b.action is not None]
    assert free and robot
    b = free[0]
    assert b.video.shape[1:] == robot[0].video.shape[1:] and b.embodiment is None
    torch.testing.assert_close(b.video_time[0], robot[0].video_time[0])
    assert ByteTokenizer().decode(b.input_ids[0]) == "watch the arm"


def test_generator_bad_inputs(reach, tmp_path):
    with pytest.raises(ValueError, match=r"dataset .*reach.*'nope'"):
        make_generator_data(gen_cfg(reach, action_key="nope"), preset("tiny"))
    from cosmos3_robot.encoders.vae import VideoVAE, vae_config

    VideoVAE(vae_config("tiny", latent_channels=4)).save_pretrained(tmp_path / "vae4")
    with pytest.raises(ValueError, match="latent channels"):
        make_generator_data(gen_cfg(reach, vae=str(tmp_path / "vae4"), vae_preset=None), preset("tiny"))
    with pytest.raises(ValueError, match="embodiment"):
        make_generator_data(gen_cfg(reach, embodiment=5), preset("tiny"))


# ---- reasoner -------------------------------------------------------------------------------------
def test_reasoner_labels_only_on_the_answer(reach):
    src = make_reasoner_data(DataConfig(root=str(reach), batch_size=4, val_fraction=0.34), preset("tiny"))
    tok = src.tokenizer
    batches = list(src.train_batches(0))
    assert sum(b.batch for b in batches) == len(src.train_rows)
    b = batches[0]
    assert b.reason_kwargs == {} and b.labels.shape == b.input_ids.shape
    for i in range(b.batch):
        n = int(b.lengths[i])
        text = tok.decode(b.input_ids[i, :n])
        assert text.startswith("Q: ") and " A: " in text
        answer = text.split(" A: ", 1)[1]
        has = (b.labels[i] != IGNORE).nonzero().flatten()
        start = int(has[0])
        # labels[t] = input_ids[t + 1] on the answer (and its EOS), -100 on prompt and padding
        assert torch.equal(b.labels[i, start : n - 1], b.input_ids[i, start + 1 : n])
        assert int(has[-1]) == n - 2 and b.input_ids[i, n - 1] == tok.eos_id
        assert tok.decode(b.labels[i, has]) == answer
        assert (b.labels[i, n - 1 :] == IGNORE).all()
    assert all(same(x, y) for x, y in zip(batches, src.train_batches(0), strict=True))
    json.dumps(src.state().to_dict())


def test_reasoner_answers_match_recorded_state(reach):
    src = make_reasoner_data(DataConfig(root=str(reach), text="qa", val_fraction=0.34), preset("tiny"))
    names = {"target": "goal", "fingertip": "fingertip", "distractor": "distractor"}
    for row in src.train_rows + src.val_rows:
        qa = src.qa(row)
        pts = scene_points(src.state_names, row["env"])
        q = qa.question.removesuffix("?").split(" the ")
        a, b = names[q[1].split(" ")[0]], names[q[2]]
        offset = pts[a] - pts[b]
        if qa.kind == "relative":
            assert qa.answer == f"{direction(offset)}, {float(torch.tensor(offset).norm()):.2f} m"
        else:
            assert qa.answer == f"{float(torch.tensor(offset).norm()):.2f} m"


def test_reasoner_with_images_feeds_the_vit(reach):
    from cosmos3_robot.encoders.vit import ViT, vit_preset

    mc = preset("tiny")
    torch.manual_seed(0)
    vit, model = ViT(vit_preset("tiny", mc.reasoner.hidden_size)), MoT(mc)
    src = make_reasoner_data(DataConfig(root=str(reach), batch_size=2, val_fraction=0.34), mc, vit)
    b = next(iter(src.train_batches(0)))
    assert b.has_images and b.reason_kwargs["image_grid_thw"].tolist() == [[1, 8, 8], [1, 8, 8]]
    # 32 px / patch 4 = 8x8 patches -> 16 merged image tokens per sample
    assert int((b.input_ids == src.tokenizer.vision_ids.image_token_id).sum()) == 2 * 16
    out = model.reason(**b.reasoner_inputs(model, vit))
    logits = out.logits
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), b.labels.flatten(), ignore_index=IGNORE)
    loss.backward()
    assert torch.isfinite(loss) and vit.patch_embed.proj.weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="ViT"):
        b.reasoner_inputs(model)


def test_reasoner_bad_inputs(tmp_path):
    root = write_tiny_dataset(tmp_path / "tiny", [6, 6])
    with pytest.raises(ValueError, match=r"dataset .*tiny.*'observation.environment_state'"):
        make_reasoner_data(DataConfig(root=str(root), val_fraction=0.0), preset("tiny"))
    # captions need no simulator state
    src = make_reasoner_data(DataConfig(root=str(root), val_fraction=0.0, text="caption"), preset("tiny"))
    b = next(iter(src.train_batches(0)))
    assert src.tokenizer.decode(b.input_ids[0]).endswith("A: tiny")
    small = preset("tiny")
    small.vocab_size = 100
    with pytest.raises(ValueError, match="vocab_size"):
        make_reasoner_data(DataConfig(root=str(root), val_fraction=0.0, text="caption"), small)


def test_the_generator_stage_needs_a_vae_worth_freezing(reach, tmp_path):
    from cosmos3_robot.encoders.vae import QUALITY_FILE, VideoVAE, vae_config
    from cosmos3_robot.files import write_json

    with pytest.raises(ValueError, match="needs a frozen video VAE.*vae_preset=tiny"):
        make_generator_data(gen_cfg(reach, vae_preset=None), preset("tiny"))
    folder = tmp_path / "vae"
    VideoVAE(vae_config("tiny")).save_pretrained(folder)
    write_json(
        folder / QUALITY_FILE, {"latent_spread": 0.01, "later_latent_use": 0.6}
    )  # as train-vae writes it
    with pytest.raises(ValueError, match="not worth freezing.*latent spread is 0.01"):
        make_generator_data(gen_cfg(reach, vae_preset=None, vae=str(folder)), preset("tiny"))
    make_generator_data(gen_cfg(reach, vae_preset=None, vae=str(folder), allow_weak_vae=True), preset("tiny"))
