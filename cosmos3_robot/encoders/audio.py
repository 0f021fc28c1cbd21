"""A frozen audio encoder: log-mel frames at 25 Hz, then a fixed seeded linear map to `audio_dim`.

Axis glossary: S samples, T_audio audio tokens (25 per second), M mel bins, D audio_dim.

Token k summarises a window of `n_fft` samples centred on sample k·hop, hop = sample_rate / 25,
so it sits at t_k = offset_s + k / 25 seconds, where offset_s is the time of the waveform's first
sample on the clip's clock. A clip of S samples gives ceil(S / hop) tokens (every window centre
that lies inside the signal): exactly 25 tokens per second of audio.

How the modalities line up, all in seconds on one clock (the clip's, e.g. LeRobot `timestamp`):
    video frame i      t = frame_times_s[i]                (i / fps + start)
    video latent k     t = frame_times_s[4k]                (see processors.geometry.latent_frame_times)
    audio token k      t = offset_s + k / 25
    action sample j    t = action_times_s[j]                (j / control_hz + start)
The RoPE time axis multiplies these seconds by one rate for every modality, so an audio token, a
video latent and an action with the same t share a time position without any resampling.

Nothing here is trained: the mel filterbank is fixed and the projection is a seeded random map
stored as a buffer, so the encoder is reproducible from its config alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass
class AudioEncoderConfig:
    sample_rate: int = 16000
    tokens_per_second: int = 25  # (C3) 25 audio tokens per second
    n_mels: int = 64
    audio_dim: int = 64
    n_fft: int | None = None  # None: the smallest power of two >= 2 * hop (50 % overlap or more)
    f_min: float = 0.0
    f_max: float | None = None  # None: sample_rate / 2
    project: bool = True  # False keeps the mel bins as they are (requires audio_dim == n_mels)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("sample_rate", "tokens_per_second", "n_mels", "audio_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"AudioEncoderConfig.{name} must be a positive int, got {value!r}")
        if self.sample_rate % self.tokens_per_second:
            raise ValueError(
                f"sample_rate {self.sample_rate} is not a multiple of tokens_per_second "
                f"{self.tokens_per_second}, so the hop would not be a whole number of samples; resample "
                f"the audio (16000, 22050, 44100 and 48000 Hz all work at 25 tokens/s)"
            )
        if self.n_fft is None:
            self.n_fft = 1 << math.ceil(math.log2(2 * self.hop_length))
        if self.f_max is None:
            self.f_max = self.sample_rate / 2
        if not 0 <= self.f_min < self.f_max <= self.sample_rate / 2:
            raise ValueError(f"need 0 <= f_min < f_max <= sample_rate / 2, got {self.f_min}, {self.f_max}")
        if not self.project and self.audio_dim != self.n_mels:
            raise ValueError(
                f"project=False keeps the {self.n_mels} mel bins, so audio_dim must equal n_mels"
            )

    @property
    def hop_length(self) -> int:
        return self.sample_rate // self.tokens_per_second


def _hz_to_mel(f: Tensor) -> Tensor:  # HTK mel scale
    return 2595.0 * torch.log10(1.0 + f / 700.0)


def _mel_to_hz(m: Tensor) -> Tensor:
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def mel_filterbank(n_freqs: int, sample_rate: int, n_mels: int, f_min: float, f_max: float) -> Tensor:
    """(n_freqs, n_mels) triangular filters, equally spaced on the HTK mel scale, peak 1."""
    freqs = torch.linspace(0, sample_rate / 2, n_freqs, dtype=torch.float64)  # FFT bin centres
    edges = torch.linspace(
        _hz_to_mel(torch.tensor(f_min, dtype=torch.float64)),
        _hz_to_mel(torch.tensor(f_max, dtype=torch.float64)),
        n_mels + 2,
        dtype=torch.float64,
    )
    hz = _mel_to_hz(edges)  # (M + 2,) left edge, centre, right edge of each filter
    lo, mid, hi = hz[:-2], hz[1:-1], hz[2:]
    rising = (freqs[:, None] - lo) / (mid - lo)  # (F, M)
    falling = (hi - freqs[:, None]) / (hi - mid)
    return rising.minimum(falling).clamp(min=0).float()


class AudioEncoder(nn.Module):
    """waveform (S,) or (B, S) float mono -> tokens (T_audio, D) or (B, T_audio, D), and times (T_audio,)."""

    def __init__(self, config: AudioEncoderConfig | None = None) -> None:
        super().__init__()
        self.config = config = config or AudioEncoderConfig()
        n_freqs = config.n_fft // 2 + 1
        self.register_buffer("window", torch.hann_window(config.n_fft), persistent=False)
        self.register_buffer(
            "mel_fb",
            mel_filterbank(n_freqs, config.sample_rate, config.n_mels, config.f_min, config.f_max),
            persistent=False,
        )
        if config.project:
            gen = torch.Generator().manual_seed(config.seed)
            proj = torch.randn(config.n_mels, config.audio_dim, generator=gen) / math.sqrt(config.n_mels)
        else:
            proj = torch.eye(config.n_mels)
        self.register_buffer("proj", proj, persistent=False)  # (M, D), fixed: rebuilt from the seed
        self.requires_grad_(False)
        self.eval()

    def num_tokens(self, num_samples: int) -> int:
        return -(-num_samples // self.config.hop_length)  # ceil(S / hop)

    def token_times(self, num_tokens: int, offset_s: float = 0.0) -> Tensor:
        """(T_audio,) float64 seconds: t_k = offset_s + k / tokens_per_second."""
        return offset_s + torch.arange(num_tokens, dtype=torch.float64) / self.config.tokens_per_second

    def log_mel(self, waveform: Tensor) -> Tensor:
        """(B, S) -> (B, T_audio, M) natural-log mel power."""
        cfg = self.config
        spec = torch.stft(
            waveform.float(),
            n_fft=cfg.n_fft,
            hop_length=cfg.hop_length,
            window=self.window,
            center=True,
            pad_mode="constant",  # also works for clips shorter than half a window
            return_complex=True,
        )  # (B, F, 1 + S // hop), frame k centred on sample k * hop
        power = spec.abs().square()[..., : self.num_tokens(waveform.shape[-1])]
        mel = torch.einsum("bft,fm->btm", power, self.mel_fb)
        return torch.log(mel + 1e-6)

    @torch.no_grad()
    def forward(self, waveform: Tensor, offset_s: float = 0.0) -> tuple[Tensor, Tensor]:
        if waveform.ndim not in (1, 2) or waveform.shape[-1] == 0:
            raise ValueError(
                f"waveform must be mono (S,) or (B, S) with S > 0, got shape {tuple(waveform.shape)}; "
                f"average the channels of multi-channel audio first"
            )
        if not waveform.is_floating_point():
            raise ValueError(
                f"waveform must be float (e.g. in [-1, 1]), got {waveform.dtype}; int16 audio: x / 32768"
            )
        single = waveform.ndim == 1
        wav = waveform[None] if single else waveform
        tokens = self.log_mel(wav) @ self.proj  # (B, T_audio, D)
        times = self.token_times(tokens.shape[1], offset_s)
        return (tokens[0] if single else tokens), times
