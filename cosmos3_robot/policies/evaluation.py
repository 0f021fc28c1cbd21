"""Predicted futures and actions against ground truth, on held-out clips of a LeRobot dataset.

    clips = load_clips(world, root, episodes=None, max_clips=32)      # held-out episodes by default
    report = evaluate_world(world, clips, steps=10, seed=0)

Per horizon (seconds after the last observed frame), for the model's forward dynamics and two
baselines (copy the last observed frame; the VAE's own reconstruction of the truth, the ceiling a
latent model can reach): PSNR, SSIM (scikit-image), PSNR on the moving pixels only (the 20 % of
pixels that change most between the last observed frame and the true frame, so that a static
background cannot hide a frozen arm), and latent MSE per future latent frame.

Action controllability: the same clips with the true actions, the actions of other clips (shuffled),
zero actions and perturbed ones (true + N(0, (0.5 · action std)²)); a model that listens to its
actions scores best with the true ones. Round trip: inverse dynamics on the generated video against
the commanded actions. Labels: inverse dynamics on the true video against the true actions, beside
the mean-action baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.eval.metrics import action_errors, frame_psnr, latent_mse
from cosmos3_robot.policies.runners import SamplingConfig, sample_mode
from cosmos3_robot.policies.world_model import WorldModel

MOVING_SHARE = 0.2


@dataclass
class Clips:
    """Held-out clips in the model's geometry."""

    frames: Tensor  # uint8 (N, T, 3, H, W)
    actions: Tensor  # raw (N, Na, A)
    tasks: list[str]
    episodes: list[int]
    starts: list[int]  # frame index of each clip's first frame in its episode
    states: Tensor | None = None  # raw (N, S) proprioception at each clip's first frame


def load_clips(world: WorldModel, root: str, episodes: list[int] | None = None, max_clips: int = 32,
               repo_id: str | None = None) -> Clips:  # fmt: skip
    """Up to `max_clips` evenly spread clips of `episodes` (default: the model's validation episodes
    when the dataset is the one it trained on, else every episode)."""
    from cosmos3_robot.datasets import ClipDataset, ClipDatasetConfig, ClipSpec
    from cosmos3_robot.processors.frames import to_uint8

    details = world.data_state.details
    spec = ClipSpec(**{**details["clip_spec"], "pad": False})
    if episodes is None:
        episodes = details.get("split", {}).get("val") or None
    image_key = details.get("data_config", {}).get("image_key", "observation.image")
    state_key = world.state.key if world.needs_state else "observation.state"
    ds = ClipDataset(
        ClipDatasetConfig(
            repo_id=repo_id, root=root, spec=spec, episodes=episodes, image_key=image_key, state_key=state_key
        )
    )
    if ds.fps != world.geometry.fps:
        raise ValueError(
            f"dataset {root} is at {ds.fps:g} fps; the model was trained at {world.geometry.fps:g}"
        )
    pick = np.unique(np.linspace(0, len(ds) - 1, min(max_clips, len(ds))).round().astype(int))
    samples = [ds[int(i)] for i in pick]
    frames = torch.stack([to_uint8(s["video"]) for s in samples])
    if frames.shape[-1] != world.geometry.image_size:
        raise ValueError(
            f"dataset {root} has {frames.shape[-1]} px frames; the model was trained on {world.geometry.image_size} px"
        )
    return Clips(
        frames=frames,
        actions=torch.stack([s["action"] for s in samples]).float(),
        tasks=[s["task"] for s in samples],
        episodes=[int(s["episode_index"]) for s in samples],
        starts=[int(s["frame_index"]) for s in samples],
        states=torch.stack([s["state"][0] for s in samples]).float(),
    )


def horizons(world: WorldModel, obs_frames: int) -> tuple[slice, np.ndarray]:
    """The future video frames of a clip and their horizons in seconds after the last observed one."""
    g = world.geometry
    first_future = 1 + 4 * (obs_frames - 1)
    sec = (np.arange(first_future, g.num_frames) - (first_future - 1)) * g.frame_step / g.fps
    return slice(first_future, g.num_frames), sec


