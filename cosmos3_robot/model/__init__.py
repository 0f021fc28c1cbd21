"""The Mixture-of-Transformers model: configs, RoPE, attention, blocks, the model, latent I/O."""

from .caches import ReasonerCache, ReasonerOutput, StepPlan, TextCache
from .config import AttentionConfig, ModelConfig, TowerConfig, preset
from .mot import MoT, count_parameters
from .sequence import GenInput, Stream, patchify, series_stream, unpatchify, video_stream

__all__ = [
    "AttentionConfig",
    "GenInput",
    "ModelConfig",
    "MoT",
    "ReasonerCache",
    "ReasonerOutput",
    "StepPlan",
    "Stream",
    "TextCache",
    "TowerConfig",
    "count_parameters",
    "patchify",
    "preset",
    "series_stream",
    "unpatchify",
    "video_stream",
]
