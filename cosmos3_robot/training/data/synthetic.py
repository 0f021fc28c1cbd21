"""Synthetic data: random-but-learnable clips and text in the model's shapes, for smoke runs, tests
and throughput measurements. Implements the trainer's `DataSource` protocol (`training/data/batches.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from cosmos3_robot.model import ModelConfig
from cosmos3_robot.processors.data_state import DataState
from cosmos3_robot.tasks import ClipBatch
from cosmos3_robot.training.data.batches import IGNORE, TextBatch

# ------------------------------------------------------------------------------------------------


class SyntheticData:
    """Deterministic given (seed, epoch): clips whose future frames follow from the first frame and
    the actions (so every mode has something to learn), and counting-sequence text."""

    def __init__(
        self,
        model_config: ModelConfig,
        stage: str,
        batch_size: int,
        seed: int = 0,
        batches_per_epoch: int = 8,
        val_batches: int = 2,
        frames: int = 3,
        grid: int = 4,
        actions: int = 8,
        prompt_len: int = 8,
        action_free: bool = False,
    ):
        self.cfg, self.stage, self.b, self.seed = model_config, stage, batch_size, seed
        self.n, self.n_val = batches_per_epoch, val_batches
        self.frames, self.grid, self.actions, self.prompt_len = frames, grid, actions, prompt_len
        self.action_free = action_free
        g = torch.Generator().manual_seed(10_000 + seed)
        c, a = model_config.latent_channels, model_config.action_dim or 1
        self.scenes = torch.randn(4, c, grid, grid, generator=g)
        self.mix = torch.randn(a, c, grid, grid, generator=g) * 0.3  # how actions move the scene

    def _clip(self, g: torch.Generator) -> ClipBatch:
        b, t, na, cfg = self.b, self.frames, self.actions, self.cfg
        a = cfg.action_dim or 1
        scene = self.scenes[torch.randint(0, 4, (b,), generator=g)]  # (B, C, H, W)
        action = torch.randn(b, na, a, generator=g)
        drift = torch.einsum("ba,achw->bchw", action.mean(1), self.mix)
        video = torch.stack([scene + k * drift for k in range(t)], dim=2)  # (B, C, T, H, W)
        video = video + 0.05 * torch.randn(video.shape, generator=g)
        lengths = torch.randint(2, self.prompt_len + 1, (b,), generator=g)
        ids = torch.randint(1, cfg.vocab_size, (b, self.prompt_len), generator=g)
        ids = ids * (torch.arange(self.prompt_len)[None] < lengths[:, None])
        batch = ClipBatch(
            input_ids=ids,
            lengths=lengths,
            video=video,
            video_time=(torch.arange(t).float() * 4 / 24).expand(b, t).clone(),
            video_valid=torch.ones(b, t, dtype=torch.bool),
            obs_frames=1,
        )
        if not self.action_free and cfg.action_dim:
            batch = dataclasses.replace(
                batch,
                action=action,
                action_time=(torch.arange(na).float() / 20).expand(b, na).clone(),
                action_valid=torch.ones(b, na, dtype=torch.bool),
                action_mask=torch.ones(b, a, dtype=torch.bool),
                embodiment=torch.zeros(b, dtype=torch.long),
            )
        return batch

    def _text(self, g: torch.Generator):
        b, L, v = self.b, self.prompt_len * 2, self.cfg.vocab_size
        start = torch.randint(1, v, (b, 1), generator=g)
        stride = torch.randint(1, 4, (b, 1), generator=g)
        seq = (start + stride * torch.arange(L + 1)[None]) % (v - 1) + 1  # counting: learnable
        lengths = torch.randint(L // 2, L + 1, (b,), generator=g)
        valid = torch.arange(L)[None] < lengths[:, None]
        ids = seq[:, :L] * valid
        labels = torch.where(valid, seq[:, 1:], torch.full_like(ids, IGNORE))
        labels[:, :2] = IGNORE  # a "prompt" without loss
        return TextBatch(input_ids=ids, lengths=lengths, labels=labels)

    def _make(self, g: torch.Generator):
        return self._text(g) if self.stage == "reasoner" else self._clip(g)

    def train_batches(self, epoch: int, start: int = 0) -> Iterator[Any]:
        for i in range(start, self.n):
            yield self._make(torch.Generator().manual_seed(self.seed * 7919 + epoch * 1000 + i))

    def val_batches(self) -> list[Any]:
        return [
            self._make(torch.Generator().manual_seed(-1 - self.seed * 7919 - i)) for i in range(self.n_val)
        ]

    def state(self) -> DataState:
        """No tokenizer: synthetic prompts are raw ids, so a model trained on them is not a policy."""
        details = {"source": "synthetic", "seed": self.seed, "batch_size": self.b, "frames": self.frames,
                   "grid": self.grid, "actions": self.actions, "action_free": self.action_free}  # fmt: skip
        return DataState(stage="synthetic", tokenizer={}, details=details)
