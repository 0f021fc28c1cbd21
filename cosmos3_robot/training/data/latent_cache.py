"""Encode a dataset's clips with the frozen VAE once, store the latents, reuse them every epoch.

Layout of a cache folder:

    root/meta.json                     what was encoded and with which VAE (fingerprint)
    root/episode_000012.safetensors    latents (N, C, T_lat, h, w) float32, starts (N,) int64,
                                       latent_times (N, T_lat) float64 — one row per clip

A clip is keyed by (episode_index, start_frame); clips have `clip_frames` = 1 + 4k frames and start
every `stride` frames. Every clip is encoded on its own (batch of one), exactly as
`CachedEncoder.encode` does on a cache miss, so a latent read from the cache is bit-identical to
encoding the clip directly (batched convolutions may pick other kernels and differ in the last
bit). The VAE fingerprint (config + a hash of the weights) is checked when the cache is opened: a
cache written by another VAE is refused rather than silently used.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor

from cosmos3_robot.datasets.episodes import iter_lerobot_episodes
from cosmos3_robot.datasets.sources import open_lerobot_dataset
from cosmos3_robot.encoders.vae import VideoVAE
from cosmos3_robot.processors.geometry import latent_frame_times, num_latent_frames

CACHE_VERSION = 1


def clip_starts(num_frames: int, clip_frames: int, stride: int) -> list[int]:
    """Start frames of every whole clip of `clip_frames` frames, `stride` apart."""
    num_latent_frames(clip_frames)
    if stride <= 0:
        raise ValueError(f"stride must be >= 1, got {stride}")
    return list(range(0, num_frames - clip_frames + 1, stride))


# ---------------------------------------------------------------------------------------------
# The cache


def vae_fingerprint(vae: VideoVAE) -> str:
    """sha256 over the VAE config and every weight, so a retrained VAE never reuses old latents."""
    h = hashlib.sha256(json.dumps(vae.autoencoder.config, sort_keys=True, default=str).encode())
    h.update(json.dumps([vae.config.latents_mean, vae.config.latents_std]).encode())
    for name, tensor in sorted(vae.autoencoder.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def _encode_clip(vae: VideoVAE, frames_u8: Tensor) -> Tensor:
    """uint8 (T, 3, H, W) -> latents (C, T_lat, h, w); batch of one, the single encoding path."""
    with torch.no_grad():
        return vae.encode(frames_u8[None].float() / 255)[0]


class LatentCache:
    """Read side of a cache folder; build one with `LatentCache.build` / `build_from_lerobot`."""

    def __init__(self, root: str | os.PathLike, vae: VideoVAE | None = None) -> None:
        self.root = Path(root)
        meta_path = self.root / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} missing: build the cache first (LatentCache.build)")
        self.meta = json.loads(meta_path.read_text())
        if vae is not None and self.meta["vae_fingerprint"] != vae_fingerprint(vae):
            raise ValueError(
                f"latent cache {self.root} was written by a different VAE (fingerprint mismatch); delete "
                f"the folder and rebuild it with the current VAE"
            )
        self._episodes: dict[int, dict[str, Tensor]] = {}

    @property
    def clip_frames(self) -> int:
        return int(self.meta["clip_frames"])

    @property
    def episodes(self) -> list[int]:
        return [int(e) for e in self.meta["episodes"]]

    def episode(self, episode: int) -> dict[str, Tensor]:
        """{latents (N, C, T_lat, h, w), starts (N,), latent_times (N, T_lat)} of one episode."""
        if episode not in self._episodes:
            path = self.root / f"episode_{episode:06d}.safetensors"
            if not path.is_file():
                raise KeyError(f"episode {episode} is not in the latent cache {self.root}")
            self._episodes[episode] = load_file(path)
        return self._episodes[episode]

    def get(self, episode: int, start: int) -> Tensor | None:
        """Latents (C, T_lat, h, w) of the clip starting at `start`, or None if it was not cached."""
        try:
            data = self.episode(episode)
        except KeyError:
            return None
        hit = (data["starts"] == start).nonzero()
        return data["latents"][int(hit[0, 0])] if len(hit) else None

    @classmethod
    def build(
        cls,
        root: str | os.PathLike,
        vae: VideoVAE,
        episodes: Iterable[tuple[int, Tensor, Tensor]],
        clip_frames: int = 5,
        stride: int = 4,
        info: dict[str, Any] | None = None,
        progress: bool = False,
    ) -> LatentCache:
        """Encode every clip of every (episode_index, frames uint8 (T,3,H,W), times (T,)) and store it."""
        from tqdm import tqdm

        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        done = []
        for ep, frames, times in tqdm(episodes, desc="latent cache", unit="episode", disable=not progress):
            starts = clip_starts(frames.shape[0], clip_frames, stride)
            if not starts:
                continue
            latents = torch.stack([_encode_clip(vae, frames[s : s + clip_frames]) for s in starts])
            ltimes = torch.stack([latent_frame_times(times[s : s + clip_frames].double()) for s in starts])
            path = root / f"episode_{ep:06d}.safetensors"
            tmp = path.with_suffix(".tmp")
            tensors = {
                "latents": latents.contiguous(),
                "starts": torch.tensor(starts),
                "latent_times": ltimes,
            }
            save_file(tensors, str(tmp))
            os.replace(tmp, path)
            done.append(int(ep))
        meta = {
            "version": CACHE_VERSION,
            "vae_fingerprint": vae_fingerprint(vae),
            "latent_channels": vae.latent_channels,
            "clip_frames": clip_frames,
            "stride": stride,
            "episodes": done,
            **(info or {}),
        }
        tmp = root / "meta.json.tmp"
        tmp.write_text(json.dumps(meta, indent=2))
        os.replace(tmp, root / "meta.json")
        return cls(root)

    @classmethod
    def build_from_lerobot(
        cls,
        root: str | os.PathLike,
        vae: VideoVAE,
        repo_id: str,
        dataset_root: str | os.PathLike | None = None,
        video_key: str = "observation.image",
        clip_frames: int = 5,
        stride: int = 4,
        size: int | None = None,
        episodes: Iterable[int] | None = None,
        progress: bool = True,
    ) -> LatentCache:
        dataset = open_lerobot_dataset(repo_id, dataset_root)
        info = {"repo_id": repo_id, "video_key": video_key, "size": size, "fps": dataset.fps}
        source = iter_lerobot_episodes(dataset, video_key, episodes, size)
        return cls.build(root, vae, source, clip_frames, stride, info=info, progress=progress)


class CachedEncoder:
    """`encode(frames, keys)`: latents from the cache where present, else from the VAE (same path).

    frames (B, T, 3, H, W) float in [0, 1] (or uint8), or a list of B clips of which any may be None
    (not decoded: `load(i)` gives clip i's frames on a cache miss); keys: one (episode_index,
    start_frame) per sample. Returns (B, C, T_lat, h, w), bit-identical whether or not the cache held
    the clip.
    """

    def __init__(self, vae: VideoVAE, cache: LatentCache | None = None) -> None:
        self.vae, self.cache = vae, cache
        self.hits = self.misses = 0

    def encode(
        self,
        frames: Tensor | list[Tensor | None],
        keys: list[tuple[int, int]] | None = None,
        load: Callable[[int], Tensor] | None = None,
    ) -> Tensor:
        out = []
        for i in range(len(frames)):
            clip = frames[i]
            cached = None
            if self.cache is not None and keys is not None:
                if clip is None or clip.shape[0] == self.cache.clip_frames:
                    cached = self.cache.get(*keys[i])
            if cached is not None:
                self.hits += 1
                out.append(cached)
                continue
            self.misses += 1
            if clip is None:
                if load is None:
                    where = f" (key {keys[i]})" if keys is not None else ""
                    raise ValueError(f"clip {i} was not decoded and the latent cache does not hold it{where}")
                clip = load(i)
            out.append(
                _encode_clip(self.vae, clip) if clip.dtype == torch.uint8 else self._encode_float(clip)
            )
        return torch.stack(out)

    def _encode_float(self, clip: Tensor) -> Tensor:
        with torch.no_grad():
            return self.vae.encode(clip[None])[0]
