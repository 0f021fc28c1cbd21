"""Collect the arms of an ablation run (each OUT/<arm>/ with train metrics, rollout/results.json and
eval/results.json) into one JSON with the figures issue 18 asks for, and print the table.

    python benchmarks/collect_ablation.py DATA/state_ablation --out benchmarks/results/ablation/state.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def arm_figures(folder: Path) -> dict:
    roll = json.loads((folder / "rollout" / "results.json").read_text())
    ev = json.loads((folder / "eval" / "results.json").read_text())
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if m.get("split") == "train"]
    idm = ev.get("inverse_dynamics", {})
    fd, copy = ev["forward_dynamics"]["psnr"], ev["copy_last_frame"]["psnr"]
    ctrl = ev.get("controllability", {}).get("shuffled", {}).get("psnr")
    return {
        "train_steps": train[-1]["step"] if train else None,
        "final_train_loss": train[-1]["loss"] if train else None,
        "policy": {k: roll[k] for k in ("successes", "success_rate", "wilson95", "mean_steps")}
        | {
            "episodes": len(roll["episodes_detail"]),
            "seed": roll["config"]["seed"],
            "latency_ms": {k: roll["latency_per_chunk"][k] for k in ("p50_ms", "p95_ms")},
        },  # fmt: skip
        "inverse_dynamics": idm,
        "forward_dynamics_psnr": fd,
        "copy_last_frame_psnr": copy,
        "shuffled_actions_psnr": ctrl,
        "horizons_s": ev.get("horizons_s"),
        "commit": roll.get("commit"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    arms = {
        d.name: arm_figures(d) for d in sorted(args.run.iterdir()) if (d / "eval" / "results.json").exists()
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"run": str(args.run), "arms": arms}, indent=2) + "\n")
    for name, a in arms.items():
        pol, idm = a["policy"], a["inverse_dynamics"]
        print(f"{name}: success {pol['successes']}/{pol['episodes']} = {pol['success_rate']:.2f} "
              f"(Wilson {pol['wilson95'][0]:.3f}-{pol['wilson95'][1]:.3f}), latency p50/p95 "
              f"{pol['latency_ms']['p50_ms']:.0f}/{pol['latency_ms']['p95_ms']:.0f} ms; ID {json.dumps(idm)[:200]}; "
              f"FD PSNR {a['forward_dynamics_psnr']} vs copy {a['copy_last_frame_psnr']} vs shuffled {a['shuffled_actions_psnr']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
