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
            k, n = sum(r["successes"] for r in mine), sum(r["episodes"] for r in mine)
            lo, hi = wilson_interval(k, n)
            lines.append(
                f"| all {len(mine)} tasks | {arm} | {k}/{n} = {k / n:.0%} | {lo:.0%}-{hi:.0%} | | | |"
            )
    return "\n".join(lines) + "\n"
