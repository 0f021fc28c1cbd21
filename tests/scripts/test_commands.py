"""The user-facing commands end to end on a tiny model: rollout, evaluate, label. Their outputs are
checked with the outside tools that read them: JSON, an MP4 decoder (PyAV), rerun's loader,
LeRobot's own dataset loader."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cosmos3_robot.cli import main


def run(argv: list[str]) -> int:
    return main(argv)


def rrd_ok(path) -> bool:
    """`rerun rrd verify` (the CLI that ships with rerun-sdk) accepts the file."""
    r = subprocess.run(
        [sys.executable, "-m", "rerun", "rrd", "verify", str(path)], capture_output=True, text=True
    )
    return r.returncode == 0


def test_rollout_writes_results_videos_and_recordings_and_resumes(tiny_world, tmp_path, capsys):
    model, _, _ = tiny_world
    out = tmp_path / "rollout"
    argv = ["rollout", "--model", str(model), "--env", "cosmos3_robot/Reach-v0", "--episodes", "2",
            "--seed", "100", "--out", str(out), "--steps", "1", "--rrd", "--no-progress"]  # fmt: skip
    assert run([*argv[:6], "1", *argv[7:]]) == 0  # one episode first ...
    assert run(argv) == 0  # ... then the same run continues to two
    res = json.loads((out / "results.json").read_text())
    assert res["episodes"] == 2 and [e["seed"] for e in res["episodes_detail"]] == [100, 101]
    lo, hi = res["wilson95"]
    assert 0 <= lo <= res["success_rate"] <= hi <= 1
    assert res["latency_per_chunk"]["calls"] == sum(e["replans"] for e in res["episodes_detail"]) > 0
    assert res["command"] == "rollout" and res["commit"]
    from cosmos3_robot.viz.video import read_mp4

    video = read_mp4(out / "episodes" / "episode_000.mp4")
    assert video.shape[1:] == (32, 32, 3) and len(video) == res["episodes_detail"][0]["steps"] + 1
    assert rrd_ok(out / "episodes" / "episode_001.rrd")
    assert "success" in capsys.readouterr().out
    # The folder belongs to this run: other options are refused, naming them.
    assert run([*argv[:-4], "--steps", "2", "--no-progress"]) == 2
    assert "belongs to another run" in capsys.readouterr().err


def test_rollout_bad_inputs_are_one_line_errors(tiny_world, tmp_path, capsys):
    model, _, _ = tiny_world
    base = ["rollout", "--model", str(model), "--out", str(tmp_path / "r"), "--no-progress"]
    assert run([*base, "--env", "cosmos3_robot/Fly-v0"]) == 2
    assert "unknown env 'cosmos3_robot/Fly-v0'" in capsys.readouterr().err
    assert run([*base, "--env", "cosmos3_robot/Push-v0"]) == 2
    err = capsys.readouterr().err
    assert "trained on recordings of cosmos3_robot/Reach-v0, not cosmos3_robot/Push-v0" in err
    assert "Traceback" not in err
    assert run([*base, "--env", "cosmos3_robot/Reach-v0", "--image-size", "64"]) == 2
    assert "trained on 32 px" in capsys.readouterr().err
    # the tiny model trained the four design modes, not action_policy: refused before any episode
    assert run([*base, "--env", "cosmos3_robot/Reach-v0", "--policy-mode", "action_policy"]) == 2
    assert "never trained in mode 'action_policy'" in capsys.readouterr().err
    nothing = [
        "rollout",
        "--policy",
        "random",
        "--env",
        "cosmos3_robot/Reach-v0",
        "--out",
        str(tmp_path / "n"),
    ]
    assert run([*nothing, "--ensemble", "0.01"]) == 2
    assert "--policy random plans none: drop --ensemble" in capsys.readouterr().err


def test_evaluate_writes_per_horizon_metrics_curves_and_clips(tiny_world, tmp_path, capsys):
    model, root, _ = tiny_world
    out = tmp_path / "eval"
    assert run(["evaluate", "--model", str(model), "--root", str(root), "--clips", "3", "--steps", "1",
                "--out", str(out)]) == 0  # fmt: skip
    res = json.loads((out / "results.json").read_text())
    assert res["horizons_s"] == pytest.approx([0.1, 0.2, 0.3, 0.4])  # 4 future frames at 10 fps
    for name in ("forward_dynamics", "copy_last_frame", "vae_reconstruction"):
        for metric in ("psnr", "ssim", "moving_psnr"):
            assert len(res[name][metric]) == 4 and np.isfinite(res[name][metric]).all()
    assert set(res["controllability"]) >= {"true", "shuffled", "zeroed", "perturbed", "gap_true_minus"}
    assert len(res["latent_mse_copy_observed"]) == len(res["latent_mse_zeros"]) == 1
    ctrl = res["controllability"]
    assert len(ctrl["true"]["latent_mse"]) == 1 and ctrl["true"]["latent_mse"] == res["latent_mse"]
    assert ctrl["gap_true_minus"]["shuffled"]["latent_mse"][0] == pytest.approx(
        ctrl["true"]["latent_mse"][0] - ctrl["shuffled"]["latent_mse"][0]
    )
    assert {"mse", "r2", "mean_action_mse"} <= set(res["inverse_dynamics"]) and "round_trip" in res
    assert res["visible_actions"] == 4 and "inverse_dynamics_unseen_actions" not in res  # 5 frames show 4
    assert (out / "curves.png").stat().st_size > 0 and rrd_ok(out / "best.rrd") and rrd_ok(out / "worst.rrd")


def test_label_writes_a_lerobot_dataset_lerobot_can_read_and_continues(tiny_world, tmp_path, capsys):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    model, root, _ = tiny_world
    out = tmp_path / "labelled"
    argv = ["label", "--model", str(model), "--source", str(root), "--out", str(out), "--steps", "1",
            "--group", "1", "--check", "--no-progress"]  # fmt: skip
    assert run(argv) == 0
    report = json.loads((out / "meta" / "cosmos3_label.json").read_text())
    source = LeRobotDataset("local/reach", root=root)
    ds = LeRobotDataset("local/labelled", root=out)
    assert ds.meta.total_episodes == source.meta.total_episodes == report["episodes_done"] == 3
    assert ds.meta.total_frames == source.meta.total_frames  # one action per frame of every episode
    item = ds[0]
    assert item["action"].shape == (2,) and 0 < float(item["label_confidence"]) <= 1
    assert item["observation.state"].shape == (4,) and item["task"] == source[0]["task"]
    assert report["frames_per_second"] > 0 and report["vae_encode_frames_per_second"] > 0
    assert {"mse", "r2", "mse_per_dim", "r2_per_dim"} <= set(report["check"])
    assert run(argv) == 0  # finished: nothing left to label, nothing appended
    assert LeRobotDataset("local/labelled", root=out).meta.total_episodes == 3
    # LeRobot's own viewer reads it too (saved to an .rrd that rerun verifies)
    viz = Path(sys.executable).parent / "lerobot-dataset-viz"
    r = subprocess.run([str(viz), "--repo-id", "local/labelled", "--root", str(out), "--episode-index", "1",
                        "--save", "1", "--output-dir", str(tmp_path / "viz"), "--num-workers", "0"],
                       capture_output=True, text=True)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert rrd_ok(next((tmp_path / "viz").glob("*.rrd")))


def test_label_refuses_what_it_cannot_label(tiny_world, tmp_path, capsys):
    model, root, _ = tiny_world
    videos = tmp_path / "videos"
    videos.mkdir()
    from cosmos3_robot.viz.video import write_mp4

    write_mp4(videos / "short.mp4", np.zeros((3, 32, 32, 3), np.uint8), fps=10)  # shorter than a clip
    base = ["label", "--model", str(model), "--out", str(tmp_path / "o"), "--no-progress", "--steps", "1"]
    assert run([*base, "--source", str(videos)]) == 2
    err = capsys.readouterr().err
    assert "every video in" in err and "shorter than one clip of the model (5 frames)" in err
    write_mp4(videos / "short.mp4", np.zeros((9, 48, 48, 3), np.uint8), fps=10)
    assert run([*base, "--source", str(videos)]) == 2
    assert "48x48 frames; the model was trained on 32x32 (pass --resize)" in capsys.readouterr().err
    assert run([*base, "--source", str(videos), "--check"]) == 2
    assert "--check needs true actions" in capsys.readouterr().err
    assert run([*base, "--source", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    # A square video at another size is labelled with --resize, its task from <name>.txt.
    (videos / "short.txt").write_text("move the fingertip to the red target")
    assert run([*base, "--source", str(videos), "--resize"]) == 0


def test_rollout_runs_a_lerobot_checkpoint_through_the_same_harness(tiny_world, tmp_path, capsys):
    from tests.builders import tiny_act_checkpoint

    act = tiny_act_checkpoint(tiny_world[1], tmp_path / "act")
    out = tmp_path / "act_rollout"
    assert run(["rollout", "--policy", f"lerobot:{act}", "--env", "cosmos3_robot/Reach-v0", "--episodes", "1",
                "--out", str(out), "--no-progress", "--no-video"]) == 0  # fmt: skip
    res = json.loads((out / "results.json").read_text())
    assert res["episodes"] == 1 and res["latency_per_chunk"]["calls"] >= 1
    steps = res["episodes_detail"][0]["steps"]
    assert res["episodes_detail"][0]["replans"] == -(-steps // 4)  # ACT re-plans every 4 actions
    assert run(["rollout", "--policy", f"tdmpc:{act}", "--env", "cosmos3_robot/Reach-v0", "--out",
                str(tmp_path / "x"), "--no-progress"]) == 2  # fmt: skip
    assert "give lerobot:DIR" in capsys.readouterr().err


def test_train_probe_lets_the_learned_simulator_judge_success(tiny_world, tmp_path, capsys):
    import shutil

    import gymnasium as gym

    model = tmp_path / "model"
    shutil.copytree(tiny_world[0], model)
    assert run(["train-probe", "--model", str(model), "--env", "cosmos3_robot/Reach-v0", "--episodes", "4",
                "--check-episodes", "1"]) == 0  # fmt: skip
    report = json.loads((model / "success_probe" / "report.json").read_text())
    assert 0 <= report["heldout_accuracy"]["accuracy"] <= 1 and report["success_frames"] >= 5
    assert 0 <= report["rollouts"]["frame_agreement"] <= 1 and report["command"] == "train-probe"
    env = gym.make("cosmos3_robot/Learned-v0", model=str(model), env="cosmos3_robot/Reach-v0", steps=1)
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(env.action_space.sample())
    assert (
        isinstance(info["is_success"], bool)
        and terminated == info["is_success"]
        and reward == float(terminated)
    )
    assert run(["train-probe", "--model", str(model), "--env", "cosmos3_robot/Push-v0"]) == 2
    assert "not cosmos3_robot/Push-v0" in capsys.readouterr().err


@pytest.mark.slow
def test_label_killed_mid_episode_loses_only_that_episode_and_continues(tiny_world, tmp_path):
    """kill -9 inside LeRobot's save of the second episode, then the same command again."""
    import os

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    model, root, _ = tiny_world
    out = tmp_path / "labelled"
    argv = ["label", "--model", str(model), "--source", str(root), "--out", str(out), "--steps", "1",
            "--group", "1", "--no-progress"]  # fmt: skip
    script = f"""
import os, signal
from lerobot.datasets.lerobot_dataset import LeRobotDataset
real, calls = LeRobotDataset.save_episode, []
def dying(self, *a, **k):
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *a, **k)
LeRobotDataset.save_episode = dying
from cosmos3_robot.cli import main
main({argv!r})
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env={**os.environ})
    assert r.returncode == -9, r.stderr[-2000:]
    assert run(argv) == 0  # rolls the unfinished episode back, labels the rest
    ds = LeRobotDataset("local/labelled", root=out)
    source = LeRobotDataset("local/reach", root=root)
    assert ds.meta.total_episodes == 3 and ds.meta.total_frames == source.meta.total_frames
    assert [int(e) for e in ds.hf_dataset["episode_index"]] == [
        int(e) for e in source.hf_dataset["episode_index"]
    ]


def test_label_on_a_full_disk_fails_clearly_and_the_next_run_continues(
    tiny_world, tmp_path, capsys, monkeypatch
):
    import errno

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    model, root, _ = tiny_world
    out = tmp_path / "labelled"
    argv = ["label", "--model", str(model), "--source", str(root), "--out", str(out), "--steps", "1",
            "--group", "1", "--no-progress"]  # fmt: skip
    real, calls = LeRobotDataset.save_episode, []

    def full_disk(self, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(LeRobotDataset, "save_episode", full_disk)
    assert run(argv) == 1
    assert "failed (OSError)" in capsys.readouterr().err
    monkeypatch.undo()
    assert LeRobotDataset("local/labelled", root=out).meta.total_episodes == 1  # the first one is kept
    assert run(argv) == 0
    ds = LeRobotDataset("local/labelled", root=out)
    assert ds.meta.total_episodes == 3
    assert ds.meta.total_frames == LeRobotDataset("local/reach", root=root).meta.total_frames
