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


class Policy(TaskHead):
    """Observed frames (+ the instruction in the Reasoner) → actions and future frames, each with its own σ."""

    name = "policy"
    needs = ("video", "action")
    generates = ("video", "action", "audio")

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return {**self._future(batch), "action": torch.ones_like(batch.action_time, dtype=torch.bool)}


class VideoPrediction(TaskHead):
    """Action-free clips: observed frames → future frames; actions are left out of the sequence."""

    name = "video"
    needs = ("video",)
    drops = ("action", "state")
    generates = ("video", "audio")

    def noisy_masks(self, batch: ClipBatch) -> dict[str, Tensor]:
        return self._future(batch)
