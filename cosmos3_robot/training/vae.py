"""Train the small Wan2.2-layout video VAE on a LeRobot dataset (`cosmos3-robot train-vae`).

Stage 0 of docs/design.md ("Training stages"): where no pretrained VAE is given, one must exist before it can be frozen.

    cosmos3-robot train-vae --repo-id local/push --root data/push --out runs/vae \
        --preset sim-small --steps 2000 --max-minutes 12

What it does
  * loads every frame of the dataset's video key once (uint8, in memory), holds out the last
    `holdout_episodes` episodes for evaluation;
  * each step draws either single frames (the VAE's image path, latent 0) or 5-frame clips (the
    causal temporal path, latent 1), `video_fraction` of the steps being clips;
  * loss = L1 (or MSE) reconstruction (weighted 1 + `foreground_weight` on pixels unlike the
    frame's background, see eval.metrics.foreground_mask) + `edge_weight` · L1 of image gradients
    + `kl_weight` · KL(posterior ‖ N(0, I)) per input value; bf16 autocast on CPU by default
    (AMX makes it ~2x faster than fp32 here; weights and optimizer stay fp32);
  * every `eval_every` steps: reconstruction PSNR of held-out 5-frame clips, fp32, deterministic;
  * every `save_every` steps and at the end: `OUT/checkpoint.safetensors` (weights, AdamW state,
    RNG states, step; written to a temp file and renamed) and `OUT/vae/` (a Diffusers folder that
    `VideoVAE.from_pretrained` loads, with per-channel latent mean/std measured on training clips).
  * rerunning with the same `out` resumes from the checkpoint (same data order and RNG).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from torch import Tensor

from cosmos3_robot.datasets.episodes import iter_lerobot_episodes
from cosmos3_robot.datasets.sources import open_lerobot_dataset
from cosmos3_robot.encoders.vae import QUALITY_FILE, VideoVAE
from cosmos3_robot.eval.metrics import (
    COLLAPSED_SPREAD,
    IGNORED_LATER_LATENTS,
    foreground_mask,
    foreground_psnr,
    frame_psnr,
    latent_spread,
    later_latent_use,
)
from cosmos3_robot.files import CheckpointError, write_json_atomic
from cosmos3_robot.infra.cpu_pack import training_dtype
from cosmos3_robot.processors.geometry import check_spatial_size
from cosmos3_robot.training.one_file_checkpoint import read_one_file, restore, save_one_file
from cosmos3_robot.training.vae_config import VAETrainConfig

CLIP_FRAMES = 5  # the shortest clip that exercises the temporal path (latent 0 + latent 1)


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


def load_frames(cfg: VAETrainConfig) -> tuple[FrameBank, FrameBank, dict]:
    """Every frame of every dataset in memory; the last `holdout_episodes` of each are held out."""
    roots = cfg.root if isinstance(cfg.root, list) else [cfg.root]
    train, held, info = [], [], {"datasets": []}
    for root in roots:
        dataset = open_lerobot_dataset(cfg.repo_id if len(roots) == 1 else None, root)
        total = dataset.meta.total_episodes
        n = total if cfg.max_episodes is None else min(cfg.max_episodes, total)
        if n <= cfg.holdout_episodes:
            raise ValueError(
                f"dataset {root or cfg.repo_id} has {n} episodes; need more than "
                f"--holdout-episodes={cfg.holdout_episodes} (record more, or lower --holdout-episodes)"
            )
        frames = [f for _, f, _ in iter_lerobot_episodes(dataset, cfg.video_key, range(n), cfg.size)]
        check_spatial_size(*frames[0].shape[-2:])
        if train and frames[0].shape[-2:] != train[0].shape[-2:]:
            raise ValueError(f"dataset {root} has {tuple(frames[0].shape[-2:])} frames, the first one "
                             f"{tuple(train[0].shape[-2:])}; pass --size to resize them all")  # fmt: skip
        cut = n - cfg.holdout_episodes
        train += frames[:cut]
        held += frames[cut:]
        info["datasets"].append({"repo_id": dataset.repo_id, "root": str(root), "fps": dataset.fps,
                                 "episodes": n, "heldout": list(range(cut, n))})  # fmt: skip
    return FrameBank(train), FrameBank(held), info


# ---------------------------------------------------------------------------------------------
# Loss, evaluation


def image_gradients(x: Tensor) -> tuple[Tensor, Tensor]:
    """Finite differences along W and H of (B, C, T, H, W)."""
    return x[..., :, 1:] - x[..., :, :-1], x[..., 1:, :] - x[..., :-1, :]


def reconstruction_loss(recon: Tensor, x: Tensor, loss: str, foreground_weight: float = 0.0) -> Tensor:
    """Mean L1 / squared error of (B, 3, T, H, W) in [-1, 1]; with `foreground_weight` W a weighted
    mean, each pixel weighted 1 + W where the input is foreground (`foreground_mask`), so the loss
    keeps its scale while small objects count."""
    err = recon - x
    per_pixel = err.abs() if loss == "l1" else err.square()
    if foreground_weight <= 0:
        return per_pixel.mean()
    fg = foreground_mask(((x.detach().float() + 1) / 2).transpose(1, 2)).unsqueeze(1)  # (B, 1, T, H, W)
    w = 1 + foreground_weight * fg.float()
    return (per_pixel * w).mean() / w.mean()


def vae_loss(vae: VideoVAE, frames: Tensor, cfg: VAETrainConfig) -> tuple[Tensor, dict[str, float]]:
    x = vae.frames_to_input(frames)  # (B, 3, T, H, W) in [-1, 1]
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=training_dtype(cfg.dtype) == "bf16")
    with autocast:
        posterior = vae.autoencoder.encode(x).latent_dist
        recon = vae.autoencoder.decode(posterior.sample()).sample
    recon = recon.float()
    rec = reconstruction_loss(recon, x, cfg.loss, cfg.foreground_weight)
    gx, gy = image_gradients(recon)
    tx, ty = image_gradients(x)
    edge = (gx - tx).abs().mean() + (gy - ty).abs().mean()
    kl = posterior.kl().float().mean() / x[0].numel()  # nats per input value
    loss = rec + cfg.edge_weight * edge + cfg.kl_weight * kl
    return loss, {"rec": rec.item(), "edge": edge.item(), "kl": kl.item()}


@torch.no_grad()
def evaluate_reconstruction(vae: VideoVAE, clips: Tensor, batch: int = 4) -> dict[str, float]:
    """Mean PSNR over all frames of the clips, and split: frame 0 (image path) vs frames 1..4; the
    `latent_spread` of the clips' latents and the decoder's `later_latent_use` (None for one clip)."""
    was_training = vae.training
    vae.autoencoder.eval()
    scores, latents, recon = [], [], []
    for i in range(0, clips.shape[0], batch):
        x = clips[i : i + batch]
        latents.append(vae.encode(x))
        recon.append(vae.decode(latents[-1]))
        scores.append(frame_psnr(recon[-1], x))  # (b, T)
    vae.autoencoder.train(was_training)
    s = torch.cat(scores)
    return {
        "psnr": s.mean().item(),
        "psnr_first": s[:, 0].mean().item(),
        "psnr_rest": s[:, 1:].mean().item(),
        "psnr_foreground": foreground_psnr(torch.cat(recon), clips),
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


def save_vae_checkpoint(
    path: Path, vae: VideoVAE, opt: torch.optim.Optimizer, gen: torch.Generator, meta: dict
) -> None:
    rng = {"torch": torch.get_rng_state(), "sampler": gen.get_state()}
    save_one_file(path, vae.autoencoder.state_dict(), opt, rng, meta)


def load_vae_checkpoint(path: Path, vae: VideoVAE, opt: torch.optim.Optimizer, gen: torch.Generator) -> dict:
    meta, tensors = read_one_file(path)
    want = json.loads(json.dumps(asdict(vae.config)))
    measured = ("latents_mean", "latents_std")  # set from the data at every save
    changed = sorted(k for k, v in want.items() if k not in measured and meta["vae_config"].get(k) != v)
    if changed:
        raise CheckpointError(
            f"{path} holds a VAE with other settings ({', '.join(changed)}); use a new --out or the "
            "options of the run that wrote it"
        )
    model, rng = restore(tensors, opt)
    vae.autoencoder.load_state_dict(model)
    torch.set_rng_state(rng["torch"])
    gen.set_state(rng["sampler"])
    return meta


# ---------------------------------------------------------------------------------------------
# The loop


def lr_at(cfg: VAETrainConfig, step: int) -> float:
    """Linear warmup, then cosine to 10 %."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(frac, 1.0))))


