"""`cosmos3-robot evaluate`: predicted futures and actions against ground truth on held-out clips.

    cosmos3-robot evaluate --model runs/push/model --root data/push --out runs/push/eval

Reads: a model folder written by `cosmos3-robot train`, and a LeRobot dataset recorded at the
model's fps and image size (by default its validation episodes, when it is the training dataset).
Writes into --out:
  results.json   per horizon in seconds: PSNR, SSIM and moving-pixel PSNR of forward dynamics,
                 copy-last-frame and the VAE's reconstruction; latent MSE per future latent frame;
                 action controllability (true / shuffled / zeroed / perturbed actions and the gaps);
                 inverse dynamics against the true actions and the mean-action baseline (MSE, R²);
                 the round trip (inverse dynamics on the generated video against the commanded
                 actions); command, config and commit
  curves.png     the per-horizon curves
  best.rrd, worst.rrd  the clips with the highest and lowest forward-dynamics PSNR, truth beside
                 prediction on one timeline (`rerun FILE`)
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmos3_robot.files import write_json_atomic
from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    claim_output,
    run_config,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot evaluate",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    p.add_argument("--model", type=Path, required=True, help="model folder written by `cosmos3-robot train`")
    p.add_argument("--root", type=Path, required=True, help="LeRobot dataset folder with the ground truth")
    p.add_argument("--episodes", type=int, nargs="*", default=None,
                   help="episode indices to use (default: the model's validation episodes, else all)")  # fmt: skip
    p.add_argument("--clips", type=int, default=32, help="clips, evenly spread (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="denoising steps (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampling noise seed (default: %(default)s)")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    add_threads_option(p)
    return p


def plot_curves(res: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sec = res["horizons_s"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for ax, metric in zip(axes, ("psnr", "ssim", "moving_psnr"), strict=True):
        for name in ("forward_dynamics", "copy_last_frame", "vae_reconstruction"):
            ax.plot(sec, res[name][metric], marker="o", label=name.replace("_", " "))
        if "controllability" in res:
            ax.plot(
                sec, res["controllability"]["shuffled"][metric], marker="x", ls="--", label="shuffled actions"
            )
        ax.set_xlabel("horizon (s)")
        ax.set_title(metric.replace("_", " "))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    apply_threads(args.threads)
    if args.clips < 1 or args.steps < 1:
        raise ValueError(f"--clips and --steps must be >= 1, got {args.clips} and {args.steps}")
    import numpy as np

    from cosmos3_robot.policies.evaluation import evaluate_world, load_clips
    from cosmos3_robot.policies.runners import SamplingConfig
    from cosmos3_robot.policies.world_model import WorldModel
    from cosmos3_robot.viz.rerun_log import write_comparison

    world = WorldModel.from_folder(args.model)
    print(f"loading up to {args.clips} clips of {args.root} ...", flush=True)
    clips = load_clips(world, str(args.root), args.episodes, args.clips)
    config = run_config(args, skip=("threads",))
    prov = claim_output(args.out, "evaluate", config)
    print(f"evaluating {len(clips.tasks)} clips (forward dynamics x 5, inverse dynamics x 2) ...", flush=True)
    res, pred = evaluate_world(world, clips, SamplingConfig(steps=args.steps, seed=args.seed), seed=args.seed)
    g = world.geometry
    order = np.argsort(res["clip_psnr"])
    for name, i in (("worst", int(order[0])), ("best", int(order[-1]))):
        write_comparison(args.out / f"{name}.rrd", clips.frames[i], pred[i], fps=g.fps / g.frame_step)
        res[f"{name}_clip"] = {
            "episode": clips.episodes[i],
            "start_frame": clips.starts[i],
            "psnr": res["clip_psnr"][i],
        }
    write_json_atomic(args.out / "results.json", {**prov, **res})
    plot_curves(res, args.out / "curves.png")
    fd, copy = res["forward_dynamics"]["psnr"], res["copy_last_frame"]["psnr"]
    print(f"horizons (s): {', '.join(f'{s:.2f}' for s in res['horizons_s'])}")
    print(f"PSNR forward dynamics: {', '.join(f'{v:.2f}' for v in fd)} dB; copy last frame: "
          f"{', '.join(f'{v:.2f}' for v in copy)} dB")  # fmt: skip
    if "inverse_dynamics" in res:
        idm = res["inverse_dynamics"]
        print(
            f"inverse dynamics action MSE {idm['mse']:.4f} (mean action {idm['mean_action_mse']:.4f}), R² {idm['r2']:.3f}"
        )
    print(f"wrote {args.out / 'results.json'}, curves.png, best.rrd, worst.rrd")
    return 0
