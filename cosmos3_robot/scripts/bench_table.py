"""The Markdown table every `benchmark` table ends with, and where it is written."""

from __future__ import annotations

from pathlib import Path

from cosmos3_robot.eval.metrics import wilson_interval


def write_table(out: Path, text: str) -> None:
    """A benchmark's last step: table.md beside results.json, and both on stdout."""
    (out / "table.md").write_text(text)
    print(text, end="")
    print(f"results: {out / 'results.json'}")


def table(rows: list[dict]) -> str:
    """One line per task and arm; with several tasks, one more per arm over all of them (episodes
    pooled, so the rate is the mean over tasks when every task has the same number of episodes; its
    interval is over these tasks' episodes, not a claim about other tasks)."""
    lines = [
        "| task | policy | success | Wilson 95 % | latency p50 / p95 (ms) | instruction p50 (ms) "
        "| training steps / minutes |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lo, hi = r["wilson95"]
        lat = (
            "n/a" if r["latency_p50_ms"] is None else f"{r['latency_p50_ms']:.0f} / {r['latency_p95_ms']:.0f}"
        )
        setup = "n/a" if r.get("setup_p50_ms") is None else f"{r['setup_p50_ms']:.1f}"
        mins = "n/a" if r["train_seconds"] is None else f"{r['train_seconds'] / 60:.1f}"
        lines.append(
            f"| {r['task']} | {r['arm']} | {r['successes']}/{r['episodes']} = {r['success_rate']:.0%} | "
            f"{lo:.0%}-{hi:.0%} | {lat} | {setup} | {r['train_steps']} / {mins} |"
        )
    if len({r["task"] for r in rows}) > 1:
        for arm in dict.fromkeys(r["arm"] for r in rows):
            mine = [r for r in rows if r["arm"] == arm]
            k, n, (lo, hi) = pooled(mine)
            lines.append(
                f"| all {len(mine)} tasks | {arm} | {k}/{n} = {k / n:.0%} | {lo:.0%}-{hi:.0%} | | | |"
            )
    return "\n".join(lines) + "\n"


def pooled(rows: list[dict]) -> tuple[int, int, tuple[float, float] | None]:
    """Successes and episodes summed over `rows`, and their Wilson 95 % interval (None for none)."""
    k, n = sum(r["successes"] for r in rows), sum(r["episodes"] for r in rows)
    return k, n, wilson_interval(k, n) if n else None


def suite_table(runs: list[tuple[str, dict]], suite: dict[str, str]) -> tuple[str, dict]:
    """Success per task of `suite` and arm, from several `benchmark policies` runs (`(name, summary)`:
    a results file's name and its `summary`), then each arm's mean over the suite's tasks it ran.

    `suite` maps each task's env id, as the runs record it, to the name the table shows it by. Rows of
    tasks outside the suite are named under the table, not counted. Runs must share the rollout
    setting (execute, ensemble) and the evaluation seeds, and a task and arm may come from one run
    only: figures of two settings are not pooled, nor is a choice between two measurements of the
    same arm made here."""
    if not runs:
        raise ValueError("give at least one results file of `benchmark policies`")
    settings = {name: _setting(summary) for name, summary in runs}
    if len(set(settings.values())) > 1:
        shown = "; ".join(f"{n}: {s}" for n, s in settings.items())
        raise ValueError(f"the runs differ in rollout setting or seeds and cannot share a table: {shown}")
    cells: dict[tuple[str, str], dict] = {}
    outside: dict[str, None] = {}
    for name, summary in runs:
        for r in summary["rows"]:
            if r["task"] not in suite:
                outside[r["task"]] = None
                continue
            key = (suite[r["task"]], r["arm"])
            if key in cells:
                raise ValueError(
                    f"{key[0]} / {key[1]} is in both {cells[key]['run']} and {name}: list only one of them"
                )
            cells[key] = {**r, "run": name}
    arms = list(dict.fromkeys(arm for _, arm in cells))
    names = list(suite.values())
    ran = [t for t in names if any((t, a) in cells for a in arms)]
    lines = ["| task | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for t in ran:
        lines.append(f"| {t} | " + " | ".join(_cell(cells.get((t, a))) for a in arms) + " |")
    means = {}
    for a in arms:
        mine = [cells[(t, a)] for t in ran if (t, a) in cells]
        k, n, interval = pooled(mine)
        rate = sum(r["success_rate"] for r in mine) / len(mine) if mine else None
        means[a] = {"tasks": len(mine), "mean_success_rate": rate, "successes": k, "episodes": n,
                    "pooled_wilson95": list(interval) if interval else None}  # fmt: skip
    lines.append(
        f"| mean over the tasks run ({len(ran)} of {len(names)}) | "
        + " | ".join(map(_mean_cell, means.values()))
        + " |"
    )
    missing = [t for t in names if t not in ran]
    if missing:
        lines.append(f"\nNot run yet: {', '.join(missing)}.")
    if outside:
        lines.append(f"\nOutside the suite, left out of this table: {', '.join(outside)}.")
    summary = {
        "suite": names, "tasks_run": ran, "tasks_missing": missing, "tasks_outside": list(outside),
        "setting": next(iter(settings.values())), "runs": [name for name, _ in runs], "means": means,
        "cells": {f"{t}/{a}": cells[(t, a)] for t in ran for a in arms if (t, a) in cells},
    }  # fmt: skip
    return "\n".join(lines) + "\n", summary


def _setting(summary: dict) -> str:
    v = summary["variant"]
    seeds = {tuple(r["eval_seeds"]) for r in summary["rows"]}
    return f"execute {v.get('execute')}, ensemble {v.get('ensemble')}, seeds {sorted(seeds)}"


def _mean_cell(m: dict) -> str:
    if m["mean_success_rate"] is None:
        return "n/a"
    lo, hi = m["pooled_wilson95"]
    tasks = f"{m['tasks']} task" + ("s" if m["tasks"] != 1 else "")  # an arm may have run fewer tasks
    return f"{m['mean_success_rate']:.1%} over {tasks} ({m['successes']}/{m['episodes']} pooled, {lo:.0%}-{hi:.0%})"


def _cell(r: dict | None) -> str:
    if r is None:
        return "not run"
    lo, hi = r["wilson95"]
    return f"{r['successes']}/{r['episodes']} ({lo:.0%}-{hi:.0%})"
