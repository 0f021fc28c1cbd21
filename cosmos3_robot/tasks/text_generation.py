"""Text generation with the Reasoner: greedy or sampled (temperature, top-k, top-p), seeded.

The prompt (text, or text + ViT tokens from `encoders.vision_inputs.build_reasoner_inputs`) runs once through
`MoT.reason`; each new token then runs through `MoT.decode` against a preallocated KV cache. The
first new token's position is the one after the prompt's largest position (Qwen3-VL's
"rope delta"), which `MoT.reason` works out from the prompt positions.

Axis glossary:  B batch · L prompt tokens · N new tokens · V vocabulary
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from cosmos3_robot.model.caches import TextCache
from cosmos3_robot.model.mot import MoT


@dataclass
class TextSamplingConfig:
    max_new_tokens: int = 32
    do_sample: bool = False  # False: greedy (argmax); the other sampling fields are then unused
    temperature: float = 1.0
    top_k: int | None = None  # keep the k most likely tokens
    top_p: float | None = None  # keep the smallest set of tokens whose probability reaches top_p
    seed: int | None = None  # seeds a private torch.Generator: same seed, same tokens
    eos_token_id: int | tuple[int, ...] | None = None  # a sample stops after emitting one of these
    pad_token_id: int = 0  # written after a sample has stopped

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(
                f"TextSamplingConfig.max_new_tokens must be a positive int, got {self.max_new_tokens!r}"
            )
        if not self.temperature > 0:
            raise ValueError(
                f"TextSamplingConfig.temperature must be > 0 (use do_sample=False for greedy), got {self.temperature}"
            )
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"TextSamplingConfig.top_k must be >= 1 or None, got {self.top_k}")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"TextSamplingConfig.top_p must be in (0, 1] or None, got {self.top_p}")
        if isinstance(self.eos_token_id, int):
            self.eos_token_id = (self.eos_token_id,)
        elif self.eos_token_id is not None:
            self.eos_token_id = tuple(int(t) for t in self.eos_token_id)


@dataclass
class GenerationOutput:
    tokens: Tensor  # (B, N) new tokens; pad_token_id after a sample's end-of-sequence token
    lengths: Tensor  # (B,) new tokens per sample, end-of-sequence token included


def filter_logits(
    logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> Tensor:
    """(B, V) -> (B, V) float32 logits with temperature applied and removed tokens at -inf
    (same order as Hugging Face: temperature, then top-k, then top-p)."""
    x = logits.float() / temperature
    if top_k is not None and top_k < x.shape[-1]:
        kth = torch.topk(x, top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_x, order = torch.sort(x, dim=-1, descending=True)
        probs = sorted_x.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        drop_sorted = before >= top_p  # never drops the most likely token (before = 0)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        x = x.masked_fill(drop, float("-inf"))
    return x


def next_token(logits: Tensor, cfg: TextSamplingConfig, generator: torch.Generator | None = None) -> Tensor:
    """(B, V) logits -> (B,) token ids."""
    if not cfg.do_sample:
        return logits.argmax(-1)
    probs = filter_logits(logits, cfg.temperature, cfg.top_k, cfg.top_p).softmax(-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(
    model: MoT,
    input_ids: Tensor | None = None,
    *,
    lengths: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    positions: Tensor | None = None,
    deepstack: list[Tensor] | None = None,
    config: TextSamplingConfig | None = None,
    **overrides,
) -> GenerationOutput:
    """Generate up to max_new_tokens per sample after right-padded prompts (`lengths`).

    Prompt arguments are those of `MoT.reason` (pass `**ReasonerInputs.reason_kwargs()` for images
    and video); sampling options come from `config` and/or keyword overrides, e.g.
    `generate(model, ids, max_new_tokens=20, do_sample=True, top_p=0.9, seed=0)`.
    """
    cfg = TextSamplingConfig(**{**(config.__dict__ if config is not None else {}), **overrides})
    out = model.reason(
        input_ids,
        lengths=lengths,
        inputs_embeds=inputs_embeds,
        positions=positions,
        deepstack=deepstack,
        logits=False,
        keep_text_kv=True,
    )
    b, la = out.hidden.shape[:2]
    device = out.hidden.device
    last = (lengths.to(device) - 1) if lengths is not None else torch.full((b,), la - 1, device=device)
    logits = model.lm_head(out.hidden[torch.arange(b, device=device), last])  # (B, V)
    cache = TextCache.start(out, cfg.max_new_tokens)
    gen = None
    if cfg.do_sample:
        gen = torch.Generator(device=device)
        gen.manual_seed(cfg.seed if cfg.seed is not None else int(torch.randint(0, 2**62, ()).item()))
    eos = torch.tensor(cfg.eos_token_id or (), dtype=torch.long, device=device)
    done = torch.zeros(b, dtype=torch.bool, device=device)
    n_new = torch.zeros(b, dtype=torch.long, device=device)
    tokens = []
    for step in range(cfg.max_new_tokens):
        tok = next_token(logits, cfg, gen)
        tok = torch.where(done, torch.full_like(tok, cfg.pad_token_id), tok)
        tokens.append(tok)
        n_new += (~done).long()
        done |= torch.isin(tok, eos)
        if bool(done.all()) or step == cfg.max_new_tokens - 1:
            break
        logits = model.decode(tok, cache)
    return GenerationOutput(tokens=torch.stack(tokens, dim=1), lengths=n_new)