def ssim_per_frame(pred: Tensor, truth: Tensor) -> np.ndarray:
    """SSIM (scikit-image, RGB, data range 255) of uint8 (N, K, 3, H, W) frame pairs: (N, K)."""
    from skimage.metrics import structural_similarity

    p, t = pred.permute(0, 1, 3, 4, 2).numpy(), truth.permute(0, 1, 3, 4, 2).numpy()
    win = min(7, p.shape[2] - (1 - p.shape[2] % 2), p.shape[3] - (1 - p.shape[3] % 2))
    out = np.zeros(p.shape[:2])
    for n in range(p.shape[0]):
        for k in range(p.shape[1]):
            out[n, k] = structural_similarity(p[n, k], t[n, k], channel_axis=-1, data_range=255, win_size=win)
    return out


def moving_psnr(pred: Tensor, truth: Tensor, last_obs: Tensor, share: float = MOVING_SHARE) -> np.ndarray:
    """PSNR (N, K) over the `share` of pixels where the truth differs most from the last observed
    frame (per clip and frame); pred/truth uint8 (N, K, 3, H, W), last_obs (N, 3, H, W)."""
    diff = (truth.float() - last_obs[:, None].float()).abs().mean(2)  # (N, K, H, W)
    flat = diff.flatten(2)
    k = max(1, int(round(share * flat.shape[-1])))
    idx = flat.topk(k, dim=-1).indices  # (N, K, k)
    err = ((pred.float() - truth.float()) / 255).square().mean(2).flatten(2)  # (N, K, HW)
    mse = err.gather(-1, idx).mean(-1).clamp(min=1e-10)
    return (10 * torch.log10(1.0 / mse)).numpy()


def image_metrics(pred: Tensor, truth: Tensor, last_obs: Tensor) -> dict[str, np.ndarray]:
    """Per clip and future frame (N, K): psnr, ssim, moving_psnr."""
    return {
        "psnr": frame_psnr(pred.float() / 255, truth.float() / 255).numpy(),
        "ssim": ssim_per_frame(pred, truth),
        "moving_psnr": moving_psnr(pred, truth, last_obs),
    }


def per_horizon(m: dict[str, np.ndarray]) -> dict[str, list[float]]:
    return {k: v.mean(0).tolist() for k, v in m.items()}


def future_latent_mse(pred: Tensor, latents: Tensor, obs_frames: int) -> list[float]:
    """Latent MSE of each future latent frame of pred against the true latents, both (N, C, T, h, w)."""
    return [latent_mse(pred[:, :, k], latents[:, :, k]) for k in range(obs_frames, latents.shape[2])]


def forward(
    world: WorldModel, clips: Clips, actions: Tensor, latents: Tensor, sampling: SamplingConfig
) -> Tensor:
    """Forward dynamics from the clips' observed frames with `actions`: predicted latents."""
    obs = world.geometry.obs_frames
    world.require_state(clips.states, "forward dynamics")  # a model without state ignores them
    batch = world.clip_batch(
        clips.tasks,
        latents[:, :, :obs],
        actions=actions,
        obs_frames=obs,
        state=clips.states,
        frames=clips.frames[:, 0],
    )
    return sample_mode(world, "forward_dynamics", batch, sampling)["video"]


def inverse(world: WorldModel, clips: Clips, latents: Tensor, sampling: SamplingConfig) -> np.ndarray:
    batch = world.clip_batch(clips.tasks, latents, obs_frames=latents.shape[2], frames=clips.frames[:, 0])
    return world.raw_actions(sample_mode(world, "inverse_dynamics", batch, sampling)["action"])


