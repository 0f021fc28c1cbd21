"""A trained world model with everything it needs at the env boundary.

The MoT works on VAE latents, normalised actions and token ids; an env gives pixels and wants raw
actions. `WorldModel` holds the frozen VAE, the tokenizer and the action transform that travelled
with the checkpoint, and the clip geometry it was trained on, and turns one into the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from cosmos3_robot.encoders.vae import VideoVAE, latent_frame_times, num_latent_frames
from cosmos3_robot.infra.cpu_pack import pack_for_cpu
from cosmos3_robot.model import MoT
from cosmos3_robot.processors.actions import ActionTransform, pad_actions
from cosmos3_robot.processors.tokenizers import load_tokenizer
from cosmos3_robot.tasks import ClipBatch
from cosmos3_robot.training.data.latent_cache import resize_frames, to_uint8


@dataclass
class ClipGeometry:
    """What one training clip looked like, in dataset frames and seconds."""

    fps: float  # dataset frame rate (= control rate of the recorded env)
    num_frames: int  # video frames per clip (1 + 4k)
    frame_step: int  # dataset frames between clip frames
    num_actions: int
    action_step: int  # dataset frames between actions
    obs_frames: int  # observed latent frames
    image_size: int

    @property
    def latent_frames(self) -> int:
        return num_latent_frames(self.num_frames)

    def video_time(self) -> Tensor:
        """(T_lat,) seconds of each latent frame from the clip start."""
        frame_t = torch.arange(self.num_frames, dtype=torch.float64) * self.frame_step / self.fps
        return latent_frame_times(frame_t).float()

    def action_time(self) -> Tensor:
        return (torch.arange(self.num_actions, dtype=torch.float64) * self.action_step / self.fps).float()

    @classmethod
    def from_data_state(cls, state: dict[str, Any]) -> ClipGeometry:
        dc = state["data_config"]
        return cls(
            fps=float(state["dataset"]["fps"]),
            num_frames=int(dc["num_frames"]),
            frame_step=int(state["frame_step"]),
            num_actions=int(dc["num_actions"]),
            action_step=int(state["action_step"]),
            obs_frames=int(dc["obs_frames"]),
            image_size=int(state["dataset"]["image_size"]),
        )


class WorldModel:
    def __init__(
        self,
        model: MoT,
        vae: VideoVAE,
        data_state: dict[str, Any],
    ):
        # Inference only: Linear weights packed once for the CPU kernels (a no-op on other devices).
        self.model = pack_for_cpu(model.eval())
        self.vae = vae.eval()
        self.state = data_state
        self.geometry = ClipGeometry.from_data_state(data_state)
        self.tokenizer = load_tokenizer(data_state["tokenizer"])
        at = data_state.get("action_transform")
        self.actions = ActionTransform.from_state_dict(at) if at else None

    @classmethod
    def from_folder(cls, folder, vae: VideoVAE | None = None) -> WorldModel:
        """A trained model folder (`Trainer.export`: weights, config, data_state.json)."""
        import json
        from pathlib import Path

        from cosmos3_robot.interop.checkpoint import load_model

        folder = Path(folder)
        state_path = folder / "data_state.json"
        if not state_path.exists():
            raise FileNotFoundError(
                f"{state_path} is missing: a world model needs the data state its trainer exported "
                "(normalisation stats, tokenizer, clip geometry, VAE)"
            )
        state = json.loads(state_path.read_text())
        model, _, _ = load_model(folder)
        if vae is None:  # the VAE the data pipeline used: its folder, or its seeded random one
            from cosmos3_robot.training.data.config import DataConfig
            from cosmos3_robot.training.data.generator import load_vae

            vae = load_vae(DataConfig(**state["data_config"]), model.config)
        return cls(model, vae, state)

    @property
    def embodiment(self) -> int:
        if self.actions is None:
            raise ValueError("this world model was trained without actions")
        return self.actions.embodiment_id

    @torch.no_grad()
    def encode_frames(self, frames: Tensor) -> Tensor:
        """uint8 (B, T, H, W, 3) or (B, T, 3, H, W) -> latents (B, C, T_lat, h, w)."""
        if frames.dtype != torch.uint8:
            raise ValueError(f"frames must be uint8 images, got {frames.dtype}")
        if frames.shape[-1] == 3:
            frames = frames.permute(0, 1, 4, 2, 3)
        frames = torch.stack([resize_frames(f, self.geometry.image_size) for f in frames])
        return self.vae.encode(frames.float() / 255.0)

    @torch.no_grad()
    def decode_latents(self, latents: Tensor) -> Tensor:
        """latents (B, C, T_lat, h, w) -> uint8 frames (B, T, 3, H, W)."""
        return to_uint8(self.vae.decode(latents))

    def prompt(self, texts: list[str]) -> tuple[Tensor, Tensor]:
        return self.tokenizer.batch_encode(texts)

    def clip_batch(
        self,
        tasks: list[str],
        latents: Tensor,
        actions: Tensor | None = None,
        obs_frames: int | None = None,
    ) -> ClipBatch:
        """A full-length clip batch. `latents` (B, C, T, h, w) may hold fewer than T_lat frames: the rest
        are zero placeholders (they are generated). `actions` raw (B, Na, A) or None = placeholders."""
        g = self.geometry
        b, c, t, h, w = latents.shape
        if t < g.latent_frames:
            latents = torch.cat([latents, latents.new_zeros(b, c, g.latent_frames - t, h, w)], dim=2)
        ids, lengths = self.prompt(tasks)
        batch = ClipBatch(
            input_ids=ids,
            lengths=lengths,
            video=latents,
            video_time=g.video_time().expand(b, -1).clone(),
            video_valid=torch.ones(b, g.latent_frames, dtype=torch.bool),
            obs_frames=g.obs_frames if obs_frames is None else obs_frames,
        )
        if self.actions is not None:
            if actions is None:  # placeholders (the actions are generated): zeros, with the real mask
                norm, mask = pad_actions(torch.zeros(b, g.num_actions, self.actions.dim), self.actions.width)
            else:
                norm, mask = self.actions.encode(torch.as_tensor(actions, dtype=torch.float32))
            batch.action = norm
            batch.action_time = g.action_time().expand(b, -1).clone()
            batch.action_valid = torch.ones(b, g.num_actions, dtype=torch.bool)
            batch.action_mask = mask.reshape(1, -1).expand(b, -1).clone()
            batch.embodiment = torch.full((b,), self.embodiment, dtype=torch.long)
        return batch

    def raw_actions(self, normalised: Tensor) -> np.ndarray:
        """(B, Na, W) model actions -> (B, Na, A) in the env's units."""
        return self.actions.decode(normalised).cpu().numpy()
