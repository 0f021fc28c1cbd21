"""Evaluation metrics, one implementation each: images, latents, actions, success rates.

Images are uint8 in [0, 255] or float in [0, 1], laid out (..., 3, H, W); the functions say which.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

# Below this `latent_spread` the latents hardly depend on the clip (see `latent_spread`).
COLLAPSED_SPREAD = 0.05
# Below this `later_latent_use` the decoder draws later frames from the first latent (see there).
IGNORED_LATER_LATENTS = 0.1


def frame_psnr(pred: Tensor, target: Tensor) -> Tensor:
    """Per-frame PSNR (dB) of (..., 3, H, W) float images in [0, 1]: shape (...)."""
    mse = (pred.float() - target.float()).square().flatten(-3).mean(-1)
    return 10 * torch.log10(1.0 / mse.clamp(min=1e-10))


FOREGROUND_TOLERANCE = 0.1  # in [0, 1] colour units: farther than this from the background is foreground


def foreground_mask(frames: Tensor) -> Tensor:
    """(..., 3, H, W) in [0, 1] -> bool (..., H, W): pixels whose colour differs from the frame's
    per-channel median (its background, in a scene that is mostly floor) by more than
    FOREGROUND_TOLERANCE in some channel."""
    background = frames.flatten(-2).median(-1).values[..., None, None]  # (..., 3, 1, 1)
    return ((frames - background).abs() > FOREGROUND_TOLERANCE).any(-3)


def foreground_psnr(pred: Tensor, target: Tensor) -> float:
    """PSNR (dB) over the foreground pixels of the targets (`foreground_mask`), all frames pooled:
    what a frame-mean PSNR hides when the objects that matter are small."""
    mask = foreground_mask(target.float())
    if not bool(mask.any()):
        raise ValueError("the frames have no foreground pixels (uniform images)")
    err = (pred.float() - target.float()).square().mean(-3)  # (..., H, W)
    return float(10 * torch.log10(1.0 / err[mask].mean().clamp(min=1e-10)))


def psnr(pred: Tensor | np.ndarray, target: Tensor | np.ndarray) -> float:
    """PSNR (dB) of the whole of two uint8 images or image stacks (one MSE over every pixel, then the log)."""
    pred, target = torch.as_tensor(pred), torch.as_tensor(target)
    if pred.shape != target.shape:
        raise ValueError(f"psnr needs equal shapes, got {tuple(pred.shape)} and {tuple(target.shape)}")
    mse = float(((pred.float() - target.float()) / 255.0).pow(2).mean())
    return 10 * math.log10(1.0 / max(mse, 1e-12))


def latent_mse(pred: Tensor, target: Tensor) -> float:
    return float((pred.float() - target.float()).square().mean())


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
def later_latent_use(vae, latents: Tensor, frames: Tensor) -> float:
    """Whether a VAE's decoder reads the latent frames after the first: swap latent frames 1..
    between clips (each clip gets the next clip's) and measure how much its decoded frames 1..
    change, relative to how much the true frames 1.. of those two clips differ.

    vae: anything with `decode(latents) -> (N, T, 3, H, W)` in [0, 1]. latents (N, C, T_lat, h, w)
    of frames (N, T, 3, H, W), N ≥ 2, T_lat ≥ 2. About 1 when later latents carry the later frames;
    near 0 when the decoder renders them from the first latent alone (what a VAE learns first on
    scenes that barely move between frames). Then no forward dynamics model can change the decoded
    future, however well it predicts the latents."""
    if latents.shape[0] < 2 or latents.shape[2] < 2:
        raise ValueError(f"later_latent_use needs ≥ 2 clips of ≥ 2 latent frames, got {tuple(latents.shape)}")
    nxt = torch.roll(torch.arange(latents.shape[0]), 1)
    swapped = torch.cat([latents[:, :, :1], latents[nxt, :, 1:]], dim=2)
    change = (vae.decode(swapped)[:, 1:] - vae.decode(latents)[:, 1:]).abs().mean()
    differ = (frames[nxt, 1:] - frames[:, 1:]).abs().mean().clamp(min=1e-12)
    return float(change / differ)


def action_errors(pred: np.ndarray, true: np.ndarray, baseline_mean: np.ndarray | None = None) -> dict:
    """MSE and R² of predicted actions (..., A) against the true ones, overall and per dimension,
    and the MSE of predicting `baseline_mean` (default: the true actions' own mean) for every sample.
    R² = 1 − MSE / variance of the true actions, per dimension."""
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    if pred.shape != true.shape:
        raise ValueError(f"action_errors needs equal shapes, got {pred.shape} and {true.shape}")
    p, t = pred.reshape(-1, pred.shape[-1]), true.reshape(-1, true.shape[-1])
    mean = t.mean(0) if baseline_mean is None else np.asarray(baseline_mean, np.float64)
    mse_dim = ((p - t) ** 2).mean(0)
    var_dim = t.var(0)
    r2_dim = np.where(var_dim > 0, 1.0 - mse_dim / np.maximum(var_dim, 1e-12), np.nan)
    return {
        "mse": float(mse_dim.mean()),
        "mean_action_mse": float(((mean - t) ** 2).mean()),
        "r2": float(np.nanmean(r2_dim)) if np.isfinite(r2_dim).any() else float("nan"),
        "mse_per_dim": mse_dim.tolist(),
        "r2_per_dim": r2_dim.tolist(),
    }


def wilson_interval(successes: int, trials: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95 % by default)."""
    if trials <= 0:
        raise ValueError(f"wilson_interval needs at least one trial, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, {trials}], got {successes}")
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def success_summary(successes: list[bool]) -> dict:
    """Success count, rate and Wilson 95 % interval of a list of episode outcomes."""
    n, k = len(successes), int(sum(bool(s) for s in successes))
    lo, hi = wilson_interval(k, n)
    return {"episodes": n, "successes": k, "success_rate": k / n, "wilson95": [lo, hi]}


def simulator_agreement(real: list[float], imagined: list[float]) -> dict:
    """How well a stand-in simulator ranks policies: Pearson and Spearman correlation of the
    success rates of the same policies in the real and the stand-in simulator, and MMRV, the mean
    maximum rank violation of SIMPLER (Li et al. 2024):

        MMRV = 1/N sum_i max_j |real_i - real_j| * [ (imagined_i < imagined_j) != (real_i < real_j) ]

    (0 is a perfect ranking; a violation costs the real gap it gets wrong). A correlation is None
    when either side is constant (it is undefined there), with the reason in `notes`."""
    from scipy import stats

    r, m = np.asarray(real, dtype=np.float64), np.asarray(imagined, dtype=np.float64)
    if r.shape != m.shape or r.ndim != 1 or len(r) < 3:
        raise ValueError(f"need the same >= 3 policies on both sides, got {r.shape} and {m.shape}")
    violation = np.abs(r[:, None] - r[None, :]) * ((m[:, None] < m[None, :]) != (r[:, None] < r[None, :]))
    out: dict = {"policies": len(r), "mmrv": float(violation.max(axis=1).mean()), "notes": []}
    for name, fn in (("pearson", stats.pearsonr), ("spearman", stats.spearmanr)):
        constant = [side for side, v in (("real", r), ("imagined", m)) if np.ptp(v) == 0]
        out[name] = None if constant else float(fn(r, m)[0])
        if constant:
            out["notes"].append(f"{name} undefined: the {' and '.join(constant)} success rates are all equal")
    return out
