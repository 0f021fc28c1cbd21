"""Generator positions exactly as the Diffusers Cosmos 3 pipeline (0.42) forms them, and Generator
inputs that carry them.

Axis glossary:  B batch · T latent frames · H, W latent rows/cols · N tokens of one modality

The pipeline lays out one joint sequence [text | vision | sound | action] and gives it mRoPE ids:

    text        (i, i, i)                       i = 0 .. L-1
    O           = L + unified_3d_mrope_temporal_modality_margin   — shared by every modality
    vision f    (O + f · base_fps / fps, row, col)     row/col restart at 0 for every item
    sound k     (O + k · base_fps / sound_fps, 0, 0)   sound_fps = 25   ← quirk, see below
    action i    (O + (i+1) · (base_fps/4) / fps, 0, 0) action i sits at pixel frame i+1

In real time, vision and actions land on our physical axis of base_fps/4 = 6 units per second
(`ModelConfig.time_units_per_second`): latent frame f is at f·4/fps seconds, action i at (i+1)/fps.

Quirks of the Diffusers pipeline, reproduced here where they change outputs:
  * Sound placement: sound uses temporal compression 1 for both its rate and the base rate, so
    25 Hz sound advances base_fps = 24 units per second — 4x faster than video and actions. Our
    default puts sound on the physical axis (6 units/s); `diffusers_sound_quirk=True` reproduces
    the Diffusers placement, which is what Cosmos 3 checkpoints were run with there.
  * Integer fallback: a modality with a single token (one latent frame, one action, one sound
    token), or `enable_fps_modulation=False`, gets integer ids f + start + O instead. For vision and
    sound that equals the formula above; a single action lands at O + 1 (one unit = 1/6 s) rather
    than O + 6/fps.
  * `unified_3d_mrope_reset_spatial_ids=False` adds int(O) to the h and w ids of every
    Generator token (audio and actions too).
  * Timesteps: UniPC casts σ·1000 to int64 before the transformer sees it, so the pipeline
    conditions on floor(σ·1000)/1000 while stepping with σ (`pipeline_sigma`).

Positions are computed with the same float32 operations in the same order as the pipeline, and
handed to the model through `Stream.positions`, so the rotations agree bit for bit (recomputing them
from timestamps in float64 would differ by an ulp at 15000 ≈ 1e-3 — visible at 1e-4 tolerance).
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from cosmos3_robot.interop.diffusers_config import DiffusersCompat
from cosmos3_robot.model.sequence import GenInput, Stream, series_stream, video_stream


def modality_offset(compat: DiffusersCompat, text_len: int) -> int:
    """O: the first Generator time id, shared by vision, sound and actions."""
    return text_len + compat.modality_margin


def _time_ids(
    compat: DiffusersCompat, n: int, offset: int, rate: float, rate_tcf: int, base_tcf: int, start: int = 0
) -> Tensor:
    """Time ids of n consecutive tokens sampled at `rate` per second (before compression rate_tcf)."""
    if compat.enable_fps_modulation and n > 1:
        tokens_per_s = rate / rate_tcf
        base_tokens_per_s = compat.base_fps / base_tcf
        idx = torch.arange(n, dtype=torch.float32)
        return (idx + start) / tokens_per_s * base_tokens_per_s + offset  # float32, pipeline order
    return (torch.arange(n, dtype=torch.long) + int(offset) + start).float()  # integer fallback (quirk)


def _spatial(compat: DiffusersCompat, ids: Tensor, offset: int) -> Tensor:
    return ids if compat.reset_spatial_ids else ids + int(offset)


def vision_positions(
    compat: DiffusersCompat, text_len: int, frames: int, grid: tuple[int, int], fps: float
) -> Tensor:
    """(3, frames·rows·cols) ids of one video item; grid = merged (rows, cols) = ceil(latent H, W / p)."""
    rows, cols = grid
    o = modality_offset(compat, text_len)
    tc = compat.temporal_compression
    t = _time_ids(compat, frames, o, fps, tc, tc)
    t = t[:, None].expand(frames, rows * cols).reshape(-1)
    r = torch.arange(rows, dtype=torch.float32)[:, None].expand(rows, cols).reshape(-1).repeat(frames)
    c = torch.arange(cols, dtype=torch.float32)[None, :].expand(rows, cols).reshape(-1).repeat(frames)
    return torch.stack([t, _spatial(compat, r, o), _spatial(compat, c, o)])


def action_positions(compat: DiffusersCompat, text_len: int, count: int, fps: float) -> Tensor:
    """(3, count): action i at pixel frame i+1 of video at `fps` (an action is a transition)."""
    o = modality_offset(compat, text_len)
    t = _time_ids(compat, count, o, fps, 1, compat.temporal_compression, start=1)
    z = _spatial(compat, torch.zeros(count), o)
    return torch.stack([t, z, z.clone()])


def sound_positions(
    compat: DiffusersCompat, text_len: int, count: int, diffusers_sound_quirk: bool = False
) -> Tensor:
    """(3, count) ids of sound latents at `compat.sound_latent_fps`.

    Physical (default): base_fps/4 units per second like video and actions. With
    `diffusers_sound_quirk=True`: base_fps units per second, as the Diffusers pipeline places them.
    """
    o = modality_offset(compat, text_len)
    base_tcf = 1 if diffusers_sound_quirk else compat.temporal_compression
    t = _time_ids(compat, count, o, compat.sound_latent_fps, 1, base_tcf)
    z = _spatial(compat, torch.zeros(count), o)
    return torch.stack([t, z, z.clone()])


def _per_sample(text_len: int | list[int], b: int) -> list[int]:
    lens = [text_len] * b if isinstance(text_len, int) else list(text_len)
    if len(lens) != b:
        raise ValueError(f"text_len has {len(lens)} entries for a batch of {b}")
    return lens


def cosmos3_gen_input(
    compat: DiffusersCompat,
    text_len: int | list[int],
    video: Tensor,
    video_noisy: Tensor,
    sigma: Tensor | float,
    fps: float,
    patch_size: int = 2,
    action: Tensor | None = None,
    action_noisy: Tensor | None = None,
    embodiment: Tensor | None = None,
    sound: Tensor | None = None,
    sound_noisy: Tensor | None = None,
    diffusers_sound_quirk: bool = False,
) -> GenInput:
    """A Cosmos 3 request as our GenInput, with the Diffusers pipeline's exact positions.

    text_len: Reasoner length per sample (int or list of B); video (B, C, T, H, W) latents at pixel
    `fps`; video_noisy (T,) or (B, T) bool; sigma scalar or (B,) noise level of the noisy tokens;
    action (B, Na, D) with action_noisy (Na,) or (B, Na), embodiment (B,); sound (B, Ns, C) with
    sound_noisy (default: all noisy, as the pipeline does). H and W must be multiples of patch_size.
    Timestamps (`time_s`) are the physical ones; `positions` carries the exact ids.
    """
    b, _, t, h, w = video.shape
    lens = _per_sample(text_len, b)
    sig = torch.as_tensor(sigma, dtype=torch.float32).expand(b).clone()

    def rows(mask: Tensor, n: int) -> Tensor:
        return mask.to(torch.bool).expand(b, n) if mask.ndim == 1 else mask.to(torch.bool)

    frame_t = (torch.arange(t, dtype=torch.float64) * compat.temporal_compression / fps).float().expand(b, t)
    vs = video_stream(video, frame_t, rows(video_noisy, t), sig, p=patch_size)
    grid = (h // patch_size, w // patch_size)
    streams: dict[str, Stream] = {
        "video": replace(vs, positions=torch.stack([vision_positions(compat, n, t, grid, fps) for n in lens]))
    }
    if sound is not None:
        ns = sound.shape[1]
        noisy = rows(sound_noisy if sound_noisy is not None else torch.ones(ns, dtype=torch.bool), ns)
        times = (torch.arange(ns, dtype=torch.float64) / compat.sound_latent_fps).float().expand(b, ns)
        s = series_stream(sound, times, noisy, sig)
        pos = torch.stack([sound_positions(compat, n, ns, diffusers_sound_quirk) for n in lens])
        streams["audio"] = replace(s, positions=pos)
    if action is not None:
        na = action.shape[1]
        if action_noisy is None or embodiment is None:
            raise ValueError("actions need action_noisy and embodiment")
        times = (torch.arange(1, na + 1, dtype=torch.float64) / fps).float().expand(b, na)
        s = series_stream(action, times, rows(action_noisy, na), sig, embodiment=embodiment)
        streams["action"] = replace(
            s, positions=torch.stack([action_positions(compat, n, na, fps) for n in lens])
        )
    return GenInput.from_dict(streams)


def pipeline_sigma(sigma: float, num_train_timesteps: int = 1000) -> float:
    """The noise level the Diffusers pipeline actually conditions on: UniPC stores timesteps as
    int64, so the transformer sees floor(σ·1000)/1000 (quirk) while the update uses σ."""
    return math.floor(sigma * num_train_timesteps) / num_train_timesteps


# ----------------------------------------------------------------------------------------------
# The Diffusers side of the same request, built with the pipeline's own segment builders.
# Used by tests and benchmarks/vs_diffusers.py as the reference; needs diffusers installed.
# ----------------------------------------------------------------------------------------------


def diffusers_request(
    transformer: Any,
    input_ids: list[int],
    video_shape: tuple[int, ...],
    vision_cond_frames: list[int],
    fps: float,
    sound_len: int | None = None,
    action_len: int | None = None,
    action_cond: list[int] | None = None,
    domain_id: int = 0,
    device: str | torch.device = "cpu",
) -> dict[str, Any]:
    """The static (step-invariant) Diffusers transformer kwargs of one request, from the pipeline's
    `_prepare_{text,vision,sound,action}_segment`. video_shape = (1, C, T, H, W)."""
    from diffusers.pipelines.cosmos.pipeline_cosmos3_omni import Cosmos3OmniPipeline as P

    fake = SimpleNamespace(transformer=transformer, vae_scale_factor_temporal=4)
    text = P._prepare_text_segment(fake, input_ids, device=device)
    o, und = text["vision_start_temporal_offset"], text["und_len"]
    vision = P._prepare_vision_segment(
        fake, torch.empty(video_shape, device="meta"), bool(vision_cond_frames), o, fps, und, device,
        condition_frame_indexes=list(vision_cond_frames),
    )  # fmt: skip
    curr = und + vision["num_vision_tokens"]
    segs, mrope = {**text, **vision}, [text["text_mrope_ids"], vision["vision_mrope_ids"]]
    if sound_len is not None:
        sound = P._prepare_sound_segment(
            fake,
            torch.empty(1, sound_len, device="meta"),
            o,
            transformer.config.sound_latent_fps,
            curr,
            device,
        )
        segs.update(sound)
        mrope.append(sound["sound_mrope_ids"])
        curr += sound_len
    if action_len is not None:
        act = P._prepare_action_segment(
            fake, torch.empty(action_len, 1, device="meta"), action_cond or [], o, fps, curr, device
        )
        segs.update(act)
        mrope.append(act["action_mrope_ids"])
        segs["action_domain_ids"] = [torch.tensor([domain_id], dtype=torch.long, device=device)]
        curr += action_len
    segs["position_ids"] = torch.cat(mrope, dim=1)
    segs["sequence_length"] = curr
    return segs


_FORWARD_KEYS = (
    "input_ids", "text_indexes", "position_ids", "und_len", "sequence_length", "vision_token_shapes",
    "vision_sequence_indexes", "vision_mse_loss_indexes", "vision_noisy_frame_indexes", "sound_token_shapes",
    "sound_sequence_indexes", "sound_mse_loss_indexes", "sound_noisy_frame_indexes", "action_token_shapes",
    "action_sequence_indexes", "action_mse_loss_indexes", "action_noisy_frame_indexes", "action_domain_ids",
)  # fmt: skip


def diffusers_step(
    static: dict[str, Any],
    timestep: float,
    video: Tensor,
    sound: Tensor | None = None,
    action: Tensor | None = None,
) -> dict[str, Any]:
    """Per-step Diffusers kwargs, as the pipeline's denoising loop splices them: video (1, C, T, H, W),
    sound (C, Ns), action (Na, D); `timestep` = σ·num_train_timesteps for every noisy token."""
    kw = {k: static[k] for k in _FORWARD_KEYS if k in static}
    kw["vision_tokens"] = [video]
    kw["vision_timesteps"] = torch.full((static["num_noisy_vision_tokens"],), float(timestep))
    if sound is not None:
        kw["sound_tokens"] = [sound]
        kw["sound_timesteps"] = torch.full((static["sound_len"],), float(timestep))
    if action is not None:
        kw["action_tokens"] = [action]
        kw["action_timesteps"] = torch.full((static["num_noisy_action_tokens"],), float(timestep))
    kw["return_dict"] = False
    return kw
