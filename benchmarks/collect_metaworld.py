"""Collect a `benchmarks/recipes/metaworld.sh DATA` run (DATA/<task>/ per Meta-World task) into one JSON
and print the markdown table of benchmarks/README.md: per task, ours (state estimator + policy) and
LeRobot ACT at equal budget, success with the Wilson interval, latency per plan, training steps.

    python benchmarks/collect_metaworld.py DATA --out benchmarks/results/metaworld/run.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def read(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def rollout_figures(path: Path) -> dict | None:
    r = read(path / "results.json")
    if r is None:
        return None
    return {
        "successes": r["successes"],
        "episodes": r["episodes"],
        "success_rate": r["success_rate"],
        "wilson95": r["wilson95"],
        "mean_steps": r["mean_steps"],
        "latency_ms": {k: r["latency_per_chunk"].get(k) for k in ("p50_ms", "p95_ms")},
        "seeds": [r["config"]["seed"], r["config"]["seed"] + r["episodes"] - 1],
        "commit": r.get("commit"),
        "per_episode": [
            {"seed": e["seed"], "success": e["success"], "steps": e["steps"]} for e in r["episodes_detail"]
        ],
    }


def last_step(metrics: Path) -> int | None:
    """The last training step a `cosmos3-robot train` metrics.jsonl logged."""
    if not metrics.is_file():
        return None
    train = [m for m in map(json.loads, metrics.read_text().splitlines()) if m.get("split") == "train"]
    return train[-1]["step"] if train else None


def task_figures(folder: Path) -> dict:
    info = read(folder / "data" / "meta" / "info.json") or {}
    est = read(folder / "estimator" / "train_log.json")
    act = read(folder / "act" / "train_log.json")
    held = est["history"][-1] if est and est.get("history") else None
    return {
        "demonstrations": {"episodes": info.get("total_episodes"), "frames": info.get("total_frames")},
        "estimator": None
        if est is None
        else {"steps": est["step"], "train_seconds": est["train_seconds"], "held_out": held},
        "ours_policy_steps": last_step(folder / "policy" / "metrics.jsonl"),
        "ours": rollout_figures(folder / "ours_rollout"),
        "ours_policy_only_steps": last_step(folder / "policy_only" / "metrics.jsonl"),
        "ours_policy_only": rollout_figures(folder / "ours_policy_only_rollout"),
        "act": None
        if act is None
        else {k: act.get(k) for k in ("step", "train_seconds", "seconds_per_step", "final_loss")},
        "act_rollout": rollout_figures(folder / "act_rollout"),
    }


def cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    lo, hi = r["wilson95"]
    return f"{r['successes']}/{r['episodes']} = {100 * r['success_rate']:.0f} % ({100 * lo:.1f}–{100 * hi:.1f} %)"


def latency(r: dict | None) -> str:
    if r is None or r["latency_ms"]["p50_ms"] is None:
        return "—"
    return f"{r['latency_ms']['p50_ms']:.0f} / {r['latency_ms']['p95_ms']:.0f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="the DATA folder metaworld.sh wrote")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    tasks = {d.name: task_figures(d) for d in sorted(args.run.iterdir()) if (d / "data").is_dir()}
    if not tasks:
        print(
            f"{args.run} holds no task folder with data/ (run benchmarks/recipes/metaworld.sh first)",
            file=sys.stderr,
        )
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"run": str(args.run), "tasks": tasks}, indent=2) + "\n")
    print("| task | demos (frames) | ours: estimator + policy steps | ours (all modes) | policy mode only "
          "| ours p50 / p95 | ACT steps | ACT | ACT p50 / p95 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for name, t in tasks.items():
        est = t["estimator"]
        act = t["act"]
        print(f"| {name} | {t['demonstrations']['episodes']} ({t['demonstrations']['frames']}) "
              f"| {est['steps'] if est else '—'} + {t['ours_policy_steps'] or '—'} | {cell(t['ours'])} "
              f"| {cell(t['ours_policy_only'])}, {t['ours_policy_only_steps'] or '—'} steps | {latency(t['ours'])} "
              f"| {act['step'] if act else '—'} | {cell(t['act_rollout'])} | {latency(t['act_rollout'])} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
