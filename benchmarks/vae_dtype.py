"""bf16 autocast against fp32 for one `train-vae` step of the suite VAE (128 px, 48 channels): a
5-frame clip step and an 8-image step, alternated in one process, 3 timed repetitions after a warm-up.

    python benchmarks/vae_dtype.py VAE_DIR DATASET_ROOT --out benchmarks/results/vae/dtype_step.json
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.encoders.vae import load_vae  # noqa: E402
from cosmos3_robot.scripts.common import commit  # noqa: E402
from cosmos3_robot.training.vae import vae_loss  # noqa: E402
from cosmos3_robot.training.vae_config import VAETrainConfig  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("vae")
p.add_argument("root")
p.add_argument("--out", type=Path, default=Path("benchmarks/results/vae/dtype_step.json"))
a = p.parse_args()
torch.set_num_threads(2)
vae = load_vae(a.vae, json.loads((Path(a.vae) / "config.json").read_text())["z_dim"])
vae.autoencoder.train().requires_grad_(True)
opt = torch.optim.AdamW(vae.autoencoder.parameters(), lr=1e-9)
g = torch.Generator().manual_seed(0)
shapes = {"clip": (1, 5, 3, 128, 128), "images": (8, 1, 3, 128, 128)}
times = {f"{d}_{k}": [] for d in ("bf16", "fp32") for k in shapes}
for rep in range(4):
    for d in ("bf16", "fp32"):
        cfg = VAETrainConfig(out="/tmp/x", root=a.root, dtype=d)
        for k, shp in shapes.items():
            frames = torch.rand(shp, generator=g)
            t0 = time.perf_counter()
            loss, _ = vae_loss(vae, frames, cfg)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if rep > 0:
                times[f"{d}_{k}"].append(time.perf_counter() - t0)
res = {k: {"min": min(v), "median": statistics.median(v), "max": max(v)} for k, v in times.items()}
res = {"commit": commit(), "vae": a.vae, "threads": 2, "seconds_per_step": res}
print(json.dumps(res, indent=1))
a.out.parent.mkdir(parents=True, exist_ok=True)
a.out.write_text(json.dumps(res, indent=1) + "\n")