class VAETrainer:
    """The state of one `train-vae` run: model, optimiser, sampler RNG, history; resumable."""

    def __init__(self, cfg: VAETrainConfig, log: Callable[[str], None] = print) -> None:
        self.cfg, self.log = cfg, log
        self.out = Path(cfg.out)
        self.ckpt_path = self.out / "checkpoint.safetensors"
        torch.manual_seed(cfg.seed)
        self.vae = VideoVAE(cfg.vae_config())
        self.vae.unfreeze()
        params = self.vae.autoencoder.parameters()
        self.opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.99), weight_decay=0.0)
        self.gen = torch.Generator().manual_seed(cfg.seed)
        self.history: list[dict] = []
        self.step, self.train_seconds, self.start_step = 0, 0.0, 0
        if self.ckpt_path.exists():
            meta = load_vae_checkpoint(self.ckpt_path, self.vae, self.opt, self.gen)
            self.step, self.history = meta["step"], meta["history"]
            self.train_seconds, self.start_step = meta.get("train_seconds", 0.0), meta["step"]
            log(f"resumed from {self.ckpt_path} at step {self.step}")

    def load_data(self) -> dict:
        t_load = time.time()
        self.train, held, self.info = load_frames(self.cfg)
        params = sum(p.numel() for p in self.vae.parameters()) / 1e6
        self.log(
            f"{self.train.num_frames} training frames, {held.num_frames} held-out frames "
            f"({time.time() - t_load:.1f}s to load), {params:.2f} M params"
        )
        self.eval_clips = held.fixed_clips(8)
        self.stat_clips = self.train.fixed_clips(32)
        return self.info

    def train_step(self) -> tuple[float, dict[str, float]]:
        cfg = self.cfg
        t_step = time.time()
        video = torch.rand((), generator=self.gen).item() < cfg.video_fraction
        clip_frames = CLIP_FRAMES if video else 1
        frames = self.train.sample(max(1, cfg.batch_frames // clip_frames), clip_frames, self.gen)
        for group in self.opt.param_groups:
            group["lr"] = lr_at(cfg, self.step)
        loss, parts = vae_loss(self.vae, frames, cfg)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"train-vae: the loss became {loss.item()} at step {self.step + 1}; lower --lr, or check the "
                "dataset's frames for NaN"
            )
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.vae.autoencoder.parameters(), 1.0)
        self.opt.step()
        self.step += 1
        self.train_seconds += time.time() - t_step
        return loss.item(), parts

    def evaluate(self, parts: dict[str, float]) -> dict:
        scores = evaluate_reconstruction(self.vae, self.eval_clips)
        self.history.append(
            {"step": self.step, "train_seconds": round(self.train_seconds, 1), **parts, **scores}
        )
        return scores

    def save(self) -> None:
        self.vae.autoencoder.eval()
        mean, std = latent_stats(self.vae, self.stat_clips)
        self.vae.set_latent_stats(mean, std)
        meta = {
            "step": self.step,
            "train_seconds": round(self.train_seconds, 1),
            "history": self.history,
            "vae_config": asdict(self.vae.config),
            "args": asdict(self.cfg),
            "data": self.info,
        }
        self.out.mkdir(parents=True, exist_ok=True)
        save_vae_checkpoint(self.ckpt_path, self.vae, self.opt, self.gen, meta)
        # The quality report (what `frozen_vae` reads before training on this VAE) is written inside the
        # same atomic folder as the weights, so the two never disagree.
        quality = (
            {QUALITY_FILE: {**self.history[-1], "data": self.info, "args": asdict(self.cfg)}}
            if self.history
            else {}
        )
        self.vae.save_pretrained(self.out / "vae", extra_json=quality)
        write_json_atomic(self.out / "train_log.json", meta)
        self.vae.autoencoder.train()


