"""The frame-to-frame inverse-dynamics labeller: its transitions against the maths, learning a drawn
square's velocity (the drawing is the oracle) at one frame rate and labelling it at another,
`train-labeller` on a recorded dataset, and `label --labeller` writing a LeRobot dataset."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cosmos3_robot.encoders.inverse_dynamics import (
    InverseDynamicsLabeller,
    LabellerConfig,
    load_labeller,
    save_labeller,
    triplet_indices,
)


def config(size=32, dim=2, fps=10.0, **kw):
    return LabellerConfig("action", dim, size, fps, width=8, **kw)


def test_triplets_are_the_frames_before_at_and_after_each_transition():
    np.testing.assert_array_equal(triplet_indices(4), [[0, 0, 1], [0, 1, 2], [1, 2, 3]])
    np.testing.assert_array_equal(triplet_indices(2), [[0, 0, 1]])
    with pytest.raises(ValueError, match="has no transition"):
        triplet_indices(1)


def moving_square(n: int, fps: float, rng: np.random.Generator):
    """Triplets of grey 32 px frames with a red 4 px square moving at a constant velocity v (the action,
    in pixels per 0.1 s, each component in [-1.5, 1.5] · 2) from a random start: frame k shows it at
    start + v · k · 10 / fps."""
    frames = np.full((n, 3, 32, 32, 3), 128, np.uint8)
    action = rng.uniform(-1.5, 1.5, (n, 2)).astype(np.float32)
    step = action * 2.0 * 10.0 / fps
    for i in range(n):
        start = rng.uniform(6, 22, 2)
        for k in range(3):
            x, y = np.round(start + (k - 1) * step[i]).astype(int)
            frames[i, k, y : y + 4, x : x + 4] = (230, 20, 20)
    return torch.from_numpy(frames).permute(0, 1, 4, 2, 3), torch.from_numpy(action)


def test_it_learns_the_velocity_at_one_rate_and_labels_another():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    frames, action = moving_square(1024, 10.0, rng)
    model = InverseDynamicsLabeller(config(keypoints=8))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rate = torch.full((32,), 10.0)
    for _ in range(300):
        idx = torch.randint(0, 1024, (32,))
        loss = torch.nn.functional.mse_loss(model(frames[idx], rate), action[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()

    def r2(fps: float) -> float:
        f, a = moving_square(256, fps, np.random.default_rng(int(fps)))
        with torch.no_grad():
            pred = model(f, torch.full((256,), fps))
        return 1 - float(((pred - a) ** 2).mean() / a.var(0).mean())

    at_10, at_15 = r2(10.0), r2(15.0)
    assert at_10 > 0.8, at_10  # held out, at the training rate
    assert at_15 > 0.6, at_15  # the same motion filmed at 15 Hz moves 2/3 as far per frame
    with torch.no_grad():  # and read as if at 10 Hz, the slower motion reads as smaller actions
        f, a = moving_square(256, 15.0, np.random.default_rng(15))
        wrong = model(f, torch.full((256,), 10.0))
    assert 1 - float(((wrong - a) ** 2).mean() / a.var(0).mean()) < at_15


def test_save_load_round_trip_labels_every_frame_and_checks_the_frames(tmp_path):
    torch.manual_seed(0)
    model = InverseDynamicsLabeller(config(dim=3)).eval()
    model.mean.copy_(torch.arange(3.0))
    save_labeller(tmp_path / "lab", model, {"command": "test", "config": {"steps": 1}})
    back = load_labeller(tmp_path / "lab")
    frames = np.random.default_rng(0).integers(0, 255, (5, 32, 32, 3), dtype=np.uint8)
    labels = back.label_episode(frames, fps=10.0)
    assert labels.shape == (5, 3) and labels.dtype == np.float32
    np.testing.assert_array_equal(labels, model.label_episode(frames, fps=10.0))
    np.testing.assert_array_equal(labels[-1], labels[-2])  # the last frame has no next one: held
    with torch.no_grad():  # frame 2's label is the model on frames (1, 2, 3)
        direct = model.denormalise(
            model(torch.from_numpy(frames[1:4]).permute(0, 3, 1, 2)[None], torch.tensor([10.0]))
        )
    np.testing.assert_allclose(labels[2], direct[0].numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="reads 32x32 RGB frames"):
        back.label_episode(frames[:, :16], fps=10.0)
    with pytest.raises(ValueError, match="frame rate must be positive"):
        back.label_episode(frames, fps=0.0)
    with pytest.raises(FileNotFoundError, match="train-labeller"):
        load_labeller(tmp_path)
    with pytest.raises(ValueError, match="fps must be a positive frame rate"):
        config(fps=0)


def test_train_labeller_on_a_recording_writes_a_folder_resumes_and_labels(tiny_world, tmp_path, capsys):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from cosmos3_robot.cli import main
    from cosmos3_robot.training.inverse_dynamics import LabellerTrainConfig, train_labeller

    model_dir, root, _ = tiny_world
    cfg = LabellerTrainConfig(out=str(tmp_path / "run"), root=[str(root)], holdout_episodes=1, steps=4,
                              eval_every=2, save_every=2, batch_size=4, width=8, keypoints=4)  # fmt: skip
    first = train_labeller(cfg, {"command": "test", "config": {"steps": 4}}, log=lambda s: None)
    assert first["steps_run"] == 4 and len(first["r2_per_dim"]) == 2 and first["mean_action_mse"] > 0
    lab = load_labeller(first["labeller"])
    assert lab.config.image_size == 32 and lab.config.fps == 10.0 and lab.config.action_dim == 2
    cfg.steps = 6
    second = train_labeller(cfg, {"command": "test"}, log=lambda s: None)
    assert second["steps_run"] == 2 and second["step"] == 6

    out = tmp_path / "labelled"
    argv = ["label", "--labeller", first["labeller"], "--source", str(root), "--out", str(out), "--check",
            "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    report = json.loads((out / "meta" / "cosmos3_label.json").read_text())
    source = LeRobotDataset("local/reach", root=root)
    ds = LeRobotDataset("local/labelled", root=out)
    assert ds.meta.total_frames == source.meta.total_frames and report["episodes_done"] == 3
    assert "label_confidence" not in ds.meta.features and ds[0]["action"].shape == (2,)
    first_ep = np.stack([ds[i]["action"].numpy() for i in range(ds.meta.episodes[0]["length"])])
    from cosmos3_robot.datasets.episodes import open_source, read_episodes

    frames = next(read_episodes(open_source(root), [0])).frames  # as label decodes them
    latest = load_labeller(second["labeller"])  # the resumed run rewrote the folder
    np.testing.assert_allclose(first_ep, latest.label_episode(frames, 10.0), atol=1e-5)
    assert {"mse", "r2", "mean_action_mse"} <= set(report["check"])
    assert report["frames_per_second"] > 0 and "vae_encode_frames_per_second" not in report  # no VAE
    both = ["label", "--labeller", first["labeller"], "--model", str(model_dir), "--source", str(root),
            "--out", str(tmp_path / "o")]  # fmt: skip
    assert main(both) == 2
    assert "exactly one of --model" in capsys.readouterr().err


def test_train_labeller_refuses_a_dataset_without_actions(tmp_path):
    from cosmos3_robot.training.inverse_dynamics import LabellerTrainConfig, train_labeller
    from cosmos3_robot.viz.video import write_mp4

    videos = tmp_path / "videos"
    videos.mkdir()
    write_mp4(videos / "a.mp4", np.zeros((4, 32, 32, 3), np.uint8), fps=10)
    cfg = LabellerTrainConfig(out=str(tmp_path / "run"), root=[str(videos)], holdout_episodes=1)
    with pytest.raises(ValueError, match="has no action column"):
        train_labeller(cfg, {}, log=lambda s: None)
    with pytest.raises(ValueError, match="train_episodes must be a positive"):
        LabellerTrainConfig(out="x", root=["y"], train_episodes=0)
