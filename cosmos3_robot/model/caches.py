"""What a request keeps between model calls: the Reasoner's K/V that every denoising step reads
(`ReasonerCache`), a reasoning pass's outputs, the text-decoding cache, and a sampling request's
step plan. `mot.MoT` builds and reads them.

Axis glossary:  B batch · La Reasoner tokens · Ld Generator tokens · C hidden width · G kv heads ·
                D head_dim
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class ReasonerCache:
    """What the Generator reads from the Reasoner: per-layer (K, V) and the segment's extent.

    kv[i] = (K, V), each (B, G, La + room, D), already rotated. The first La slots are the
    Reasoner's and read-only: every denoising step reuses them. `with_room` adds `room` slots after
    them where each Generator step writes its own keys and values in place.
    """

    kv: list[tuple[Tensor, Tensor]]
    valid: Tensor | None  # (B, La) bool, None = no padding
    next_position: Tensor  # (B,) first time position after the Reasoner segment
    room: int = 0

    @property
    def batch(self) -> int:
        return self.next_position.shape[0]

    @property
    def length(self) -> int:
        """La: the Reasoner's tokens."""
        return self.kv[0][0].shape[2] - self.room

    @property
    def reasoner_kv(self) -> list[tuple[Tensor, Tensor]]:
        """Per-layer (K, V) of the Reasoner's La tokens only, (B, G, La, D) each."""
        la = self.length
        return [(k[:, :, :la], v[:, :, :la]) for k, v in self.kv]

    def with_room(self, generator_tokens: int) -> ReasonerCache:
        """A copy laid out as [K_ar | room for Ld Generator keys] per layer, for sampling.

        Every denoising step then writes its Ld keys and values into the room, in place, instead of
        concatenating [K_ar; K_dm] anew — in every layer, at every step. Inference only (the writes
        are in place); the Generator input must have exactly `generator_tokens` tokens.
        """
        la = self.length
        kv = []
        for k, v in self.reasoner_kv:
            b, g, _, d = k.shape
            kk, vv = k.new_empty(b, g, la + generator_tokens, d), v.new_empty(b, g, la + generator_tokens, d)
            kk[:, :, :la], vv[:, :, :la] = k, v
            kv.append((kk, vv))
        return ReasonerCache(kv=kv, valid=self.valid, next_position=self.next_position, room=generator_tokens)

    @staticmethod
    def cat(caches: list[ReasonerCache]) -> ReasonerCache:
        """Stack caches along the batch (e.g. conditional + unconditional for guidance), padding
        shorter Reasoner segments with masked keys."""
        la = max(c.length for c in caches)

        def pad(x: Tensor) -> Tensor:
            return torch.nn.functional.pad(x, (0, 0, 0, la - x.shape[2]))

        kv = [
            (
                torch.cat([pad(c.reasoner_kv[i][0]) for c in caches]),
                torch.cat([pad(c.reasoner_kv[i][1]) for c in caches]),
            )
            for i in range(len(caches[0].kv))
        ]
        valids = []
        for c in caches:
            b, n = c.batch, c.length
            v = (
                c.valid
                if c.valid is not None
                else torch.ones(b, n, dtype=torch.bool, device=c.next_position.device)
            )
            valids.append(torch.nn.functional.pad(v, (0, la - n), value=False))
        valid = torch.cat(valids)
        return ReasonerCache(
            kv=kv,
            valid=None if bool(valid.all()) else valid,
            next_position=torch.cat([c.next_position for c in caches]),
        )

    def select(self, idx: Tensor) -> ReasonerCache:
        """The cache of the samples at `idx` (along B)."""
        return ReasonerCache(
            kv=[(k[idx], v[idx]) for k, v in self.reasoner_kv],
            valid=None if self.valid is None else self.valid[idx],
            next_position=self.next_position[idx],
        )


@dataclass
class ReasonerOutput:
    hidden: Tensor  # (B, La, C) after the final norm
    logits: Tensor | None  # (B, La, V)
    cache: ReasonerCache
    text_kv: list[tuple[Tensor, Tensor]] | None = None  # per-layer (K, V) for incremental decoding


@dataclass
class TextCache:
    """Preallocated per-layer K/V for incremental text decoding; slots [0, length) are filled."""

    k: list[Tensor]  # (B, G, Lmax, D) per layer
    v: list[Tensor]
    valid: Tensor  # (B, Lmax) bool
    next_position: Tensor  # (B,) position of the next token
    length: int

    @classmethod
    def start(cls, out: ReasonerOutput, max_new_tokens: int) -> TextCache:
        """A prompt's K/V (`MoT.reason(..., keep_text_kv=True)`) moved into a cache with room for
        `max_new_tokens` more, for `MoT.decode`."""
        if out.text_kv is None:
            raise ValueError("call reason(..., keep_text_kv=True) before decoding")
        b, g, la, d = out.text_kv[0][0].shape

        def with_room(t: Tensor) -> Tensor:
            return torch.cat([t, t.new_zeros(b, g, max_new_tokens, d)], dim=2)

        valid = torch.zeros(b, la + max_new_tokens, dtype=torch.bool, device=out.text_kv[0][0].device)
        valid[:, :la] = True if out.cache.valid is None else out.cache.valid
        ks, vs = [with_room(k) for k, _ in out.text_kv], [with_room(v) for _, v in out.text_kv]
        return cls(k=ks, v=vs, valid=valid, next_position=out.cache.next_position.clone(), length=la)


@dataclass
class StepPlan:
    """What a sampling request keeps fixed across its denoising steps (`MoT.plan_steps`).

    It depends on the Generator input's layout and the sampler's schedule only, not on the latents
    or the Reasoner, so it is built once per request and read by every step (`MoT.denoise_step`).
    """

    noisy: Tensor  # (B, Ld) bool: the tokens being generated
    dm_valid: Tensor | None  # (B, Ld) bool, None = no padding
    outputs: Tensor | None  # (Lo,) tokens whose velocities a step computes (noisy in some sample); None = all
    wanted: Tensor | None  # (Ld,) bool form of `outputs`
    levels: dict[float, Tensor]  # noise level σ of the schedule -> its embedding (C,)
