"""bench_record: the committed record of a `benchmark policies` run joins the files each stage wrote."""

from __future__ import annotations

import json

import pytest

from cosmos3_robot.files import CheckpointError
from cosmos3_robot.scripts.bench_record import run_record, write_results


def lines(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def fake_run(out):
    """A run folder as `benchmark policies` leaves it after three arms on one task."""
    rows = [{"task": "cosmos3_robot/Reach-v0", "arm": a} for a in ("ours", "ours-estimator", "act")]
    task = out / "reach-v0"
    for arm, successes in (("ours", 3), ("ours-estimator", 2), ("act", 1)):
        (task / arm / "rollout").mkdir(parents=True)
        (task / arm / "rollout" / "results.json").write_text(json.dumps({"successes": successes}))
    (task / "ours" / "metrics.jsonl").write_text(lines(
        {"split": "train", "step": 10, "loss": 0.9}, {"split": "val", "step": 10, "loss/action_policy": 0.8},
        {"split": "train", "step": 20, "loss": 0.5}, {"split": "val", "step": 20, "loss/action_policy": 0.4},
        {"split": "train", "step": 21, "loss": 0.45},
    ))  # fmt: skip
    (task / "ours-estimator" / "policy").mkdir()
    (task / "ours-estimator" / "policy" / "metrics.jsonl").write_text(lines({"split": "train", "step": 7}))
    (task / "ours-estimator" / "estimator").mkdir()
    (task / "ours-estimator" / "estimator" / "train_log.json").write_text(json.dumps({"step": 99}))
    (task / "act" / "train_log.json").write_text(json.dumps({"kind": "act", "step": 5}))
    return {"commit": "abc", "rows": rows}


def test_the_record_joins_results_rollouts_and_each_arms_training_log(tmp_path):
    summary = fake_run(tmp_path)
    write_results(tmp_path, summary)
    assert json.loads((tmp_path / "results.json").read_text()) == summary
    record = json.loads((tmp_path / "record.json").read_text())
    assert record == run_record(tmp_path, summary)
    assert record["summary"] == summary
    assert {k: r["successes"] for k, r in record["rollouts"].items()} == {
        "reach-v0/ours": 3, "reach-v0/ours-estimator": 2, "reach-v0/act": 1
    }  # fmt: skip
    assert record["training"]["reach-v0/ours"] == {
        "last_train": {"split": "train", "step": 21, "loss": 0.45},
        "last_val": {"split": "val", "step": 20, "loss/action_policy": 0.4},
    }
    assert record["training"]["reach-v0/ours-estimator"] == {
        "policy": {"last_train": {"split": "train", "step": 7}, "last_val": None},
        "estimator": {"step": 99},
    }
    assert record["training"]["reach-v0/act"] == {"kind": "act", "step": 5}


def test_an_incomplete_or_corrupt_run_folder_is_named(tmp_path):
    summary = fake_run(tmp_path)
    (tmp_path / "reach-v0" / "ours" / "metrics.jsonl").unlink()
    with pytest.raises(FileNotFoundError, match=r"reach-v0/ours/metrics.jsonl is missing"):
        write_results(tmp_path, summary)
    assert json.loads((tmp_path / "results.json").read_text()) == summary  # written before the record
    (tmp_path / "reach-v0" / "act" / "train_log.json").write_text('{"kind": "ac')
    with pytest.raises(CheckpointError, match="act's train_log.json .* is not valid JSON"):
        run_record(tmp_path, {"rows": summary["rows"][2:]})
