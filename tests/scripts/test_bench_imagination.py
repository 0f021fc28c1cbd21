"""`cosmos3-robot benchmark imagination`: bad input refused before any work; the smoke table end to end."""

from __future__ import annotations

import json

import pytest

from cosmos3_robot.cli import main


def error_line(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--task", "cosmos3_robot/MetaWorld-nope-v3"], "unknown task 'cosmos3_robot/MetaWorld-nope-v3'; known:"),
        (["--noises", "0", "-0.1"], "give distinct finite noise stds >= 0"),
        (["--noises", "0.1", "0.1"], "give distinct finite noise stds >= 0"),
        (["--variant", "full"], "training the model needs a frozen video VAE: --vae FOLDER"),
        (["--model", "nowhere"], "--model nowhere: no model there"),
        (["--minutes", "0.01"], "--minutes 0.01 is too small to train anything"),
        (["--demos", "1"], "--demos must be >= 2"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_before_any_work(tmp_path, capsys, argv, message):
    out = tmp_path / "bench"
    assert main(["benchmark", "imagination", "--out", str(out), *argv]) == 2
    assert message in error_line(capsys)
    assert not out.exists()


def test_a_model_of_another_env_is_refused_before_any_work(tiny_world, tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["benchmark", "imagination", "--out", str(out), "--model", str(tiny_world[0])]
    assert main([*argv, "--task", "cosmos3_robot/Push-v0"]) == 2
    assert "trained on recordings of cosmos3_robot/Reach-v0" in error_line(capsys)
    assert not out.exists()


@pytest.mark.slow
def test_smoke_table_end_to_end_and_extended(tmp_path, capsys):
    """Record, train a state-free model, fit its probe, run 4 graded policies in both simulators;
    a re-run with more episodes extends every policy and trains nothing again."""
    out = tmp_path / "bench"
    argv = [
        "benchmark",
        "imagination",
        "--out",
        str(out),
        "--demos",
        "2",
        "--minutes",
        "0.25",
        "--no-progress",
    ]
    assert main([*argv, "--episodes", "1"]) == 0
    res = json.loads((out / "results.json").read_text())
    names = ["expert-open-loop-noise-0", "expert-open-loop-noise-0.1", "random", "zero"]
    assert [r["policy"] for r in res["rows"]] == names
    assert res["rows"][0]["real"]["successes"] == 1  # the expert's own plan, replayed in the real sim
    assert res["rows"][3]["real"]["successes"] == 0  # the zero action never reaches the goal
    assert res["ranking"]["policies"] == 4 and 0 <= res["ranking"]["mmrv"] <= 1
    assert "| random |" in (out / "table.md").read_text()
    weights = out / "world" / "model" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    capsys.readouterr()
    assert main([*argv, "--episodes", "2"]) == 0
    again = json.loads((out / "results.json").read_text())
    assert [r["real"]["episodes"] for r in again["rows"]] == [2, 2, 2, 2]
    assert [r["imagined"]["episodes"] for r in again["rows"]] == [2, 2, 2, 2]
    assert weights.stat().st_mtime_ns == stamp  # not retrained
    for name in names:
        eps = json.loads((out / "episodes" / f"{name}.imagined.json").read_text())["episodes"]
        assert [e["seed"] for e in eps] == [10_000, 10_001]
