"""Clip datasets: seconds on the time axis at 10/15/30 fps, episode boundaries, padding,
normalisation, splits, DataLoader workers, action-free video folders, bad input."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from cosmos3_robot.datasets import (
    ClipDataset,
    ClipDatasetConfig,
    ClipSpec,
    EpisodeSplit,
    Normalizer,
    VideoFolderDataset,
    common_rate,
    dataset_split,
    make_dataloader,
    split_episodes,
)
from tests._data_fixtures import record_small, write_tiny_dataset

FPS = (10, 15, 30)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """Reach datasets recorded by the real recorder at 10, 15 and 30 fps (2 episodes, 32 px)."""
    base = tmp_path_factory.mktemp("clips")
    return {fps: record_small(base / f"reach{fps}", episodes=2, fps=fps).root for fps in FPS}


def _raw(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    ds = LeRobotDataset(f"local/{root.name}", root=root)
    cols = ds.hf_dataset.with_format("numpy")
    return {
        k: np.asarray(cols[k])
        for k in ("observation.state", "action", "timestamp", "episode_index", "frame_index")
    }


@pytest.mark.parametrize("fps", FPS)
def test_frame_and_action_times_are_seconds(recorded, fps):
    spec = ClipSpec(num_frames=3, video_fps=5, num_actions=4, action_hz=5)  # one physical spec for all fps
    ds = ClipDataset(root=recorded[fps], spec=spec)
    raw = _raw(recorded[fps])
    s = ds[2]
    np.testing.assert_allclose(s["video_time"].numpy(), [0.0, 0.2, 0.4], atol=1e-6)
    np.testing.assert_allclose(s["action_time"].numpy(), [0.0, 0.2, 0.4, 0.6], atol=1e-6)
    step = fps // 5
    for k, t in enumerate(s["video_time"].tolist()):  # the state at video time t is the stored frame at t
        row = 2 + k * step
        assert raw["timestamp"][row] - raw["timestamp"][2] == pytest.approx(t, abs=1e-4)
        np.testing.assert_array_equal(s["state"][k].numpy(), raw["observation.state"][row])
    for j, t in enumerate(s["action_time"].tolist()):
        row = 2 + round(t * fps)
        np.testing.assert_array_equal(s["action"][j].numpy(), raw["action"][row])
    # a frame and an action at the same time share that time exactly
    assert set(s["video_time"].tolist()) <= set(s["action_time"].tolist())
    # default rates: native fps
    s = ClipDataset(root=recorded[fps], spec=ClipSpec(num_frames=2, num_actions=3))[0]
    np.testing.assert_allclose(s["action_time"].numpy(), np.arange(3) / fps, atol=1e-6)
    assert (
        s["video"].shape == (2, 3, 32, 32)
        and 0.0 <= float(s["video"].min()) <= float(s["video"].max()) <= 1.0
    )


def test_common_rate_and_non_dividing_rates(recorded):
    assert common_rate(*FPS) == 5.0
    with pytest.raises(ValueError, match=r"video_fps=4 Hz does not divide the dataset fps 10"):
        ClipDataset(root=recorded[10], spec=ClipSpec(video_fps=4))
    with pytest.raises(ValueError, match=r"reach15.*action_hz=10 Hz does not divide the dataset fps 15"):
        ClipDataset(root=recorded[15], spec=ClipSpec(action_hz=10))
    with pytest.raises(ValueError, match="action_hz=60"):
        ClipDataset(root=recorded[30], spec=ClipSpec(action_hz=60))


def test_clips_never_cross_episodes_and_padding_is_flagged(recorded):
    spec = ClipSpec(num_frames=4, frame_stride=2, num_actions=6)
    ds = ClipDataset(root=recorded[10], spec=spec)
    raw = _raw(recorded[10])
    lengths = np.bincount(raw["episode_index"])
    for i in range(len(ds)):
        s = ds[i]
        ep, f = s["episode_index"], s["frame_index"]
        left = lengths[ep] - f  # frames from the anchor to the episode end
        np.testing.assert_array_equal(s["video_valid"].numpy(), np.arange(4) * 2 < left)
        np.testing.assert_array_equal(s["action_valid"].numpy(), np.arange(6) < left)
        # every state (valid or padded) comes from the anchor's own episode
        start = int(np.flatnonzero(raw["episode_index"] == ep)[0])
        own = raw["observation.state"][start : start + lengths[ep]]
        assert all(any(np.array_equal(x, y) for y in own) for x in s["state"].numpy())
    full = ClipDataset(
        root=recorded[10], spec=ClipSpec(num_frames=4, frame_stride=2, num_actions=6, pad=False)
    )
    assert len(full) == len(ds) - 2 * 6  # 6 padded anchors at the end of each of 2 episodes
    assert all(full[i]["video_valid"].all() and full[i]["action_valid"].all() for i in range(0, len(full), 5))


@pytest.mark.parametrize("fps", (10, 30))
def test_reading_without_video_equals_lerobots_windows(recorded, fps):
    """The table-only read (for latent-cached training) gives LeRobot's own clip minus the frames,
    padded anchors at episode ends included; a subset of episodes too."""
    spec = ClipSpec(num_frames=3, video_fps=5, num_actions=7, pad=True)
    for episodes in (None, [1]):
        ds = ClipDataset(ClipDatasetConfig(root=recorded[fps], spec=spec, episodes=episodes))
        fast = ds.without_video()
        assert len(fast) == len(ds)
        picks = sorted({0, 1, len(ds) // 2, len(ds) - 2, len(ds) - 1})
        for i in picks:
            want, got = ds[i], fast[i]
            assert "video" not in got and got["clip_index"] == i
            assert set(want) - {"video"} == set(got) - {"clip_index"}
            for key, value in want.items():
                if isinstance(value, torch.Tensor) and key != "video":
                    assert value.dtype == got[key].dtype, key
                    torch.testing.assert_close(got[key], value, rtol=0, atol=0, msg=key)
                elif key != "video":
                    assert got[key] == value, key
        assert not fast[len(ds) - 1]["video_valid"].all()  # the last anchor is padded


def test_normalizer_from_lerobot_stats_roundtrip(recorded, tmp_path):
    ds = ClipDataset(root=recorded[10], spec=ClipSpec(num_frames=2, num_actions=4), normalize=True)
    norm = ds.normalizer
    raw = _raw(recorded[10])["action"]
    np.testing.assert_allclose(norm.stats["action"].mean, raw.mean(0), atol=1e-5)
    state = json.loads(json.dumps(norm.state_dict()))  # json-serialisable
    back = Normalizer.from_state_dict(state)
    x = torch.randn(5, 3, 2)
    for key in ("action", "observation.state"):
        y = x if key == "action" else torch.randn(5, 4)
        torch.testing.assert_close(back.unnormalize(key, back.normalize(key, y)), y, atol=1e-5, rtol=1e-5)
    z = raw[:10]
    np.testing.assert_allclose(norm.unnormalize("action", norm.normalize("action", z)), z, atol=1e-6)
    mm = Normalizer(back.stats, {"action": "min_max"})
    n = mm.normalize("action", raw)
    assert n.min() >= -1 - 1e-6 and n.max() <= 1 + 1e-6
    norm.save(tmp_path / "n.json")
    assert Normalizer.load(tmp_path / "n.json").state_dict() == norm.state_dict()
    assert ds[0]["action"].abs().max() < 10  # normalised in the sample
    with pytest.raises(ValueError, match="mode"):
        Normalizer(back.stats, {"action": "zscore"})


def test_split_by_episode_saved_as_json(recorded, tmp_path):
    s = split_episodes(20, val_fraction=0.2, seed=1)
    assert len(s.val) == 4 and not set(s.train) & set(s.val) and sorted(s.train + s.val) == list(range(20))
    assert split_episodes(20, 0.2, seed=1) == s
    path = s.save(tmp_path)
    assert EpisodeSplit.load(path) == s
    root = tmp_path / "copy"
    shutil.copytree(recorded[10], root)
    split = dataset_split(root, 2, val_fraction=0.5)
    assert (root / "meta" / "cosmos3_split.json").exists() and len(split.val) == 1
    grown = dataset_split(root, 6)
    assert set(split.val) <= set(grown.val) and set(split.train) <= set(grown.train)
    val = ClipDataset(root=root, spec=ClipSpec(num_frames=2, num_actions=2), episodes=split.val)
    assert val.episodes == split.val


def test_dataloader_batches_and_seeded_order(recorded):
    ds = ClipDataset(root=recorded[10], spec=ClipSpec(num_frames=2, video_fps=5, num_actions=4))
    order = [
        [(e, f) for e, f in zip(b["episode_index"].tolist(), b["frame_index"].tolist(), strict=True)]
        for b in make_dataloader(ds, batch_size=16, num_workers=0, seed=3)
    ]
    again = [
        [(e, f) for e, f in zip(b["episode_index"].tolist(), b["frame_index"].tolist(), strict=True)]
        for b in make_dataloader(ds, batch_size=16, num_workers=0, seed=3)
    ]
    assert order == again
    b = next(iter(make_dataloader(ds, batch_size=4, num_workers=2, seed=0)))
    assert b["video"].shape == (4, 2, 3, 32, 32) and b["action"].shape == (4, 4, 2)
    assert (
        b["video_time"].shape == (4, 2)
        and isinstance(b["task"], list)
        and b["action_valid"].dtype == torch.bool
    )


def _write_vfr_mp4(path, times_s, size=32):
    import av

    with av.open(str(path), "w") as c:
        st = c.add_stream("libx264", rate=30)
        st.width = st.height = size
        st.pix_fmt = "yuv420p"
        st.codec_context.time_base = __import__("fractions").Fraction(1, 1000)
        for i, t in enumerate(times_s):
            img = np.full((size, size, 3), (i * 20) % 256, dtype=np.uint8)
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = round(t * 1000)
            frame.time_base = st.codec_context.time_base
            for p in st.encode(frame):
                c.mux(p)
        for p in st.encode():
            c.mux(p)


def test_video_folder_times_from_container(tmp_path):
    times = [0.0, 0.1, 0.25, 0.3, 0.5, 0.6, 0.7]  # variable frame rate
    _write_vfr_mp4(tmp_path / "a.mp4", times)
    (tmp_path / "a.txt").write_text("stack the cups")
    ds = VideoFolderDataset(
        folder=tmp_path, spec=ClipSpec(num_frames=3, frame_stride=2, num_actions=4), action_dim=2
    )
    s = ds[0]
    np.testing.assert_allclose(s["video_time"].numpy(), [0.0, 0.25, 0.5], atol=2e-3)
    assert s["task"] == "stack the cups" and s["video"].shape == (3, 3, 32, 32)
    assert not s["action_valid"].any() and s["action"].shape == (4, 2)
    s = ds[5]  # anchor 0.6 s: frames 5, 7 (missing), 9 (missing)
    np.testing.assert_array_equal(s["video_valid"].numpy(), [True, False, False])
    (tmp_path / "broken.mp4").write_bytes(b"not a video at all")
    with pytest.raises(ValueError, match=r"episode 1: unreadable video file broken.mp4"):
        VideoFolderDataset(folder=tmp_path)


# ---- bad input --------------------------------------------------------------------------------------
def test_missing_key_names_dataset_and_key(tmp_path):
    root = write_tiny_dataset(tmp_path / "nostate", [5, 5], with_state=False)
    with pytest.raises(ValueError, match=r"dataset local/nostate .*missing key 'observation.state'"):
        ClipDataset(root=root)


def test_one_frame_and_empty_datasets(tmp_path):
    root = write_tiny_dataset(tmp_path / "short", [6, 1, 6])
    with pytest.raises(ValueError, match=r"dataset local/short .*episode 1 has 1 frame"):
        ClipDataset(root=root)
    assert len(ClipDataset(root=root, episodes=[0, 2], spec=ClipSpec(num_frames=2, num_actions=2))) == 12
    empty = write_tiny_dataset(tmp_path / "empty", [])
    with pytest.raises(ValueError, match=r"dataset local/empty .*has no episodes"):
        ClipDataset(root=empty)


def test_non_finite_actions_name_episode(tmp_path):
    root = write_tiny_dataset(tmp_path / "nan", [4, 4, 4], nan_in=(2, 1))
    with pytest.raises(
        ValueError, match=r"dataset local/nan .*key 'action' has non-finite values in episode\(s\) \[2\]"
    ):
        ClipDataset(root=root)


def test_unreadable_video_names_key_and_episodes(recorded, tmp_path):
    root = tmp_path / "corrupt"
    shutil.copytree(recorded[10], root)
    for mp4 in (root / "videos").rglob("*.mp4"):
        mp4.write_bytes(b"\x00" * 64)
    with pytest.raises(
        ValueError, match=r"key 'observation.image', episodes \[0, 1\]: unreadable video file"
    ):
        ClipDataset(root=root)


def test_missing_root_offline_names_root(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=rf"no LeRobot dataset at root {missing}.*HF_HUB_OFFLINE"):
        ClipDataset(repo_id="someone/some_dataset", root=missing)
    with pytest.raises(FileNotFoundError, match="someone/other"):
        ClipDataset(repo_id="someone/other")


def test_spec_validation():
    with pytest.raises(ValueError, match="either frame_stride or video_fps"):
        ClipSpec(frame_stride=2, video_fps=5)
    with pytest.raises(ValueError, match="num_frames"):
        ClipSpec(num_frames=0)
