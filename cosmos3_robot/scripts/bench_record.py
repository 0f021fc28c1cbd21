"""One file that holds a `benchmark policies` run whole, for committing beside the table: the run's
results.json, every arm's rollout (each episode and each chunk's latency) and its training log.

    {"summary": results.json,
     "rollouts": {"TASK/ARM": TASK/ARM/rollout/results.json},
     "training": {"TASK/ARM": what the arm's training wrote (below)}}

Training, per arm: ACT and Diffusion Policy, their `train-baseline` train_log.json; ours, the last
training and validation records of its metrics.jsonl; ours-estimator, the same for its policy and the
estimator's train_log.json (held-out error per state dimension at every evaluation).
"""

from __future__ import annotations

import json
from pathlib import Path

from cosmos3_robot.files import read_json, write_json_atomic


def slug(task: str) -> str:
    """The run folder's name for a task: `cosmos3_robot/Reach-v0` -> `reach-v0`."""
    return task.split("/")[-1].lower()


def write_results(out: Path, summary: dict) -> None:
    """results.json, then record.json built from it and the run folder (both atomic)."""
    write_json_atomic(out / "results.json", summary)
    write_json_atomic(out / "record.json", run_record(out, summary))


def run_record(out: Path, summary: dict) -> dict:
    """The record of the run in `out` whose results.json is `summary`, over the rows it holds."""
    rollouts, training = {}, {}
    for r in summary["rows"]:
        key = f"{slug(r['task'])}/{r['arm']}"
        run = out / key
        rollouts[key] = read_json(run / "rollout" / "results.json", f"{key}'s rollout results")
        training[key] = training_record(run, r["arm"])
    return {"summary": summary, "rollouts": rollouts, "training": training}


def training_record(run: Path, arm: str) -> dict:
    if arm == "ours":
        return metrics_tail(run / "metrics.jsonl")
    if arm == "ours-estimator":
        return {
            "policy": metrics_tail(run / "policy" / "metrics.jsonl"),
            "estimator": read_json(run / "estimator" / "train_log.json", "the estimator's train_log.json"),
        }
    return read_json(run / "train_log.json", f"{arm}'s train_log.json")


def metrics_tail(path: Path) -> dict:
    """Our trainer's last `train` and last `val` record of a metrics.jsonl (None where it wrote none)."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: the run folder is incomplete (run the benchmark again)")
    last: dict[str, dict | None] = {"train": None, "val": None}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec.get("split") in last:
                last[rec["split"]] = rec
    return {"last_train": last["train"], "last_val": last["val"]}
