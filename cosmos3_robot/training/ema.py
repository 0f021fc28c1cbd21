"""Exponential moving average of a set of named parameters (the Generator's, in stage 2).

The EMA copy is what validation runs and what the final model folder holds: flow-matching models
sample noticeably better from averaged weights (as in EDM, Karras et al. 2022, and most DiT recipes).
The decay warms up as min(decay, (1 + n) / (10 + n)) so early averages are not dominated by the
random initialisation.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn


class EMA:
    def __init__(self, named_params: list[tuple[str, nn.Parameter]], decay: float):
        if not 0 < decay < 1:
            raise ValueError(f"EMA decay must be in (0, 1), got {decay}")
        self.decay = decay
        self.params = dict(named_params)
        self.shadow: dict[str, Tensor] = {n: p.detach().clone().float() for n, p in named_params}
        self.updates = 0

    def current_decay(self) -> float:
        return min(self.decay, (1 + self.updates) / (10 + self.updates))

    @torch.no_grad()
    def update(self) -> None:
        d = self.current_decay()
        for n, p in self.params.items():
            self.shadow[n].lerp_(p.detach().float(), 1.0 - d)
        self.updates += 1

    @contextmanager
    @torch.no_grad()
    def applied(self) -> Iterator[None]:
        """Inside the block the live parameters hold the EMA weights; restored afterwards."""
        backup = {n: p.detach().clone() for n, p in self.params.items()}
        for n, p in self.params.items():
            p.copy_(self.shadow[n].to(p.dtype))
        try:
            yield
        finally:
            for n, p in self.params.items():
                p.copy_(backup[n])

    def state_dict(self) -> dict[str, Tensor]:
        return dict(self.shadow)

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Tensor], updates: int) -> None:
        missing, extra = sorted(set(self.shadow) - set(state)), sorted(set(state) - set(self.shadow))
        if missing or extra:
            raise ValueError(
                f"EMA state does not match the model: missing {missing[:5]}, unexpected {extra[:5]}"
            )
        for n, t in state.items():
            self.shadow[n].copy_(t)
        self.updates = updates