def describe_scores(step: int, scores: dict, loss: float) -> str:
    spread, use = scores["latent_spread"], scores["later_latent_use"]
    return (
        f"step {step}: held-out PSNR {scores['psnr']:.2f} dB (first frame {scores['psnr_first']:.2f}, "
        f"later frames {scores['psnr_rest']:.2f}, foreground {scores['psnr_foreground']:.2f}), latent spread "
        f"{'n/a (1 clip)' if spread is None else f'{spread:.3f}'}, later-latent use "
        f"{'n/a' if use is None else f'{use:.3f}'}, loss {loss:.4f}"
    )


def quality_warnings(last: dict) -> list[str]:
    """What a VAE's last evaluation says against freezing it."""
    out = []
    spread, use = last.get("latent_spread"), last.get("later_latent_use")
    if spread is not None and spread < COLLAPSED_SPREAD:
        out.append(
            f"warning: latent spread {spread:.4f} < {COLLAPSED_SPREAD}: the latents hardly differ between "
            "clips (the VAE decodes about the same frame for all of them); train longer (--steps, "
            "--max-minutes) before using it for a world model"
        )
    if use is not None and use < IGNORED_LATER_LATENTS:
        out.append(
            f"warning: later-latent use {use:.3f} < {IGNORED_LATER_LATENTS}: the decoder draws the later "
            "frames of a clip from its first latent, so predicted future latents will hardly show in "
            "decoded video; train longer"
        )
    return out


