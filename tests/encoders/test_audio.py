"""Frozen audio encoder: 25 tokens per second on the real-time axis, a working mel filterbank."""

from __future__ import annotations

import math

import pytest
import torch

from cosmos3_robot.encoders.audio import AudioEncoder, AudioEncoderConfig, mel_filterbank


def _tone(freq: float, seconds: float, sr: int = 16000) -> torch.Tensor:
    t = torch.arange(int(round(seconds * sr))) / sr
    return 0.5 * torch.sin(2 * math.pi * freq * t)


@pytest.mark.parametrize("sr", [16000, 22050, 48000])
@pytest.mark.parametrize("seconds", [0.04, 1.0, 2.02])
def test_tokens_at_25_hz_with_timestamps(sr: int, seconds: float) -> None:
    enc = AudioEncoder(AudioEncoderConfig(sample_rate=sr, audio_dim=32))
    wav = _tone(440, seconds, sr)
    tokens, times = enc(wav, offset_s=1.5)
    expected = math.ceil(wav.shape[0] / (sr // 25))  # every window centre inside the signal
    assert tokens.shape == (expected, 32) and times.shape == (expected,)
    assert abs(expected - 25 * seconds) < 1
    torch.testing.assert_close(times, 1.5 + torch.arange(expected, dtype=torch.float64) / 25)
    assert torch.isfinite(tokens).all()


def test_mel_filterbank_shape_and_peak() -> None:
    fb = mel_filterbank(513, 16000, 40, 0.0, 8000.0)
    assert fb.shape == (513, 40)
    assert fb.min() >= 0 and fb.max() <= 1
    centres = fb.argmax(0)
    assert (centres.diff() >= 0).all()  # filters ordered by frequency
    assert (fb.sum(0) > 0).all()  # no empty filter


def test_tone_lands_in_the_right_mel_bin() -> None:
    cfg = AudioEncoderConfig(n_mels=40, audio_dim=40, project=False)
    enc = AudioEncoder(cfg)
    bins = []
    for freq in (300.0, 1000.0, 4000.0):
        tokens, _ = enc(_tone(freq, 0.5))
        bins.append(int(tokens[5:-5].mean(0).argmax()))
        hz = torch.linspace(0, 8000, cfg.n_fft // 2 + 1)
        assert abs(hz[enc.mel_fb[:, bins[-1]].argmax()] - freq) < 0.15 * freq + 50
    assert bins == sorted(bins) and len(set(bins)) == 3


def test_fixed_seeded_frozen_and_batched() -> None:
    a, b = AudioEncoder(), AudioEncoder()
    assert not list(a.parameters())  # nothing trainable
    assert torch.equal(a.proj, b.proj)  # rebuilt from the seed
    assert not torch.equal(a.proj, AudioEncoder(AudioEncoderConfig(seed=1)).proj)
    wav = torch.randn(2, 8000)
    batch, _ = a(wav)
    assert batch.shape == (2, 13, 64)
    torch.testing.assert_close(batch[1], a(wav[1])[0])


def test_bad_audio_raises() -> None:
    enc = AudioEncoder()
    with pytest.raises(ValueError, match="int16 audio"):
        enc(torch.zeros(1600, dtype=torch.int16))
    with pytest.raises(ValueError, match="average the channels"):
        enc(torch.zeros(1, 2, 1600))
    with pytest.raises(ValueError, match="not a multiple of tokens_per_second"):
        AudioEncoderConfig(sample_rate=16010)
    with pytest.raises(ValueError, match="audio_dim must equal n_mels"):
        AudioEncoderConfig(n_mels=40, audio_dim=64, project=False)
