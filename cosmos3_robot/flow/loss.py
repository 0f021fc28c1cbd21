"""Flow-matching loss: MSE between predicted and target velocity on noised tokens only."""

from __future__ import annotations

from torch import Tensor


def flow_loss(
    pred: dict[str, Tensor],
    target: dict[str, Tensor],
    noisy: dict[str, Tensor],
    valid: dict[str, Tensor | None] | None = None,
    weights: dict[str, float] | None = None,
    channel_mask: dict[str, Tensor | None] | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Weighted sum over modalities of the mean squared error on noisy, valid tokens.

    pred/target {name: (B, N, C)}; noisy/valid {name: (B, N) bool}; channel_mask {name: (B, C) bool}
    (padded action dimensions carry no loss). A modality with no noisy token contributes 0.
    Returns (total, {name: per-modality loss (detached)}).
    """
    weights = weights or {}
    total = None
    parts: dict[str, Tensor] = {}
    for name, p in pred.items():
        keep = noisy[name]
        if valid is not None and valid.get(name) is not None:
            keep = keep & valid[name]
        err = (p.float() - target[name].float()).pow(2)  # (B, N, C)
        cm = None if channel_mask is None else channel_mask.get(name)
        if cm is not None:
            mask = keep[..., None] & cm[:, None, :]
        else:
            mask = keep[..., None].expand_as(err)
        count = mask.sum()
        loss = (err * mask).sum() / count.clamp(min=1)
        parts[name] = loss.detach()
        term = weights.get(name, 1.0) * loss
        total = term if total is None else total + term
    if total is None:
        raise ValueError("flow_loss got no predictions")
    return total, parts
