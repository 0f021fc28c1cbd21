"""`cosmos3-robot benchmark labels`: bad input refused before any work; the smoke table end to end."""

from __future__ import annotations

import json

import pytest

from cosmos3_robot.cli import main


def error_line(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tasks", "cosmos3_robot/MetaWorld-nope-v3"], "unknown task 'cosmos3_robot/MetaWorld-nope-v3'; known:"),
        (["--labelled", "7"], "--labelled 7 does not fit 8 demonstrations: give --labelled 2 .. 6"),
        (["--demos", "10", "--labelled", "1"], "--labelled 1 does not fit 10 demonstrations: give --labelled 2 .. 8"),
        (["--demos", "5"], "the smoke variant's labelled count 4 does not fit 5 demonstrations"),
        (["--variant", "full", "--arm", "act"], "the labeller (our model) needs a frozen video VAE: --vae FOLDER"),
        (["--minutes", "0.01"], "--minutes 0.01 is too small to train anything"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "bench"
    assert main(["benchmark", "labels", "--out", str(out), *argv]) == 2
    assert message in error_line(capsys)
    assert not out.exists()


def test_frame_labeller_needs_no_vae_and_metaworld_keeps_the_policy_tables_demonstrations():
    """--labeller frames with ACT needs no VAE on any variant; the metaworld variant's policy set is
    the 100 demonstrations of `benchmark policies --variant metaworld`, after 50 labelled ones."""
    from cosmos3_robot.scripts import bench_labels, benchmark

    def resolved(*argv):
        return bench_labels.resolve(bench_labels.build_parser().parse_args(["--out", "unused", *argv]))

    v, labelled = resolved("--variant", "full", "--labeller", "frames")
    assert labelled == 50 and v.demos == 150
    v, labelled = resolved("--variant", "metaworld", "--labeller", "frames")
    policies = benchmark.VARIANTS["metaworld"]
    assert v.demos - labelled == policies.demos == 100 and labelled == 50
    assert set(v.tasks) < set(policies.tasks) and len(v.tasks) == 3
    assert (v.minutes, v.execute, v.image_size) == (policies.minutes, policies.execute, policies.image_size)
    v, _ = resolved(
        "--variant", "metaworld", "--labeller", "frames", "--tasks", "cosmos3_robot/MetaWorld-reach-v3"
    )
    assert v.tasks == ["cosmos3_robot/MetaWorld-reach-v3"]
    with pytest.raises(ValueError, match="needs a frozen video VAE"):
        resolved("--variant", "metaworld", "--labeller", "frames", "--arm", "ours")


@pytest.mark.slow
def test_smoke_table_end_to_end(tmp_path, capsys):
    """Two disjoint recorded sets, a labeller, labels scored against the true actions, ACT trained on
    each and rolled out on the same held-out seed."""
    out = tmp_path / "bench"
    argv = ["benchmark", "labels", "--out", str(out), "--demos", "4", "--labelled", "2", "--episodes", "1",
            "--minutes", "0.25", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["labelled_demos"] == 2 and row["policy_demos"] == 2 and row["labeller_steps"] >= 1
    for name in ("true", "labels"):
        assert row[name]["episodes"] == 1 and row[name]["train_steps"] >= 1
        eps = json.loads((out / "reach-v0" / name / "rollout" / "results.json").read_text())[
            "episodes_detail"
        ]
        assert [e["seed"] for e in eps] == [10_000]
    q = row["label_quality"]
    assert q["mse"] >= 0 and q["mean_action_mse"] > 0
    assert q["frames"] == sum(
        json.loads((out / "reach-v0" / "policy" / "meta" / "info.json").read_text())[k]
        for k in ["total_frames"]
    )  # every frame of the policy set is scored
    assert row["seeds"] == {"labelled": [0, 1], "policy": [2, 3], "eval": [10_000, 10_000]}
    expected = (
        None if row["true"]["successes"] == 0 else row["labels"]["success_rate"] / row["true"]["success_rate"]
    )
    assert row["ratio"] == expected
    # Disjoint env seeds (the labeller never sees the episodes it labels). Oracle: the simulator's
    # reset state for seeds 0..3 against each set's first recorded environment state per episode.
    import glob

    import numpy as np
    import pandas as pd

    from cosmos3_robot.envs import make_env

    env = make_env("cosmos3_robot/Reach-v0", image_size=64)
    resets = [env.reset(seed=s)[0]["environment_state"] for s in range(4)]
    env.close()
    for name, seeds in (("labelled", [0, 1]), ("policy", [2, 3])):
        df = pd.concat(
            pd.read_parquet(f) for f in glob.glob(str(out / "reach-v0" / name / "data" / "*" / "*.parquet"))
        )
        first = df[df.frame_index == 0].sort_values("episode_index")["observation.environment_state"]
        np.testing.assert_allclose(
            np.stack(first.to_numpy()), np.stack([resets[s] for s in seeds]), atol=1e-6
        )
    assert "| cosmos3_robot/Reach-v0 | act |" in (out / "table.md").read_text()


def test_smoke_with_the_frame_labeller_needs_no_vae_and_scores_every_frame(tmp_path):
    """--labeller frames: train-labeller on the labelled set, `label --labeller` on the policy set;
    the row records who labelled and how well."""
    out = tmp_path / "bench"
    argv = ["benchmark", "labels", "--out", str(out), "--demos", "4", "--labelled", "2", "--episodes", "1",
            "--minutes", "0.25", "--labeller", "frames", "--no-progress"]  # fmt: skip
    assert main(argv) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["labeller"] == "frames" and row["labeller_steps"] >= 1
    assert (out / "reach-v0" / "labeller_frames" / "labeller" / "labeller.json").exists()
    q = row["label_quality"]
    info = json.loads((out / "reach-v0" / "policy" / "meta" / "info.json").read_text())
    assert q["frames"] == info["total_frames"] and q["mean_action_mse"] > 0
    floor = json.loads((out / "reach-v0" / "random" / "rollout" / "results.json").read_text())
    assert [e["seed"] for e in floor["episodes_detail"]] == [10_000]  # the policies' held-out seed
    assert row["random"]["successes"] == floor["successes"] and row["random"]["episodes"] == 1
    assert (out / "table.md").read_text().splitlines()[0].endswith("| random actions |")
    report = json.loads((out / "reach-v0" / "relabelled" / "meta" / "cosmos3_label.json").read_text())
    assert report["config"]["labeller"].endswith("labeller") and report["config"]["model"] is None
