"""Text generation on the tiny preset: the KV-cached decode loop equals recomputing the whole
sequence, batches with padding equal samples run alone, sampling is seeded and filtered as asked.
(Greedy decoding against transformers' `generate` is in test_qwen3vl.py.)"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cosmos3_robot.model import MoT, preset
from cosmos3_robot.tasks.text_generation import TextSamplingConfig, filter_logits, generate, next_token


@pytest.fixture(scope="module")
def model() -> MoT:
    torch.manual_seed(0)
    m = MoT(dataclasses.replace(preset("tiny"), generator=None)).eval()
    with torch.no_grad():  # sharper logits than the default init, so greedy choices are clear-cut
        m.lm_head.weight.mul_(8.0)
    return m


def greedy_by_recompute(m: MoT, prompt: torch.Tensor, n: int) -> torch.Tensor:
    seq = prompt.clone()
    with torch.no_grad():
        for _ in range(n):
            nxt = m.reason(seq).logits[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    return seq[:, prompt.shape[1] :]


def test_cached_greedy_equals_full_recompute(model):
    prompt = torch.randint(0, model.config.vocab_size, (1, 7), generator=torch.Generator().manual_seed(1))
    out = generate(model, prompt, max_new_tokens=12)
    assert out.tokens.shape == (1, 12) and out.lengths.tolist() == [12]
    assert torch.equal(out.tokens, greedy_by_recompute(model, prompt, 12))


def test_padded_batch_equals_samples_alone(model):
    g = torch.Generator().manual_seed(2)
    p0 = torch.randint(0, model.config.vocab_size, (1, 9), generator=g)
    p1 = torch.randint(0, model.config.vocab_size, (1, 4), generator=g)
    batch = torch.cat([p0, torch.nn.functional.pad(p1, (0, 5))])
    out = generate(model, batch, lengths=torch.tensor([9, 4]), max_new_tokens=8)
    assert torch.equal(out.tokens[0], generate(model, p0, max_new_tokens=8).tokens[0])
    assert torch.equal(out.tokens[1], generate(model, p1, max_new_tokens=8).tokens[0])


def test_eos_stops_a_sample_and_pads_it(model):
    prompt = torch.randint(0, model.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(3))
    free = generate(model, prompt, max_new_tokens=10).tokens
    eos = int(free[0, 2])  # sample 0 emits this token third
    out = generate(model, prompt, max_new_tokens=10, eos_token_id=eos, pad_token_id=299)

    def stop(row: torch.Tensor) -> int:
        hits = (row == eos).nonzero()
        return int(hits[0]) + 1 if len(hits) else len(row)

    n0, n1 = stop(free[0]), stop(free[1])
    assert n0 <= 3 and out.lengths.tolist() == [n0, n1]
    for i, n in enumerate((n0, n1)):
        assert torch.equal(out.tokens[i, :n], free[i, :n]) and (out.tokens[i, n:] == 299).all()


def test_sampling_is_seeded_and_top_k_1_is_greedy(model):
    prompt = torch.randint(0, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(4))
    kw = dict(max_new_tokens=10, do_sample=True, temperature=1.5)
    a = generate(model, prompt, seed=7, **kw).tokens
    assert torch.equal(a, generate(model, prompt, seed=7, **kw).tokens)
    assert not torch.equal(a, generate(model, prompt, seed=8, **kw).tokens)
    greedy = generate(model, prompt, max_new_tokens=10).tokens
    assert torch.equal(generate(model, prompt, seed=9, top_k=1, **kw).tokens, greedy)
    assert torch.equal(generate(model, prompt, seed=9, top_p=1e-6, **kw).tokens, greedy)
    cfg = TextSamplingConfig(max_new_tokens=10, do_sample=True, seed=7, temperature=1.5)
    assert torch.equal(generate(model, prompt, config=cfg).tokens, a)


def test_filter_logits_top_k_and_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    kept = lambda x: torch.isfinite(x)[0].tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.5)) == [True, False, False, False]
    assert kept(filter_logits(logits, top_p=0.7)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.76)) == [True, True, True, False]
    # Temperature rescales before softmax.
    p = filter_logits(logits, temperature=2.0).softmax(-1)
    torch.testing.assert_close(
        p, torch.tensor([[0.5, 0.25, 0.15, 0.1]]).sqrt() / torch.tensor([0.5, 0.25, 0.15, 0.1]).sqrt().sum()
    )


def test_sampled_frequencies_follow_the_filtered_distribution():
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1])).expand(4000, 4)
    cfg = TextSamplingConfig(do_sample=True, top_p=0.7)
    tok = next_token(logits, cfg, torch.Generator().manual_seed(0))
    freq = torch.bincount(tok, minlength=4).float() / len(tok)
    assert freq[2:].sum() == 0
    assert abs(freq[0].item() - 2 / 3) < 0.03


@pytest.mark.parametrize(
    "field, value", [("max_new_tokens", 0), ("temperature", 0.0), ("top_k", 0), ("top_p", 1.5)]
)
def test_bad_sampling_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"TextSamplingConfig.{field}"):
        TextSamplingConfig(**{field: value})