def controllability(world, clips, latents, truth_future, last_obs, fut, sampling, seed) -> dict:
    """The forward-dynamics metrics with true, shuffled, zeroed and perturbed actions."""
    g = torch.Generator().manual_seed(seed)
    a = clips.actions
    n = a.shape[0]
    perm = torch.roll(torch.arange(n), 1) if n > 1 else torch.arange(n)
    std = a.flatten(0, 1).std(0).clamp(min=1e-6)
    variants = {
        "true": a,
        "shuffled": a[perm],
        "zeroed": torch.zeros_like(a),
        "perturbed": a + 0.5 * std * torch.randn(a.shape, generator=g),
    }
    out = {}
    for name, acts in variants.items():
        z = forward(world, clips, acts, latents, sampling)
        pred = world.decode_latents(z)[:, fut]
        out[name] = per_horizon(image_metrics(pred, truth_future, last_obs))
        # In latent space too, so that a VAE that damps motion cannot hide whether actions are heard.
        out[name]["latent_mse"] = future_latent_mse(z, latents, world.geometry.obs_frames)
    out["gap_true_minus"] = {  # per metric and horizon (per future latent frame for latent_mse)
        v: {k: (np.array(out["true"][k]) - np.array(out[v][k])).tolist() for k in out["true"]}
        for v in ("shuffled", "zeroed", "perturbed")
    }
    return out


def evaluate_world(
    world: WorldModel, clips: Clips, sampling: SamplingConfig, seed: int = 0
) -> tuple[dict, Tensor]:
    """Everything in the module docstring, as one JSON-able dict (with the per-clip PSNR, to pick the
    best and worst clips), and the predicted clips as uint8 frames (N, T, 3, H, W)."""
    g = world.geometry
    fut, sec = horizons(world, g.obs_frames)
    latents = world.encode_frames(clips.frames)
    truth_future, last_obs = clips.frames[:, fut], clips.frames[:, fut.start - 1]
    z_pred = forward(world, clips, clips.actions, latents, sampling)
    pred_clips = world.decode_latents(z_pred)
    pred = pred_clips[:, fut]
    recon = world.decode_latents(latents)[:, fut]
    model = image_metrics(pred, truth_future, last_obs)
    result = {
        "clips": len(clips.tasks),
        "horizons_s": sec.tolist(),
        "latent_horizons_s": g.video_time()[g.obs_frames :].sub(g.video_time()[g.obs_frames - 1]).tolist(),
        "forward_dynamics": per_horizon(model),
        "copy_last_frame": per_horizon(
            image_metrics(last_obs[:, None].expand_as(truth_future), truth_future, last_obs)
        ),
        "vae_reconstruction": per_horizon(image_metrics(recon, truth_future, last_obs)),
        "latent_mse": future_latent_mse(z_pred, latents, g.obs_frames),
        # The same in latent space for two forecasts that ignore the actions: copying the last
        # observed latent, and predicting the mean latent (0 after the VAE's normalisation).
        "latent_mse_copy_observed": future_latent_mse(
            latents[:, :, g.obs_frames - 1 : g.obs_frames].expand_as(latents), latents, g.obs_frames
        ),
        "latent_mse_zeros": future_latent_mse(torch.zeros_like(latents), latents, g.obs_frames),
        "clip_psnr": model["psnr"].mean(1).tolist(),
    }
    if world.actions is not None:
        result["controllability"] = controllability(
            world, clips, latents, truth_future, last_obs, fut, sampling, seed
        )
        mean = np.asarray(world.actions.normalizer.stats[world.actions.key].mean, dtype=np.float64)
        true, seen = clips.actions.numpy(), g.visible_actions
        labels, round_trip = inverse(world, clips, latents, sampling), inverse(world, clips, z_pred, sampling)
        # Inverse dynamics is scored on the actions the clip's frames show; the rest are reported apart.
        result["visible_actions"] = seen
        result["inverse_dynamics"] = action_errors(labels[:, :seen], true[:, :seen], mean)
        result["round_trip"] = action_errors(round_trip[:, :seen], true[:, :seen], mean)
        if seen < true.shape[1]:
            result["inverse_dynamics_unseen_actions"] = action_errors(labels[:, seen:], true[:, seen:], mean)
    return result, pred_clips
