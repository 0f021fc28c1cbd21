"""Training data: LeRobot clips -> model-ready batches for the two training stages.

    gen = make_generator_data(DataConfig(root="data/reach", num_frames=9, num_actions=16), preset("sim-small"))
    for batch in gen.train_batches(epoch):   # ClipBatch: prompt ids, VAE latents, normalised actions
        ...
    txt = make_reasoner_data(cfg, model_cfg, vit)
    for batch in txt.train_batches(epoch):   # TextBatch: question -> answer tokens, loss on the answer
        out = model.reason(**batch.reasoner_inputs(model, vit))

Generator stage (one ClipBatch per step):

    LeRobot clip ─► frames uint8 (T,3,H,W) ─► frozen VAE (or the latent cache) ─► video (C,T_lat,h,w)
                    video_time (T,) s      ─► latent_frame_times               ─► video_time (T_lat,)
                    action (Na,A) raw      ─► ActionTransform: normalise, pad ─► action (Na,W), mask (W,)
                    task text              ─► tokenizer                        ─► input_ids, lengths
    mp4 clips (action-free) ─► the same video path, action=None

With a latent cache the LeRobot clip is read from the parquet table alone (`ClipDataset.without_video`:
LeRobot's windows, no frame decoded) and its latents come from the cache, which holds every clip,
the padded ones at episode ends included; only a clip the cache lacks is decoded and encoded.

Reasoner stage (one TextBatch per step): a question about the scene at one frame, generated from
`observation.environment_state` (datasets/text.py), answered in text; with a ViT the frame itself is
shown first, as Qwen3-VL placeholders. Labels are next-token targets on the answer only.

Determinism: `train_batches(epoch, start)` depends only on (seed, epoch) — never on worker count or on
whether the latent cache is used (a cached latent is bit-identical to encoding the clip: both go
through `latent_cache._encode_clip`, one clip at a time).
"""

from __future__ import annotations

from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.training.data.batches import IGNORE, DataSource, TextBatch
from cosmos3_robot.training.data.config import DataConfig
from cosmos3_robot.training.data.generator import GeneratorData
from cosmos3_robot.training.data.reasoner import ReasonerData


def make_generator_data(cfg: DataConfig, model_cfg: ModelConfig, vit=None):
    """ClipBatches for the generator stage (see `training.data.generator.GeneratorData`); `vit` is
    needed when clips show the Reasoner their frame (`cfg.reasoner_frame`)."""
    return GeneratorData(cfg, model_cfg, vit)


def make_reasoner_data(cfg: DataConfig, model_cfg: ModelConfig, vit=None):
    """TextBatches for the reasoner stage (see `training.data.reasoner.ReasonerData`)."""
    return ReasonerData(cfg, model_cfg, vit)


__all__ = [
    "DataConfig",
    "DataSource",
    "GeneratorData",
    "IGNORE",
    "ReasonerData",
    "TextBatch",
    "make_generator_data",
    "make_reasoner_data",
]
