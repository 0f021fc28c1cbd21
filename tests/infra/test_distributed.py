"""torchrun with 2 CPU ranks (gloo) follows the single-process loss curve for the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMON = ["steps=3", "data.batch_size=4", "log_every=1", "val_every=0", "precision=fp32", "threads=1",
          "progress=false", "optim.warmup_steps=1"]  # fmt: skip


def train_losses(out) -> list[float]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r["loss"] for r in map(json.loads, lines) if r["split"] == "train"]


def run(args: list[str], tmp_path, nproc: int | None = None) -> None:
    root = str(Path(__file__).resolve().parents[2])  # the repository, for `-m cosmos3_robot.cli`
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    if nproc:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(29500 + os.getpid() % 1000), "-m", "cosmos3_robot.cli", "train", *args]  # fmt: skip
    else:
        cmd = [sys.executable, "-m", "cosmos3_robot.cli", "train", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.slow  # 10-20 s of torchrun start-up: `make test-slow`
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_torchrun_two_ranks_matches_single_process(tmp_path, strategy):
    single, multi = tmp_path / "single", tmp_path / "multi"
    # Same global batch (4); one process does it as 2 micro-batches of 2, as the 2 ranks do.
    run([*COMMON, f"out={single}", "micro_batch_size=2"], tmp_path)
    run([*COMMON, f"out={multi}", f"distributed.strategy={strategy}"], tmp_path, nproc=2)
    a, b = train_losses(single), train_losses(multi)
    assert len(a) == len(b) == 3
    for x, y in zip(a, b, strict=True):
        assert abs(x - y) <= 1e-5 * max(1.0, abs(x)), (a, b)
    assert not (tmp_path / "outputs").exists()  # Hydra wrote nothing into the working directory
