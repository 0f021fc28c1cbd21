"""Recording: LeRobot reads back what we rendered; resume; crash safety; CLI."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from tests._data_fixtures import SMALL_IMAGE, record_small


def _lerobot(root):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset(f"local/{root.name}", root=root)


def test_recorded_dataset_loads_in_lerobot_and_matches_render(tmp_path):
    captured: list = []
    res = record_small(tmp_path / "reach", episodes=2, image_size=64, capture=captured)
    assert res.total_episodes == 2 and res.new_frames == len(captured)
    ds = _lerobot(tmp_path / "reach")  # LeRobot's own reader, not ours
    assert ds.num_episodes == 2 and len(ds) == len(captured) and ds.fps == 10
    assert {"observation.image", "observation.state", "observation.environment_state", "action"} <= set(
        ds.features
    )
    errs = []
    for i in range(0, len(ds), 3):
        item = ds[i]
        obs = captured[i][1]
        decoded = item["observation.image"].permute(1, 2, 0).numpy() * 255.0  # (H, W, 3)
        errs.append(np.abs(decoded - obs["pixels"].astype(np.float32)).mean())
        np.testing.assert_array_equal(item["observation.state"].numpy(), obs["agent_pos"])
        np.testing.assert_array_equal(item["observation.environment_state"].numpy(), obs["environment_state"])
        assert item["task"].startswith("move the fingertip to the")
    mae = float(np.mean(errs))
    print(f"video round-trip mean abs error: {mae:.2f} / 255")
    assert mae < 4.0  # lossy AV1 (crf 30) on flat-shaded frames
    assert ds.meta.stats["action"]["mean"].shape == (2,)


def test_resume_continues_and_exception_keeps_saved_episodes(tmp_path):
    from cosmos3_robot.envs import make_expert
    from cosmos3_robot.envs.record import record_dataset

    root = tmp_path / "push"

    def failing(env, seed):
        expert = make_expert(env, seed=seed)

        def policy(obs):
            if seed == 2:  # third episode dies mid-way
                raise RuntimeError("boom")
            return expert.act(obs)

        return policy

    with pytest.raises(RuntimeError, match="boom"):
        record_dataset(
            "cosmos3_robot/Push-v0", root, 4, image_size=SMALL_IMAGE, policy_factory=failing, progress=False
        )
    assert _lerobot(root).num_episodes == 2  # the two finished episodes survive, readable
    res = record_small(root, env_id="cosmos3_robot/Push-v0", episodes=4)
    assert res.new_episodes == 2 and res.total_episodes == 4
    ds = _lerobot(root)
    assert ds.num_episodes == 4 and int(ds[len(ds) - 1]["episode_index"]) == 3
    assert record_small(root, env_id="cosmos3_robot/Push-v0", episodes=4).new_episodes == 0  # nothing to do


def test_hard_kill_never_corrupts_committed_episodes(tmp_path):
    root = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import os
        from cosmos3_robot.envs import make_expert
        from cosmos3_robot.envs.record import record_dataset
        def factory(env, seed):
            expert = make_expert(env, seed=seed)
            def policy(obs, n=[0]):
                n[0] += 1
                if seed == 3 and n[0] > 3:
                    os._exit(9)   # like SIGKILL: no finally, no finalize
                return expert.act(obs)
            return policy
        record_dataset("cosmos3_robot/Reach-v0", {str(root)!r}, 6, image_size={SMALL_IMAGE},
                       checkpoint_every=2, policy_factory=factory, progress=False)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == 9, proc.stderr.decode()[-2000:]
    # episodes 0-1 were committed; episode 2 was saved but its session (2-3) never finalized
    res = record_small(root, episodes=6, checkpoint_every=2)
    assert res.new_episodes == 4 and res.total_episodes == 6
    ds = _lerobot(root)
    assert ds.num_episodes == 6 and len(ds) == int(sum(ds.meta.episodes["length"]))
    assert torch.isfinite(ds[len(ds) - 1]["action"]).all()


def test_resume_with_other_image_size_is_refused(tmp_path):
    record_small(tmp_path / "r", episodes=1)
    with pytest.raises(ValueError, match="observation.image"):
        record_small(tmp_path / "r", episodes=2, image_size=64)
    with pytest.raises(ValueError, match="fps"):
        record_small(tmp_path / "r", episodes=2, fps=30)
    with pytest.raises(
        ValueError, match="holds episodes of cosmos3_robot/Reach-v0.*--env cosmos3_robot/Reach-v0"
    ):
        record_small(tmp_path / "r", "cosmos3_robot/Push-v0", episodes=2)
    for bad, match in (
        ({"image_size": 50}, "--image-size 50.*divisible by 32"),
        ({"noise": float("nan")}, "--noise"),
    ):
        with pytest.raises(ValueError, match=match):
            record_small(tmp_path / "fresh", episodes=1, **bad)
        assert not (tmp_path / "fresh").exists()  # refused before anything was written


def test_cli_help_explains(capsys):
    from cosmos3_robot.scripts.record import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--env", "--episodes", "--root", "--repo-id", "--fps", "--noise", "--seed", "--image-size"):
        assert flag in out


def test_cli_records(tmp_path, capsys):
    from cosmos3_robot.scripts.record import main

    assert (
        main(
            [
                "--env",
                "cosmos3_robot/Reach-v0",
                "--episodes",
                "1",
                "--root",
                str(tmp_path / "c"),
                "--fps",
                "15",
                "--image-size",
                "32",
                "--no-progress",
            ]
        )
        == 0
    )
    assert "1 episodes" in capsys.readouterr().out
    assert _lerobot(tmp_path / "c").fps == 15


@pytest.mark.slow
def test_lerobot_dataset_viz_writes_rrd(tmp_path):
    record_small(tmp_path / "viz", episodes=1)
    out = tmp_path / "rrd"
    cmd = [
        sys.executable,
        "-m",
        "lerobot.scripts.lerobot_dataset_viz",
        "--repo-id",
        "local/viz",
        "--root",
        str(tmp_path / "viz"),
        "--episode-index",
        "0",
        "--save",
        "1",
        "--output-dir",
        str(out),
        "--num-workers",
        "0",
    ]
    proc = subprocess.run(cmd, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    files = list(out.glob("*.rrd"))
    assert files and files[0].stat().st_size > 1000


def test_a_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path):
    import fcntl

    root = tmp_path / "locked"
    with open(tmp_path / ".locked.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `record` holds it
        with pytest.raises(RuntimeError, match="another `cosmos3-robot record` is writing"):
            record_small(root, episodes=1)
    assert not root.exists()
    record_small(root, episodes=1)  # released: recording goes ahead
    assert (root / "meta" / "info.json").exists()
