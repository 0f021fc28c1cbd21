"""The current frame in the Reasoner (`reasoner_frame`): a reasoner stage with a ViT, then a Generator
stage whose clips show the Reasoner their first frame before the instruction, then a policy that shows
it the frame it plans from. Checked against the frames LeRobot decodes (the oracle for which frame a
clip shows), against batches built independently, and by changing only the shown frame."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cosmos3_robot.encoders.vision_inputs import frame_patches
from cosmos3_robot.policies.rollout import WorldModelPolicy
from cosmos3_robot.policies.runners import PolicyRunner, SamplingConfig
from cosmos3_robot.policies.world_model import WorldModel


def _fit(overrides):
    from cosmos3_robot.scripts.train import build_data, compose
    from cosmos3_robot.training.trainer import Trainer, build_model

    cfg = compose(overrides)
    model, vit = build_model(cfg)
    data = build_data(cfg, model.config, vit)
    return Trainer(cfg, data, model=model, vit=vit).fit(), data


@pytest.fixture(scope="module")
def shown(tiny_world, tmp_path_factory):
    """Reasoner + tiny ViT for 2 steps, then a Generator stage showing frames for 2 steps."""
    _, root, _ = tiny_world
    common = [
        "model=tiny", "steps=2", "data.source=lerobot", f"data.root={root}", "data.batch_size=2",
        "+data.options.val_fraction=0.34", "progress=false",
    ]  # fmt: skip
    reasoner, _ = _fit(["stage=reasoner", "model.vit=tiny", f"out={tmp_path_factory.mktemp('r')}", *common])
    summary, data = _fit([
        "stage=generator", f"model.init={reasoner['model']}", f"out={tmp_path_factory.mktemp('g')}", *common,
        "+data.options.num_frames=5", "+data.options.num_actions=4", "+data.options.vae_preset=tiny",
        "+data.options.reasoner_frame=true", f"+data.options.latent_cache={tmp_path_factory.mktemp('cache')}",
    ])  # fmt: skip
    return WorldModel.from_folder(summary["model"]), data, root


def lerobot_frame(root, episode: int, frame: int) -> torch.Tensor:
    """uint8 (3, H, W) as LeRobot's own loader decodes it."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset("local/reach", root=root)
    col = ds.hf_dataset.data
    eps, frames = col.column("episode_index").to_numpy(), col.column("frame_index").to_numpy()
    row = int(np.flatnonzero((eps == episode) & (frames == frame))[0])
    return (ds[row]["observation.image"] * 255).round().to(torch.uint8)


def test_cached_clips_show_the_reasoner_their_first_frame(shown):
    world, data, root = shown
    assert data.cache is not None and data.shown is not None
    size, vc = data.shown.size, world.vit.config
    for idx in data.train_idx[:3]:
        sample = data.robot_clips[int(idx)]
        assert "video" not in sample  # read from the table: the frame comes from its decoded episode
        batch = data.robot_batch([sample])
        ep, fr = int(sample["episode_index"]), int(sample["frame_index"])
        got = batch.images["pixel_values"]
        right = frame_patches(lerobot_frame(root, ep, fr), vc, size)[0]
        assert (
            got - right
        ).abs().max() < 0.05  # decoders agree to a few levels of 255 (x2 after normalising)
        n = int(data.ds.lerobot.meta.episodes[ep]["length"])
        other = frame_patches(lerobot_frame(root, ep, fr + 3 if fr + 3 < n else fr - 3), vc, size)[0]
        assert (got - other).abs().mean() > 3 * (got - right).abs().mean()  # the arm moved: not that frame
        end = data.tokenizer.vision_ids.vision_end_token_id
        ids = batch.input_ids[0, : int(batch.lengths[0])].tolist()
        assert data.tokenizer.decode(ids[ids.index(end) + 1 :]) == sample["task"]


