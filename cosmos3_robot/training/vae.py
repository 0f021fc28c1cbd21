"""`cosmos3-robot train-vae`: train the small Wan2.2-layout video VAE on a LeRobot dataset.

Stage 0 of DESIGN.md: where no pretrained VAE is given, one must exist before it can be frozen.

    cosmos3-robot train-vae --repo-id local/push --root data/push --out runs/vae \
        --preset sim-small --steps 2000 --max-minutes 12

What it does
  * loads every frame of the dataset's video key once (uint8, in memory), holds out the last
    `--holdout-episodes` episodes for evaluation;
  * each step draws either single frames (the VAE's image path, latent 0) or 5-frame clips (the
    causal temporal path, latent 1), `--video-fraction` of the steps being clips;
  * loss = L1 (or MSE) reconstruction + `--edge-weight` · L1 of image gradients
    + `--kl-weight` · KL(posterior ‖ N(0, I)) per input value; bf16 autocast on CPU by default
    (AMX makes it ~2x faster than fp32 here; weights and optimizer stay fp32);
  * every `--eval-every` steps: reconstruction PSNR of held-out 5-frame clips, fp32, deterministic;
  * every `--save-every` steps and at the end: `OUT/checkpoint.safetensors` (weights, AdamW state,
    RNG states, step; written to a temp file and renamed) and `OUT/vae/` (a Diffusers folder that
    `VideoVAE.from_pretrained` loads, with per-channel latent mean/std measured on training clips).
  * rerunning with the same `--out` resumes from the checkpoint (same data order and RNG).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from cosmos3_robot.datasets.sources import open_lerobot_dataset
from cosmos3_robot.encoders.vae import VAE_PRESETS, VideoVAE, vae_config
from cosmos3_robot.processors.geometry import check_spatial_size
from cosmos3_robot.training.data.latent_cache import iter_lerobot_episodes

CLIP_FRAMES = 5  # the shortest clip that exercises the temporal path (latent 0 + latent 1)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cosmos3-robot train-vae", description=__doc__.split("\n")[0])
    p.add_argument("--repo-id", required=True, help="LeRobot dataset repo id")
    p.add_argument("--root", default=None, help="local dataset folder (offline)")
    p.add_argument("--video-key", default="observation.image")
    p.add_argument("--out", required=True, help="output folder (checkpoint + vae/); resumes if present")
    p.add_argument("--preset", default="sim-small", choices=VAE_PRESETS)
    p.add_argument("--latent-channels", type=int, default=None, help="override the preset's latent channels")
    p.add_argument("--base-dim", type=int, default=None, help="override the preset's encoder width")
    p.add_argument("--size", type=int, default=None, help="resize frames to SIZE x SIZE (multiple of 32)")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument(
        "--batch-frames", type=int, default=8, help="frames per step (clips: batch_frames // 5 clips)"
    )
    p.add_argument(
        "--video-fraction", type=float, default=0.3, help="share of steps that train on 5-frame clips"
    )
    # Defaults from the run that reached 31.7 dB held-out at 128x128 (48 latent channels, 2610 steps,
    # 25 min on 2 cores); L1 + KL 1e-4 + lr 1e-3 plateaued near 25 dB on the same data.
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--loss", choices=("l1", "mse"), default="mse")
    p.add_argument("--kl-weight", type=float, default=1e-6)
    p.add_argument("--edge-weight", type=float, default=0.5)
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16", help="autocast dtype for training")
    p.add_argument("--holdout-episodes", type=int, default=2)
    p.add_argument("--max-episodes", type=int, default=None, help="use only the first N episodes")
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--save-every", type=int, default=500)
    p.add_argument("--max-minutes", type=float, default=None, help="stop (and save) after this wall time")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    return p


# ---------------------------------------------------------------------------------------------
# Data: every frame in memory, clips drawn with a seeded generator


class FrameBank:
    """uint8 frames of several episodes; draws (B, T, 3, H, W) float batches in [0, 1]."""

    def __init__(self, episodes: list[Tensor]) -> None:
        self.episodes = [e for e in episodes if e.shape[0] >= CLIP_FRAMES]
        if not self.episodes:
            raise ValueError(f"no episode has at least {CLIP_FRAMES} frames")
        self.lengths = torch.tensor([e.shape[0] for e in self.episodes])

    @property
    def num_frames(self) -> int:
        return int(self.lengths.sum())

    def sample(self, batch: int, clip_frames: int, gen: torch.Generator) -> Tensor:
        # episodes weighted by length = frames drawn uniformly over the dataset
        eps = torch.multinomial(self.lengths.double(), batch, replacement=True, generator=gen)
        clips = []
        for e in eps.tolist():
            start = int(torch.randint(0, int(self.lengths[e]) - clip_frames + 1, (1,), generator=gen))
            clips.append(self.episodes[e][start : start + clip_frames])
        return torch.stack(clips).float() / 255  # (B, T, 3, H, W)

    def fixed_clips(self, count: int, clip_frames: int = CLIP_FRAMES) -> Tensor:
        """`count` evenly spread clips (deterministic), for evaluation and latent statistics."""
        starts = [
            (e, s)
            for e, ep in enumerate(self.episodes)
            for s in range(0, ep.shape[0] - clip_frames + 1, clip_frames)
        ]
        pick = [
            starts[round(i * (len(starts) - 1) / max(count - 1, 1))] for i in range(min(count, len(starts)))
        ]
        return torch.stack([self.episodes[e][s : s + clip_frames] for e, s in pick]).float() / 255


def load_frames(args: argparse.Namespace) -> tuple[FrameBank, FrameBank, dict]:
    dataset = open_lerobot_dataset(args.repo_id, args.root)
    n = (
        dataset.meta.total_episodes
        if args.max_episodes is None
        else min(args.max_episodes, dataset.meta.total_episodes)
    )
    if n <= args.holdout_episodes:
        raise ValueError(
            f"dataset has {n} episodes; need more than --holdout-episodes={args.holdout_episodes}"
        )
    frames = [f for _, f, _ in iter_lerobot_episodes(dataset, args.video_key, range(n), args.size)]
    check_spatial_size(*frames[0].shape[-2:])
    cut = n - args.holdout_episodes
    info = {"repo_id": args.repo_id, "fps": dataset.fps, "episodes": n, "heldout": list(range(cut, n))}
    return FrameBank(frames[:cut]), FrameBank(frames[cut:]), info


# ---------------------------------------------------------------------------------------------
# Loss, evaluation


def image_gradients(x: Tensor) -> tuple[Tensor, Tensor]:
    """Finite differences along W and H of (B, C, T, H, W)."""
    return x[..., :, 1:] - x[..., :, :-1], x[..., 1:, :] - x[..., :-1, :]


def vae_loss(vae: VideoVAE, frames: Tensor, args: argparse.Namespace) -> tuple[Tensor, dict[str, float]]:
    x = vae.frames_to_input(frames)  # (B, 3, T, H, W) in [-1, 1]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    with autocast:
        posterior = vae.autoencoder.encode(x).latent_dist
        recon = vae.autoencoder.decode(posterior.sample()).sample
    recon = recon.float()
    err = recon - x
    rec = err.abs().mean() if args.loss == "l1" else err.square().mean()
    gx, gy = image_gradients(recon)
    tx, ty = image_gradients(x)
    edge = (gx - tx).abs().mean() + (gy - ty).abs().mean()
    kl = posterior.kl().float().mean() / x[0].numel()  # nats per input value
    loss = rec + args.edge_weight * edge + args.kl_weight * kl
    return loss, {"rec": rec.item(), "edge": edge.item(), "kl": kl.item()}


def psnr(pred: Tensor, target: Tensor) -> Tensor:
    """Per-frame PSNR (dB) of (..., 3, H, W) images in [0, 1]."""
    mse = (pred - target).square().flatten(-3).mean(-1)
    return 10 * torch.log10(1.0 / mse.clamp(min=1e-10))


# Below this `latent_spread` the latents hardly depend on the clip (see `latent_spread`).
COLLAPSED_SPREAD = 0.05
# Below this `later_latent_use` the decoder draws later frames from the first latent (see there).
IGNORED_LATER_LATENTS = 0.1


def latent_spread(latents: Tensor) -> float:
    """How much latents (N, C, T, h, w) differ between clips, relative to how much they vary at all:
    the std across the N clips (averaged over channels, frames and positions) over the overall std.

    Near 0 the encoder ignores its input: an early VAE decodes the average frame for every clip (on
    scenes whose moving parts are small, that alone reaches ~21 dB), and no world model trained on
    such latents can see the motion. Clips with independent latents give about 1."""
    if latents.ndim < 2 or latents.shape[0] < 2:
        raise ValueError(
            f"latent_spread needs latents of at least 2 clips (N, ...), got {tuple(latents.shape)}"
        )
    x = latents.float()
    return float(x.std(0).mean() / x.std().clamp(min=1e-12))


@torch.no_grad()
def later_latent_use(vae: VideoVAE, latents: Tensor, frames: Tensor) -> float:
    """Whether the decoder reads the latent frames after the first: swap latent frames 1.. between
    clips (each clip gets the next clip's) and measure how much its decoded frames 1.. change,
    relative to how much the true frames 1.. of those two clips differ.

    latents (N, C, T_lat, h, w) of frames (N, T, 3, H, W), N ≥ 2, T_lat ≥ 2. About 1 when later
    latents carry the later frames; near 0 when the decoder renders them from the first latent
    alone (what a VAE learns first on scenes that barely move between frames). Then no forward
    dynamics model can change the decoded future, however well it predicts the latents."""
    if latents.shape[0] < 2 or latents.shape[2] < 2:
        raise ValueError(f"later_latent_use needs ≥ 2 clips of ≥ 2 latent frames, got {tuple(latents.shape)}")
    nxt = torch.roll(torch.arange(latents.shape[0]), 1)
    swapped = torch.cat([latents[:, :, :1], latents[nxt, :, 1:]], dim=2)
    change = (vae.decode(swapped)[:, 1:] - vae.decode(latents)[:, 1:]).abs().mean()
    differ = (frames[nxt, 1:] - frames[:, 1:]).abs().mean().clamp(min=1e-12)
    return float(change / differ)


@torch.no_grad()
def evaluate(vae: VideoVAE, clips: Tensor, batch: int = 4) -> dict[str, float]:
    """Mean PSNR over all frames of the clips, and split: frame 0 (image path) vs frames 1..4; the
    `latent_spread` of the clips' latents and the decoder's `later_latent_use` (None for one clip)."""
    was_training = vae.training
    vae.autoencoder.eval()
    scores, latents = [], []
    for i in range(0, clips.shape[0], batch):
        x = clips[i : i + batch]
        latents.append(vae.encode(x))
        scores.append(psnr(vae.decode(latents[-1]), x))  # (b, T)
    vae.autoencoder.train(was_training)
    s = torch.cat(scores)
    return {
        "psnr": s.mean().item(),
        "psnr_first": s[:, 0].mean().item(),
        "psnr_rest": s[:, 1:].mean().item(),
        "latent_spread": latent_spread(torch.cat(latents)) if clips.shape[0] > 1 else None,
        "later_latent_use": later_latent_use(vae, torch.cat(latents), clips) if clips.shape[0] > 1 else None,
    }


@torch.no_grad()
def latent_stats(vae: VideoVAE, clips: Tensor, batch: int = 4) -> tuple[Tensor, Tensor]:
    """Per-channel mean / std of the raw posterior means over some training clips."""
    mus = []
    for i in range(0, clips.shape[0], batch):
        mus.append(vae.autoencoder.encode(vae.frames_to_input(clips[i : i + batch])).latent_dist.mode())
    mu = torch.cat(mus).float().transpose(0, 1).flatten(1)  # (C, N)
    return mu.mean(1), mu.std(1).clamp(min=1e-4)


# ---------------------------------------------------------------------------------------------
# Checkpoints: one safetensors file, written atomically


def save_checkpoint(
    path: Path, vae: VideoVAE, opt: torch.optim.Optimizer, gen: torch.Generator, meta: dict
) -> None:
    tensors = {f"model.{k}": v.detach().contiguous() for k, v in vae.autoencoder.state_dict().items()}
    for i, state in opt.state_dict()["state"].items():
        for k, v in state.items():
            tensors[f"optim.{i}.{k}"] = torch.as_tensor(v).detach().contiguous()
    tensors["rng.torch"] = torch.get_rng_state()
    tensors["rng.sampler"] = gen.get_state()
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata={"meta": json.dumps(meta)})
    os.replace(tmp, path)


def load_checkpoint(path: Path, vae: VideoVAE, opt: torch.optim.Optimizer, gen: torch.Generator) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        meta = json.loads(f.metadata()["meta"])
    tensors = load_file(str(path))
    vae.autoencoder.load_state_dict({k[6:]: v for k, v in tensors.items() if k.startswith("model.")})
    state = opt.state_dict()
    for key, v in tensors.items():
        if key.startswith("optim."):
            _, i, name = key.split(".", 2)
            state["state"].setdefault(int(i), {})[name] = v
    opt.load_state_dict(state)
    torch.set_rng_state(tensors["rng.torch"])
    gen.set_state(tensors["rng.sampler"])
    return meta


# ---------------------------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from tqdm import tqdm

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.size is not None:
        check_spatial_size(args.size, args.size)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ckpt_path = out / "checkpoint.safetensors"

    overrides = {}
    if args.latent_channels:
        overrides["latent_channels"] = args.latent_channels
    if args.base_dim:
        overrides["base_dim"] = overrides["decoder_base_dim"] = args.base_dim
    torch.manual_seed(args.seed)
    vae = VideoVAE(vae_config(args.preset, **overrides))
    vae.unfreeze()
    opt = torch.optim.AdamW(vae.autoencoder.parameters(), lr=args.lr, betas=(0.9, 0.99), weight_decay=0.0)
    gen = torch.Generator().manual_seed(args.seed)
    history: list[dict] = []
    step, train_seconds = 0, 0.0
    if ckpt_path.exists():
        meta = load_checkpoint(ckpt_path, vae, opt, gen)
        step, history, train_seconds = meta["step"], meta["history"], meta.get("train_seconds", 0.0)
        if meta["vae_config"]["latent_channels"] != vae.latent_channels:
            raise ValueError(f"{ckpt_path} holds another VAE config; use a new --out or the same options")
        print(f"resumed from {ckpt_path} at step {step}")

    t_load = time.time()
    train, held, info = load_frames(args)
    print(
        f"{train.num_frames} training frames, {held.num_frames} held-out frames "
        f"({time.time() - t_load:.1f}s to load), {sum(p.numel() for p in vae.parameters()) / 1e6:.2f} M params"
    )
    eval_clips = held.fixed_clips(8)
    stat_clips = train.fixed_clips(32)

    def lr_at(s: int) -> float:  # linear warmup, cosine to 10 %
        if s < args.warmup:
            return args.lr * (s + 1) / args.warmup
        frac = (s - args.warmup) / max(1, args.steps - args.warmup)
        return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(frac, 1.0))))

    def save() -> None:
        vae.autoencoder.eval()
        mean, std = latent_stats(vae, stat_clips)
        vae.set_latent_stats(mean, std)
        meta = {
            "step": step,
            "train_seconds": round(train_seconds, 1),
            "history": history,
            "vae_config": asdict(vae.config),
            "args": vars(args),
            "data": info,
        }
        save_checkpoint(ckpt_path, vae, opt, gen, meta)
        vae.save_pretrained(out / "vae")
        (out / "train_log.json").write_text(json.dumps(meta, indent=2))
        vae.autoencoder.train()

    t0 = time.time()
    bar = tqdm(total=args.steps, initial=step, desc="train-vae", unit="step", mininterval=2.0)
    while step < args.steps:
        t_step = time.time()
        video = torch.rand((), generator=gen).item() < args.video_fraction
        clip_frames = CLIP_FRAMES if video else 1
        frames = train.sample(max(1, args.batch_frames // clip_frames), clip_frames, gen)
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        loss, parts = vae_loss(vae, frames, args)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(vae.autoencoder.parameters(), 1.0)
        opt.step()
        step += 1
        train_seconds += time.time() - t_step
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.4f}", rec=f"{parts['rec']:.4f}")
        out_of_time = args.max_minutes is not None and (time.time() - t0) > args.max_minutes * 60
        if step % args.eval_every == 0 or step == args.steps or out_of_time:
            scores = evaluate(vae, eval_clips)
            history.append({"step": step, "train_seconds": round(train_seconds, 1), **parts, **scores})
            spread, use = scores["latent_spread"], scores["later_latent_use"]
            bar.write(
                f"step {step}: held-out PSNR {scores['psnr']:.2f} dB (first frame {scores['psnr_first']:.2f}, "
                f"later frames {scores['psnr_rest']:.2f}), latent spread "
                f"{'n/a (1 clip)' if spread is None else f'{spread:.3f}'}, later-latent use "
                f"{'n/a' if use is None else f'{use:.3f}'}, loss {loss.item():.4f}"
            )
        if step % args.save_every == 0 or step == args.steps or out_of_time:
            save()
        if out_of_time:
            bar.write(f"stopping at step {step}: --max-minutes {args.max_minutes} reached")
            break
    bar.close()
    if history:
        print(json.dumps(history[-1]))
        spread, use = history[-1].get("latent_spread"), history[-1].get("later_latent_use")
        if spread is not None and spread < COLLAPSED_SPREAD:
            print(
                f"warning: latent spread {spread:.4f} < {COLLAPSED_SPREAD}: the latents hardly differ between "
                "clips (the VAE decodes about the same frame for all of them); train longer (--steps, "
                "--max-minutes) before using it for a world model"
            )
        if use is not None and use < IGNORED_LATER_LATENTS:
            print(
                f"warning: later-latent use {use:.3f} < {IGNORED_LATER_LATENTS}: the decoder draws the later "
                "frames of a clip from its first latent, so predicted future latents will hardly show in "
                "decoded video; train longer"
            )
    return 0
