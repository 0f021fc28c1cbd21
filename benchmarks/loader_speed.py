"""What the generator stage's batches cost with a latent cache: decoding every clip's frames (as
before) against reading clips from the table alone and decoding only the clips the cache lacks.

    python benchmarks/loader_speed.py --root DATA/reach128 --vae DATA/vae128/vae \
        --cache DATA/latents --out benchmarks/results/loader_speed.json

Both paths build the same batches (tests/training/test_training_data.py checks that bit for bit);
this times them alternately, batch by batch, in one process, and saves min/median/max per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.model import preset  # noqa: E402
from cosmos3_robot.scripts.common import commit  # noqa: E402
from cosmos3_robot.training.data import DataConfig, make_generator_data  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True, help="LeRobot dataset folder")
    p.add_argument("--vae", required=True, help="the frozen VAE folder")
    p.add_argument("--cache", required=True, help="latent cache folder (built on first use)")
    p.add_argument("--latent-channels", type=int, default=48)
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/loader_speed.json"))
    a = p.parse_args(argv)
    cfg = DataConfig(
        root=a.root, vae=a.vae, latent_cache=a.cache, num_frames=5, num_actions=10, pad=True,
        batch_size=a.batch_size, val_fraction=0.1, seed=0,
    )  # fmt: skip
    model_cfg = preset("sim-small")
    model_cfg.latent_channels = a.latent_channels
    data = make_generator_data(cfg, model_cfg)
    table_only = data.robot_clips
    times: dict[str, list[float]] = {"decode_every_clip": [], "table_then_cache": []}
    hits_misses = {}
    for mode in times:  # warm both paths once (first reads open files and fill page caches)
        data.robot_clips = data.ds if mode == "decode_every_clip" else table_only
        next(data.train_batches(0))
    iters = {}
    for mode in times:
        data.robot_clips = data.ds if mode == "decode_every_clip" else table_only
        iters[mode] = data.train_batches(1)
    for _ in range(a.batches):
        for mode in times:
            data.robot_clips = data.ds if mode == "decode_every_clip" else table_only
            h0, m0 = data.encoder.hits, data.encoder.misses
            t0 = time.perf_counter()
            next(iters[mode])
            times[mode].append(time.perf_counter() - t0)
            h, m = hits_misses.get(mode, (0, 0))
            hits_misses[mode] = (h + data.encoder.hits - h0, m + data.encoder.misses - m0)
    res = {
        "commit": commit(),
        "root": a.root,
        "batch_size": a.batch_size,
        "batches": a.batches,
        "threads": os.cpu_count(),
        "seconds_per_batch": {
            mode: {"min": min(t), "median": statistics.median(t), "max": max(t)} for mode, t in times.items()
        },
        "cache_hits_misses": hits_misses,
    }
    res["speedup_median"] = (
        res["seconds_per_batch"]["decode_every_clip"]["median"]
        / res["seconds_per_batch"]["table_then_cache"]["median"]
    )
    print(json.dumps(res, indent=2))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = a.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(res, indent=2))
    tmp.replace(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
