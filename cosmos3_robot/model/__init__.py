"""The Mixture-of-Transformers model: configs, RoPE, attention, blocks, the model, latent I/O."""

from cosmos3_robot.model.caches import ReasonerCache, ReasonerOutput, StepPlan, TextCache
from cosmos3_robot.model.config import AttentionConfig, ModelConfig, TowerConfig, preset
from cosmos3_robot.model.mot import MoT, count_parameters
from cosmos3_robot.model.sequence import GenInput, Stream, patchify, series_stream, unpatchify, video_stream

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
