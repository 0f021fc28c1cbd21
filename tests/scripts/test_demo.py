"""`demo` re-run with other settings trains beside the old stages, never reuses a mismatched one."""

from __future__ import annotations

import json

import pytest

from cosmos3_robot.scripts import demo

TINY = ["--preset", "tiny", "--image-size", "32", "--episodes", "4", "--eval-clips", "2",
        "--eval-episodes", "1", "--sampling-steps", "2"]  # fmt: skip


def run_demo(out, vae_minutes: str, train_steps: str) -> dict:
    assert (
        demo.main(["--out", str(out), *TINY, "--vae-minutes", vae_minutes, "--train-steps", train_steps]) == 0
    )
    return json.loads((out / "demo_results.json").read_text())


@pytest.mark.slow
def test_demo_rerun_with_other_budgets_trains_new_stages(tmp_path, capsys):
    out = tmp_path / "demo"
    first = run_demo(out, "0.05", "3")
    assert first["train"]["step"] == 3
    vae_weights = out / "vae_tiny_32px_0.05min" / "vae" / "diffusion_pytorch_model.safetensors"
    stamp = vae_weights.stat().st_mtime_ns

    # A larger VAE budget (what the demo's own warning asks for) trains a new VAE and a new model on it.
    second = run_demo(out, "0.1", "3")
    assert second["vae"] == str(out / "vae_tiny_32px_0.1min" / "vae")
    assert second["model"].startswith(str(out / "train_tiny_32px_0.1min_3steps"))
    assert vae_weights.stat().st_mtime_ns == stamp  # the first VAE is kept as it was

    # More training steps on the same VAE: a new training folder, no CheckpointError.
    third = run_demo(out, "0.1", "5")
    assert third["train"]["step"] == 5
    assert third["model"].startswith(str(out / "train_tiny_32px_0.1min_5steps"))

    # The same settings again reuse the finished stages.
    capsys.readouterr()
    again = run_demo(out, "0.1", "5")
    assert "already trained" in capsys.readouterr().out
    assert again["model"] == third["model"]