def train_vae(cfg: VAETrainConfig, progress: bool = True) -> dict:
    """Train (or resume) to `cfg.steps`; returns the last evaluation, with the steps this call ran."""
    from tqdm import tqdm

    t = VAETrainer(cfg)
    if t.step >= cfg.steps:
        print(f"{cfg.out} is already trained to step {t.step} (--steps {cfg.steps}); nothing to do")
        return {**(t.history[-1] if t.history else {}), "steps_run": 0, "vae": str(t.out / "vae")}
    src = cfg.root if cfg.root is not None else cfg.repo_id
    roots = ", ".join(str(r) for r in (src if isinstance(src, list | tuple) else [src]))
    print(f"loading every frame of {roots} into memory ...", flush=True)
    t.load_data()
    t0 = time.time()
    bar = tqdm(
        total=cfg.steps, initial=t.step, desc="train-vae", unit="step", mininterval=2.0, disable=not progress
    )
    t.log = bar.write
    while t.step < cfg.steps:
        loss, parts = t.train_step()
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}", rec=f"{parts['rec']:.4f}")
        out_of_time = cfg.max_minutes is not None and (time.time() - t0) > cfg.max_minutes * 60
        if t.step % cfg.eval_every == 0 or t.step == cfg.steps or out_of_time:
            bar.write(f"step {t.step}: evaluating on the held-out episodes ...")
            bar.write(describe_scores(t.step, t.evaluate(parts), loss))
        if t.step % cfg.save_every == 0 or t.step == cfg.steps or out_of_time:
            bar.write(f"step {t.step}: saving {t.ckpt_path} and {t.out / 'vae'} ...")
            t.save()
        if out_of_time:
            bar.write(f"stopping at step {t.step}: --max-minutes {cfg.max_minutes} reached")
            break
    bar.close()
    last = t.history[-1] if t.history else {}
    for line in quality_warnings(last):
        print(line)
    return {**last, "steps_run": t.step - t.start_step, "vae": str(t.out / "vae")}
