"""Rerun recordings of truth vs prediction load back with rerun's own reader."""

from __future__ import annotations

import numpy as np
import pytest

from cosmos3_robot.viz.rerun_log import write_comparison


def test_comparison_recording_round_trips(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    rng = np.random.default_rng(0)
    truth = rng.integers(0, 255, (5, 3, 16, 16), dtype=np.uint8)
    pred = rng.integers(0, 255, (5, 3, 16, 16), dtype=np.uint8)
    acts = rng.normal(size=(8, 2))
    path = write_comparison(
        tmp_path / "cmp.rrd", truth, pred, fps=10, actions_true=acts, actions_pred=acts * 0.5
    )
    assert path.exists() and path.stat().st_size > 0
    # rerun's own CLI (shipped with rerun-sdk) verifies and prints the recording.
    cli = shutil.which("rerun") or str(Path(sys.executable).with_name("rerun"))
    verify = subprocess.run([cli, "rrd", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stderr
    printed = subprocess.run(
        [cli, "rrd", "print", str(path)], capture_output=True, text=True, timeout=60
    ).stdout
    for entity in ("/video/truth", "/video/prediction", "/video/abs_error", "/action/1/prediction"):
        assert entity in printed


def test_bad_frames_raise(tmp_path):
    with pytest.raises(ValueError, match="uint8"):
        write_comparison(tmp_path / "x.rrd", np.zeros((2, 3, 8, 8)), np.zeros((2, 3, 8, 8)), fps=10)
    with pytest.raises(ValueError, match="same shape"):
        z = np.zeros((2, 3, 8, 8), np.uint8)
        write_comparison(tmp_path / "x.rrd", z, z[:1], fps=10)
