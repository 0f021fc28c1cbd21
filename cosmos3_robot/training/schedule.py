"""Learning-rate schedule: linear warm-up, then cosine decay to a floor.

A pure function of the step (no scheduler object with its own state), so a resumed run only needs
the step number to continue the same curve.
"""

from __future__ import annotations

import math

import torch


def lr_at(step: int, base_lr: float, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1) -> float:
    """LR for optimiser step `step` (0-based): ramps linearly over `warmup_steps` to `base_lr`
    (first step at base_lr / warmup_steps), then follows a half cosine down to base_lr·min_lr_ratio
    at the last step `total_steps - 1`."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(1, total_steps - 1 - warmup_steps)
    progress = min(1.0, max(0.0, (step - warmup_steps) / span))
    floor = base_lr * min_lr_ratio
    return floor + (base_lr - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
