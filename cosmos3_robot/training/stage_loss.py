"""The loss of one micro-batch for either training stage: the module that DDP / FSDP wrap.

reasoner stage:   text batch ─► [ViT] ─► Reasoner ─► summed cross-entropy / label tokens
generator stage:  ClipBatch ─► [ViT] ─► Reasoner (frozen, no_grad) ─► cache ─► one task head per mode
                  (fd / id / policy / video) ─► flow loss, weighted by the mode's share
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cosmos3_robot.encoders.vit import ViT
from cosmos3_robot.flow import SigmaSampler
from cosmos3_robot.model import MoT
from cosmos3_robot.tasks import ClipBatch, make_task
from cosmos3_robot.training.config import TrainConfig
from cosmos3_robot.training.data.batches import IGNORE


class StageLoss(nn.Module):
    """forward(chunk, plan) -> (objective, stats). stats {mode: (Σ n·loss, n)} are detached sums,
    so per-mode means can be all-reduced across chunks and ranks."""

    def __init__(self, model: MoT, vit: ViT | None, cfg: TrainConfig):
        super().__init__()
        self.model, self.vit, self.stage = model, vit, cfg.stage
        g = cfg.generator
        self.sigma = SigmaSampler(g.sigma.kind, g.sigma.mean, g.sigma.std, g.sigma.shift)
        self.heads = {m: make_task(m, per_frame_sigma=g.per_frame_sigma) for m in g.modes}
        self.heads.setdefault("video", make_task("video", per_frame_sigma=g.per_frame_sigma))
        self.weights = dict(g.loss_weights) or None
        self.state_noise = g.state_noise

    def forward(self, batch: Any, plan: dict[str, Any]) -> tuple[Tensor, dict[str, tuple[Tensor, Tensor]]]:
        if self.stage == "reasoner":
            return self._text(batch, plan)
        return self._clips(batch, plan)

    def _text(self, batch: Any, plan: dict[str, Any]):
        kwargs = batch.reasoner_inputs(self.model, self.vit)  # runs the ViT on the images, if any
        logits = self.model.reason(**kwargs, logits=True).logits  # (B, L, V)
        labels = batch.labels
        ce = F.cross_entropy(
            logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE, reduction="sum"
        )
        n = (labels != IGNORE).sum()
        return ce / plan["norm"], {"text": (ce.detach(), n.to(ce.dtype))}

    def _clips(self, batch: ClipBatch, plan: dict[str, Any]):
        model = self.model
        with torch.no_grad():  # the Reasoner is frozen in this stage: never back-propagated through
            cache = model.reason(**batch.reasoner_inputs(model, self.vit), logits=False).cache
        modes: list[str] = plan["modes"]
        gen = torch.Generator(device=batch.input_ids.device).manual_seed(plan["noise_seed"])
        if self.training and self.state_noise > 0 and batch.state is not None:
            batch = noisy_state(batch, self.state_noise, plan["noise_seed"])
        objective, stats = None, {}
        # FSDP needs the same sequence of forward calls on every rank: there the plan lists every
        # mode of the global batch ("run_modes"); a mode without samples here runs on one sample, weight 0.
        for mode in plan.get("run_modes") or sorted(set(modes)):
            rows = [i for i, m in enumerate(modes) if m == mode]
            idx = torch.tensor(rows or [0], device=batch.input_ids.device)
            sub = batch if len(idx) == batch.batch else batch.select(idx)
            sub_cache = cache if len(idx) == batch.batch else cache.select(idx)
            g = gen if rows else torch.Generator(device=gen.device).manual_seed(0)  # keep `gen`'s draws
            loss, _ = self.heads[mode].loss(model, sub, sub_cache, self.sigma, g, self.weights)
            term = loss * (len(rows) / plan["norm"])
            objective = term if objective is None else objective + term
            if rows:
                n = torch.tensor(float(len(rows)))
                stats[mode] = (loss.detach().float() * n, n)
        return objective, stats


def noisy_state(batch: ClipBatch, std: float, seed: int) -> ClipBatch:
    """The batch with N(0, std²) added to its conditioning state's real dimensions (padding stays 0).
    Its own generator, so the modes' σ and noise draws are the same with and without it."""
    if batch.state_mask is None:
        raise ValueError("generator.state_noise needs the batch's state_mask (which dimensions are real)")
    gen = torch.Generator(device=batch.state.device).manual_seed(seed ^ 0x5EED)
    noise = torch.randn(batch.state.shape, generator=gen, device=batch.state.device, dtype=batch.state.dtype)
    return replace(batch, state=batch.state + std * noise * batch.state_mask[:, None, :])
