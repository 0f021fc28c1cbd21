"""Shared builders of the test suite: tiny models, padded Generator inputs, trainers on synthetic
data. Plain functions (imported by the tests that need them), not tests."""

from __future__ import annotations

import dataclasses

import torch

from cosmos3_robot.model import GenInput, MoT, preset, series_stream, video_stream
from cosmos3_robot.training.config import TrainConfig
from cosmos3_robot.training.data.synthetic import SyntheticData
from cosmos3_robot.training.trainer import Trainer


def tiny_model(seed: int = 0, **overrides) -> MoT:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(preset("tiny"), **overrides)
    m = MoT(cfg).eval()
    # Non-trivial norms and modality embeddings so that a wrong wiring cannot hide.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name or name.endswith("_embed"):
                p.add_(0.1 * torch.randn_like(p))
    return m


def make_gen(b: int, frames: list[int], actions: list[int], audio: list[int], seed: int = 1) -> GenInput:
    """A padded batch: sample i has frames[i] latent frames, actions[i] action tokens, audio[i] audio tokens."""
    g = torch.Generator().manual_seed(seed)
    cfg = preset("tiny")
    t_max, a_max, s_max = max(frames), max(actions), max(audio)
    lat = torch.randn(b, cfg.latent_channels, t_max, 4, 4, generator=g)
    ftime = torch.arange(t_max).float().expand(b, t_max) / 6.0
    fvalid = torch.arange(t_max)[None] < torch.tensor(frames)[:, None]
    noisy = torch.arange(t_max)[None].expand(b, t_max) >= 1
    video = video_stream(lat, ftime, noisy, torch.rand(b, generator=g), frame_valid=fvalid)
    avalid = torch.arange(a_max)[None] < torch.tensor(actions)[:, None]
    action = series_stream(
        torch.randn(b, a_max, cfg.action_dim, generator=g),
        torch.arange(a_max).float().expand(b, a_max) / 20.0,
        torch.ones(b, a_max, dtype=torch.bool),
        torch.rand(b, generator=g),
        valid=avalid,
        embodiment=torch.arange(b) % cfg.num_embodiments,
    )
    svalid = torch.arange(s_max)[None] < torch.tensor(audio)[:, None]
    sound = series_stream(
        torch.randn(b, s_max, cfg.audio_dim, generator=g),
        torch.arange(s_max).float().expand(b, s_max) / 25.0,
        torch.zeros(b, s_max, dtype=torch.bool),
        valid=svalid,
    )
    return GenInput(video=video, audio=sound, action=action)


def make_cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(stage="generator", steps=3, precision="fp32", out=str(tmp_path / "run"), log_every=1, val_every=0,
                progress=False, ema_decay=0.9)  # fmt: skip
    data = kw.pop("data", {})
    optim = kw.pop("optim", {})
    cfg = TrainConfig(**{**base, **kw})
    cfg.data = dataclasses.replace(cfg.data, batch_size=4, **data)
    cfg.optim = dataclasses.replace(cfg.optim, **{"warmup_steps": 1, "lr": 1e-3, **optim})
    return cfg


def make_trainer(tmp_path, data_kw=None, **kw) -> Trainer:
    cfg = make_cfg(tmp_path, **kw)
    torch.manual_seed(0)
    model = MoT(preset("tiny"))
    data = SyntheticData(model.config, cfg.stage, cfg.data.batch_size, batches_per_epoch=2, **(data_kw or {}))
    return Trainer(cfg, data, model=model)


def tiny_act_checkpoint(dataset_root, out):
    """A random-init LeRobot ACT policy (tiny dims, no downloaded backbone weights) with its
    normalisation processors, saved as `lerobot-train` saves a checkpoint, for the dataset at
    `dataset_root` (image + state -> action)."""
    from lerobot.configs.types import FeatureType
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata
    from lerobot.policies.act.configuration_act import ACTConfig
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors
    from lerobot.utils.feature_utils import dataset_to_policy_features

    meta = LeRobotDatasetMetadata("local/data", root=dataset_root)
    feats = dataset_to_policy_features(meta.features)
    inputs = {k: f for k, f in feats.items() if k in ("observation.image", "observation.state")}
    outputs = {k: f for k, f in feats.items() if f.type == FeatureType.ACTION}
    cfg = ACTConfig(input_features=inputs, output_features=outputs, chunk_size=4, n_action_steps=4, dim_model=32,
                    n_heads=2, dim_feedforward=64, n_encoder_layers=1, n_vae_encoder_layers=1,
                    pretrained_backbone_weights=None, device="cpu", push_to_hub=False)  # fmt: skip
    torch.manual_seed(0)
    policy = ACTPolicy(cfg)
    pre, post = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    for part in (policy, pre, post):
        part.save_pretrained(out)
    return out
