"""Bad inputs as a new user types them, each run as a real `cosmos3-robot` process, sorted by outcome.

    python benchmarks/fault_sweep.py --out benchmarks/results/fault_sweep.json

Each case names the command line and a phrase the error must contain. Outcomes:
  clear      exit 1 or 2, no traceback, the first line names the problem (the phrase is in it)
  unclear    exit 1 or 2 without a traceback, but the phrase is missing
  traceback  a Python traceback reached the user
  silent     exit 0: the bad input was accepted
The fixtures (a 2-episode Reach dataset at 32 px and a tiny model trained for 2 steps on it) are built
first in a temporary folder. The cases are those of issue 21 that a command line can reach; the API
cases (frames, actions, observations) are in tests/test_faults.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "cosmos3_robot.cli"]


def run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    env.pop("COSMOS3_ROBOT_DEBUG", None)
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def fixtures(tmp: Path) -> dict[str, Path]:
    data, run_dir = tmp / "reach", tmp / "run"
    r = run(["record", "--env", "cosmos3_robot/Reach-v0", "--episodes", "3", "--root", str(data),
             "--image-size", "32", "--no-progress"], tmp)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    r = run(["train", "model=tiny", "steps=2", f"out={run_dir}", "data.source=lerobot", f"data.root={data}",
             "data.batch_size=2", "+data.options.num_frames=5", "+data.options.num_actions=4",
             "+data.options.vae_preset=tiny", "+data.options.val_fraction=0.34", "progress=false"], tmp)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    garbage = tmp / "garbage"
    garbage.mkdir()
    (garbage / "config.json").write_text("{not json")
    push = tmp / "push"
    return {"data": data, "model": run_dir / "model", "garbage": garbage, "push": push, "tmp": tmp}


def cases(f: dict[str, Path]) -> list[tuple[str, list[str], str]]:
    t, data, model = f["tmp"], str(f["data"]), str(f["model"])
    train = ["train", "model=tiny", "steps=2", "progress=false", "--print-config"]
    return [
        ("no command", [], "usage"),
        ("unknown command", ["fly"], "unknown command"),
        (
            "record: another env into a root",
            [
                "record",
                "--env",
                "cosmos3_robot/Push-v0",
                "--episodes",
                "4",
                "--root",
                data,
                "--image-size",
                "32",
            ],
            "holds episodes of",
        ),  # fmt: skip
        (
            "record: image size 50",
            ["record", "--root", str(t / "r50"), "--image-size", "50"],
            "divisible by 32",
        ),
        ("record: noise nan", ["record", "--root", str(t / "rn"), "--noise", "nan"], "--noise"),
        ("record: episodes 0", ["record", "--root", str(t / "r0"), "--episodes", "0"], "--episodes"),
        (
            "record: another repo id into a root",
            ["record", "--root", data, "--repo-id", "other/reach", "--episodes", "4", "--image-size", "32"],
            "created as repo id",
        ),
        ("train: data option without +", [*train, "data.options.num_frames=5"], "needs a leading +"),
        (
            "train: unknown data option",
            [
                "train",
                "model=tiny",
                "steps=1",
                f"out={t / 'uo'}",
                "data.source=lerobot",
                f"data.root={data}",
                "+data.options.nosuch=3",
                "progress=false",
            ],
            "unknown data option",
        ),  # fmt: skip
        (
            "train: state narrower than the data",
            [
                "train",
                "model=tiny",
                "model.state_dim=2",
                "steps=1",
                f"out={t / 'sd'}",
                "data.source=lerobot",
                f"data.root={data}",
                "+data.options.vae_preset=tiny",
                "+data.options.num_frames=5",
                "+data.options.num_actions=4",
                "progress=false",
            ],
            "model.state_dim=4",
        ),  # fmt: skip
        (
            "train: lerobot without a VAE",
            [
                "train",
                "model=tiny",
                "steps=1",
                f"out={t / 'nv'}",
                "data.source=lerobot",
                f"data.root={data}",
                "progress=false",
            ],
            "needs a frozen video VAE",
        ),  # fmt: skip
        (
            "train: init of another preset",
            [
                "train",
                "model=sim-small",
                f"model.init={model}",
                "steps=1",
                f"out={t / 'ip'}",
                "progress=false",
            ],
            "differs from model=sim-small",
        ),  # fmt: skip
        ("train: grad_clip nan", [*train, "optim.grad_clip=nan"], "optim.grad_clip"),
        ("train: sigma shift nan", [*train, "generator.sigma.shift=nan"], "generator.sigma.shift"),
        ("train: mode weight nan", [*train, "generator.modes={video:nan}"], "generator.modes"),
        ("train: threads -2", [*train, "threads=-2"], "threads"),
        ("train: unknown key", [*train, "nosuch=1"], "bad train config"),
        ("train: an option flag", ["train", "--steps", "3"], "unknown option"),
        (
            "train-vae: steps 0",
            ["train-vae", "--root", data, "--out", str(t / "v0"), "--steps", "0"],
            "steps",
        ),
        (
            "train-vae: batch 0",
            ["train-vae", "--root", data, "--out", str(t / "v1"), "--batch-frames", "0"],
            "batch_frames",
        ),
        (
            "train-vae: fraction 2",
            ["train-vae", "--root", data, "--out", str(t / "v2"), "--video-fraction", "2"],
            "video_fraction",
        ),
        (
            "train-vae: missing root",
            ["train-vae", "--root", str(t / "nothing"), "--out", str(t / "v3")],
            "nothing",
        ),
        ("train-vae: no dataset", ["train-vae", "--out", str(t / "v4")], "needs a dataset"),
        (
            "rollout: model of another env",
            ["rollout", "--model", model, "--env", "cosmos3_robot/Push-v0", "--out", str(t / "ro1")],
            "not cosmos3_robot/Push-v0",
        ),  # fmt: skip
        (
            "rollout: unknown env",
            ["rollout", "--model", model, "--env", "x/Fly-v0", "--out", str(t / "ro2")],
            "unknown env",
        ),
        (
            "rollout: missing model",
            [
                "rollout",
                "--model",
                str(t / "none"),
                "--env",
                "cosmos3_robot/Reach-v0",
                "--out",
                str(t / "ro3"),
            ],
            "does not exist",
        ),  # fmt: skip
        (
            "rollout: other image size",
            [
                "rollout",
                "--model",
                model,
                "--env",
                "cosmos3_robot/Reach-v0",
                "--image-size",
                "64",
                "--out",
                str(t / "ro4"),
            ],
            "trained on 32 px",
        ),  # fmt: skip
        (
            "evaluate: garbage model",
            ["evaluate", "--model", str(f["garbage"]), "--root", data, "--out", str(t / "e1")],
            "data_state.json",
        ),  # fmt: skip
        (
            "label: missing source",
            ["label", "--model", model, "--source", str(t / "none"), "--out", str(t / "l1")],
            "does not exist",
        ),
        (
            "label: a folder that is no dataset",
            ["label", "--model", model, "--source", str(f["garbage"]), "--out", str(t / "l2")],
            "neither a LeRobot dataset",
        ),  # fmt: skip
        (
            "import-qwen3vl: garbage config",
            ["import-qwen3vl", str(f["garbage"]), str(t / "q")],
            "not valid JSON",
        ),
        (
            "import-diffusers: garbage config",
            ["import-diffusers", str(f["garbage"]), str(t / "d")],
            "not valid JSON",
        ),
        ("export-diffusers: tiny preset", ["export-diffusers", model, str(t / "x")], "presets that export"),
    ]


def classify(r: subprocess.CompletedProcess, phrase: str) -> str:
    if r.returncode == 0:
        return "silent"
    if "Traceback (most recent call last)" in r.stderr:
        return "traceback"
    text = (r.stderr + r.stdout).lower()
    return "clear" if phrase.lower() in text else "unclear"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/fault_sweep.json"))
    args = p.parse_args(argv)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="fault-sweep-") as tmp:
        f = fixtures(Path(tmp))
        rows = []
        for name, cmd, phrase in cases(f):
            r = run(cmd, Path(tmp))
            outcome = classify(r, phrase)
            first = next((ln for ln in r.stderr.splitlines() if ln.strip()), "")
            rows.append({"case": name, "exit": r.returncode, "outcome": outcome, "first_line": first[:300]})
            print(f"{outcome:9s} exit {r.returncode}  {name}: {first[:140]}", flush=True)
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("clear", "unclear", "traceback", "silent")}
    from cosmos3_robot.scripts.common import commit

    result = {
        "commit": commit(),
        "seconds": round(time.time() - t0, 1),
        "cases": len(rows),
        "counts": counts,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
