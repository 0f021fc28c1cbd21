"""The action modes as task heads. Each is a few lines: which tokens it noises."""

from __future__ import annotations

import torch
from torch import Tensor

from cosmos3_robot.tasks.base import ClipBatch, TaskHead


class ForwardDynamics(TaskHead):
    """Observed frames + all actions → future frames (a learned simulator)."""

    name = "forward_dynamics"
    needs = ("video", "action")
    generates = ("video", "audio")

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return self._future(batch)


class InverseDynamics(TaskHead):
    """All frames of a transition → the actions that caused it (labels action-free video)."""

    name = "inverse_dynamics"
    needs = ("video", "action")
    drops = ("state",)  # it labels video that has no state
    generates = ("action",)

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return {"action": torch.ones_like(batch.action_time, dtype=torch.bool)}

    def loss_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        """Only actions a valid frame shows carry loss: one taken at time t shows in the frames after
        t, so in a latent frame stamped later than t (a latent's time is its last frame's). The others
        are still generated (as labelling generates them) but not learned: the clip cannot tell them."""
        times = batch.video_time
        if batch.video_valid is not None:
            times = times.masked_fill(~batch.video_valid, float("-inf"))
        last = times.amax(dim=1, keepdim=True)  # (B, 1): the last valid latent frame's time
        return {"action": batch.action_time < last - 1e-6}


class Policy(TaskHead):
    """Observed frames (+ the instruction in the Reasoner) → actions and future frames, each with its own σ."""

    name = "policy"
    needs = ("video", "action")
    generates = ("video", "action", "audio")

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return {**self._future(batch), "action": torch.ones_like(batch.action_time, dtype=torch.bool)}


class ActionPolicy(TaskHead):
    """Observed frames (+ the instruction in the Reasoner) → actions alone. The future frames are left
    out of the sequence, so each denoising step runs on the observed tokens and the chunk: the fast
    policy, at the price of no imagined frames (and no video loss to learn from)."""

    name = "action_policy"
    needs = ("video", "action")
    generates = ("action",)
    future_frames = False

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return {"action": torch.ones_like(batch.action_time, dtype=torch.bool)}


class VideoPrediction(TaskHead):
    """Action-free clips: observed frames → future frames; actions are left out of the sequence."""

    name = "video"
    needs = ("video",)
    drops = ("action", "state")
    generates = ("video", "audio")

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return self._future(batch)