def test_select_and_prompt_dropout_keep_each_row_its_frame(shown):
    from cosmos3_robot.encoders.vision_inputs import build_reasoner_inputs

    world, data, _ = shown
    samples = [data.robot_clips[int(i)] for i in data.train_idx[:3]]
    batch = data.robot_batch(samples)
    picked = batch.select(torch.tensor([2, 0]))
    alone = data.robot_batch([samples[2], samples[0]])  # built independently
    assert torch.equal(picked.images["pixel_values"], alone.images["pixel_values"])
    assert picked.images["image_grid_thw"].tolist() == alone.images["image_grid_thw"].tolist()
    from cosmos3_robot.training.data.batches import shard_batch

    rank1 = shard_batch(batch, 3, 1, 3)  # what the second of two ranks trains on
    assert torch.equal(rank1.images["pixel_values"], data.robot_batch(samples[1:]).images["pixel_values"])

    dropped = batch.drop_prompts(torch.tensor([True, False, False]), null_token=0)
    end = data.tokenizer.vision_ids.vision_end_token_id
    keep = batch.input_ids[0].tolist().index(end) + 1
    assert dropped.input_ids[0, :keep].tolist() == batch.input_ids[0, :keep].tolist()
    assert dropped.input_ids[0, keep] == 0 and int(dropped.lengths[0]) == keep + 1
    assert torch.equal(dropped.input_ids[1:], batch.input_ids[1:])
    # every row still has the placeholders its patches fill
    build_reasoner_inputs(
        world.model, world.vit, dropped.input_ids, dropped.images["vision_token_ids"], lengths=dropped.lengths,
        pixel_values=dropped.images["pixel_values"], image_grid_thw=dropped.images["image_grid_thw"],
    )  # fmt: skip


def test_the_reasoner_reads_the_frame_the_policy_plans_from(shown):
    world, data, root = shown
    assert world.reads_frames
    a, b = lerobot_frame(root, 0, 0), lerobot_frame(root, 1, 0)
    frames = torch.stack([a, a]).permute(0, 2, 3, 1)  # (B, H, W, 3)
    latents = world.encode_frames(frames[:, None])
    task = data.ds[0]["task"]
    with pytest.raises(ValueError, match="frames="):
        world.clip_batch([task, task], latents, obs_frames=1)
    same = world.reasoned(world.clip_batch([task, task], latents, obs_frames=1, frames=frames))
    other = torch.stack([a, b]).permute(0, 2, 3, 1)
    diff = world.reasoned(world.clip_batch([task, task], latents, obs_frames=1, frames=other))
    k_same, k_diff = same.cache.kv[-1][0], diff.cache.kv[-1][0]
    assert torch.equal(k_same[0], k_same[1])  # one frame, one task: one Reasoner state
    assert torch.equal(k_diff[0], k_same[0]) and not torch.allclose(k_diff[1], k_same[1])
    runner = PolicyRunner(world, execute=2, sampling=SamplingConfig(steps=2))
    assert runner.prepare(task) is None  # no pass before the frame: each plan runs its own
    assert WorldModelPolicy(world).prepare(task) is False  # so a rollout records no setup time
    with pytest.raises(ValueError, match="needs the frame"):
        world.reasoned_text(task)
    chunk = runner.plan(a.permute(1, 2, 0).numpy(), task)
    assert chunk.shape == (world.geometry.num_actions, 2) and np.isfinite(chunk).all()
    with pytest.raises(ValueError, match="no ViT was given"):
        WorldModel(world.model, world.vae, world.data_state)


def test_showing_frames_needs_the_reasoner_stage_vit(tiny_world):
    from cosmos3_robot.model import preset
    from cosmos3_robot.training.data import DataConfig, make_generator_data

    _, root, _ = tiny_world
    cfg = DataConfig(root=str(root), num_frames=5, num_actions=4, vae_preset="tiny", reasoner_frame=True)
    with pytest.raises(ValueError, match=r"reasoner_frame=true .*model\.init=OUT/model"):
        make_generator_data(cfg, preset("tiny"))
