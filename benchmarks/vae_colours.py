"""Does a VAE keep what a Reach instruction names? The colour of each target, after encode + decode.

    python benchmarks/vae_colours.py VAE_DIR [VAE_DIR ...] [--seeds 40] [--out results/vae/colours.json]

Reach's instruction names the goal by colour ("move the fingertip to the red target"), so a latent
that loses the colours leaves a policy nothing to choose the goal by. For env seeds 10000 onwards
(disjoint from the recorded 0-149), the reset frame is rendered at 128 px; each target is found in
the rendered frame by its known colour (`envs.reach.COLOURS`, the simulator's own), and the mean
decoded colour over the same pixels is classified to the nearest of the four colours. Also: the
frames' PSNR and foreground PSNR (`eval.metrics.foreground_psnr`). Chance is 25 %.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")

import numpy as np
import torch

from cosmos3_robot.encoders.vae import load_vae
from cosmos3_robot.envs import make_env
from cosmos3_robot.envs.reach import COLOURS
from cosmos3_robot.eval.metrics import foreground_psnr, frame_psnr
from cosmos3_robot.scripts.benchmark import vae_latent_channels

MATCH = 40.0  # uint8 distance under which a rendered pixel is a target of that colour
MIN_PIXELS = 20  # a target smaller than this in view is skipped (partly under the arm)


def targets(seeds: list[int]) -> tuple[np.ndarray, list[tuple[int, np.ndarray, int]]]:
    """Rendered reset frames (N, H, W, 3) and, per visible target, (frame index, pixel mask, colour)."""
    ref = np.array([COLOURS[n][:3] for n in COLOURS]) * 255
    env = make_env("cosmos3_robot/Reach-v0", image_size=128)
    frames = np.stack([env.reset(seed=s)[0]["pixels"] for s in seeds])
    env.close()
    found = []
    for i, f in enumerate(frames.astype(np.float64)):
        dist = np.linalg.norm(f[:, :, None, :] - ref[None, None], axis=-1)  # (H, W, 4)
        for k in range(len(ref)):
            mask = dist[:, :, k] < MATCH
            if mask.sum() >= MIN_PIXELS:
                found.append((i, mask, k))
    return frames, found


def score(vae_dir: str, frames: np.ndarray, found: list) -> dict:
    ref = np.array([COLOURS[n][:3] for n in COLOURS]) * 255
    vae = load_vae(vae_dir, vae_latent_channels(Path(vae_dir)))
    x = torch.from_numpy(frames).permute(0, 3, 1, 2)[:, None].float() / 255  # (N, 1, 3, H, W)
    with torch.no_grad():
        y = torch.cat([vae.decode(vae.encode(x[i : i + 8])) for i in range(0, len(x), 8)])
    dec = (y[:, 0].permute(0, 2, 3, 1).numpy() * 255).astype(np.float64)
    kept = [int(np.argmin(np.linalg.norm(ref - dec[i][m].mean(0), axis=1)) == k) for i, m, k in found]
    return {
        "vae": vae_dir,
        "targets": len(found),
        "colour_kept": sum(kept),
        "colour_kept_rate": sum(kept) / len(found),
        "psnr": float(frame_psnr(y, x).mean()),
        "psnr_foreground": foreground_psnr(y, x),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("vae", nargs="+", help="VAE folders (the vae/ folder of train-vae)")
    p.add_argument("--seeds", type=int, default=40, help="reset frames from env seed 10000 on")
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    args = p.parse_args()
    seeds = list(range(10_000, 10_000 + args.seeds))
    frames, found = targets(seeds)
    rows = [score(v, frames, found) for v in args.vae]
    for r in rows:
        print(f"{r['vae']}: target colour kept {r['colour_kept']}/{r['targets']} ({r['colour_kept_rate']:.0%}); "
              f"PSNR {r['psnr']:.2f} dB, foreground {r['psnr_foreground']:.2f} dB")  # fmt: skip
    if args.out:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        args.out.write_text(
            json.dumps({"seeds": [seeds[0], seeds[-1]], "commit": commit, "rows": rows}, indent=2)
        )


if __name__ == "__main__":
    main()
