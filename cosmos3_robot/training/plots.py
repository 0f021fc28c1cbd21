"""Loss curves from a run's metrics.jsonl (matplotlib, imported only when plotting)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path


def plot_losses(metrics: Path, out_dir: Path) -> list[Path]:
    """One loss-curve PNG per mode (train interval means + validation points)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not Path(metrics).exists():
        return []
    records = [json.loads(ln) for ln in Path(metrics).read_text().splitlines() if ln.strip()]
    series: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        for k, v in r.items():
            if k.startswith("loss/") and v is not None and math.isfinite(v):
                series[k.removeprefix("loss/")][r["split"]].append((r["step"], v))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for mode, splits in sorted(series.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for split, pts in splits.items():
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, marker="o" if split == "val" else None, label=split)
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.set_yscale("log")
        ax.set_title(f"{mode} loss")
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"loss_{mode}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths
