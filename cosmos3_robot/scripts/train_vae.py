"""`cosmos3-robot train-vae`: train the small video VAE on a LeRobot dataset (see `training/vae.py`).

    cosmos3-robot train-vae --root data/push --out runs/vae --preset sim-small --steps 2000 --max-minutes 12

Reads: the dataset's video key, every frame in memory. Writes into --out: `vae/` (a Diffusers
AutoencoderKLWan folder that `train +data.options.vae=OUT/vae` and the world model load),
`checkpoint.safetensors` (weights, optimiser, RNG: a rerun with the same --out resumes) and
`train_log.json` (held-out PSNR, latent spread and later-latent use per evaluation).
"""

from __future__ import annotations

import argparse
import json

from cosmos3_robot.infra.cpu_pack import TRAINING_DTYPES
from cosmos3_robot.scripts.common import HelpFormatter
from cosmos3_robot.training.vae import train_vae
from cosmos3_robot.training.vae_config import VAETrainConfig

_HELP = {
    "out": "output folder (checkpoint.safetensors + vae/ + train_log.json); resumed if present",
    "repo_id": "LeRobot dataset repo id (default: local/<root folder name>)",
    "root": "local LeRobot dataset folder(s), read offline; several train one VAE for an env suite",
    "video_key": "the dataset's image key",
    "preset": "VAE size preset (tiny, sim-small, wan2.2)",
    "latent_channels": "override the preset's latent channels (must equal the world model's)",
    "base_dim": "override the preset's encoder/decoder width",
    "size": "resize frames to SIZE x SIZE (a multiple of 32)",
    "steps": "optimiser steps in all (a resumed run continues to this count)",
    "batch_frames": "frames per step (clip steps: batch_frames // 5 clips)",
    "video_fraction": "share of steps that train on 5-frame clips (0..1); the rest on single frames",
    "lr": "peak learning rate (linear warmup, cosine to 10 %%)",
    "warmup": "warmup steps",
    "loss": "reconstruction loss (mse or l1)",
    "kl_weight": "weight of KL(posterior || N(0, I)) per input value",
    "edge_weight": "weight of the L1 loss on image gradients",
    "foreground_weight": "extra reconstruction weight W on foreground pixels (1 + W there, 1 elsewhere; a pixel "
    "is foreground where it differs from its frame's median colour): small objects such as coloured targets "
    "otherwise cost a frame-mean loss almost nothing",
    "dtype": "autocast dtype of training; auto: bf16 where the CPU has oneDNN bf16 kernels, else fp32",
    "holdout_episodes": "last episodes held out for evaluation",
    "max_episodes": "use only the first N episodes",
    "eval_every": "steps between held-out evaluations",
    "save_every": "steps between checkpoints",
    "max_minutes": "stop (and save) after this wall time",
    "seed": "seed of the weights and of the clip sampler",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot train-vae",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    defaults = VAETrainConfig.__dataclass_fields__
    for name in VAETrainConfig.field_names():
        field = defaults[name]
        flag = "--" + name.replace("_", "-")
        kind = int if field.type.startswith("int") else float if field.type.startswith("float") else str
        kwargs = {"type": kind, "help": _HELP[name]}
        if name == "out":
            kwargs["required"] = True
        else:
            kwargs["default"] = field.default
        if name == "root":
            kwargs["nargs"] = "+"
        if name == "loss":
            kwargs["choices"] = ("mse", "l1")
        if name == "dtype":
            kwargs["choices"] = TRAINING_DTYPES
        p.add_argument(flag, **kwargs)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        import torch

        torch.set_num_threads(args.threads)
    cfg = VAETrainConfig(**{k: v for k, v in vars(args).items() if k != "threads"})
    result = train_vae(cfg)
    print(json.dumps(result))
    return 0
