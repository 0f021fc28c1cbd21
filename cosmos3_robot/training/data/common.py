"""Helpers both training stages share: batch plans, the plan-ordered loader, the dataset's metadata,
episode split and clip dataset, and the vocabulary check."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import DataLoader, Dataset

from cosmos3_robot.datasets import (
    ClipDataset,
    ClipDatasetConfig,
    ClipSpec,
    open_lerobot_metadata,
    seed_worker,
    split_episodes,
)
from cosmos3_robot.model.config import ModelConfig
from cosmos3_robot.training.data.config import DataConfig


def collate_samples(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return samples  # batches are assembled in the main process, after the VAE


def plan_loader(
    dataset: Dataset, batches: list[list[int]], num_workers: int
) -> Iterator[list[dict[str, Any]]]:
    """Samples of each planned batch, in plan order (the plan alone decides the data)."""
    if not batches:
        return iter(())
    return iter(
        DataLoader(
            dataset,
            batch_sampler=batches,
            num_workers=num_workers,
            collate_fn=collate_samples,
            worker_init_fn=seed_worker,
        )
    )


def chunks(order: np.ndarray, size: int) -> list[list[int]]:
    return [order[i : i + size].tolist() for i in range(0, len(order), size)]


def val_indices(n: int, batch_size: int, max_batches: int) -> list[list[int]]:
    """A fixed, evenly spread subset of at most max_batches * batch_size samples."""
    take = min(n, batch_size * max_batches)
    if take == 0:
        return []
    idx = np.unique(np.linspace(0, n - 1, take).round().astype(np.int64))
    return chunks(idx, batch_size)


def dataset_meta(cfg: DataConfig):
    meta = open_lerobot_metadata(cfg.repo_id, cfg.root)
    name = f"{meta.repo_id} ({meta.root})"
    return meta, name


def require_feature(meta, name: str, key: str, stage: str, hint: str) -> None:
    if key not in meta.features:
        raise ValueError(
            f"dataset {name}: {stage} needs key {key!r}, which the dataset lacks; it has "
            f"{sorted(meta.features)} ({hint})"
        )


def square_image_size(meta, name: str, key: str) -> int:
    """The side of the dataset's square frames under `key`; non-square frames are refused."""
    shape = meta.features[key]["shape"]
    names = meta.features[key].get("names") or []
    h, w = (shape[0], shape[1]) if list(names[:2]) != ["channels", "height"] else (shape[1], shape[2])
    if h != w:
        raise ValueError(
            f"dataset {name}, key {key!r}: frames are {h}x{w} px; the model needs square frames (the VAE and "
            "the 2x2 patch grid are square): record square frames (record --image-size) or crop them"
        )
    return int(h)


def split_dataset(cfg: DataConfig, meta, name: str):
    episodes = [int(e) for e in meta.episodes["episode_index"]]
    return split_episodes(episodes, cfg.val_fraction, cfg.seed, dataset=name)


def check_vocab(tok, model_cfg: ModelConfig) -> None:
    if tok.vocab_size > model_cfg.vocab_size:
        raise ValueError(
            f"tokenizer {tok.name} has {tok.vocab_size} ids but the model's vocab_size is "
            f"{model_cfg.vocab_size}; use a model with vocab_size >= {tok.vocab_size}"
        )


def clip_dataset(cfg: DataConfig, spec: ClipSpec, episodes: list[int] | None) -> ClipDataset:
    return ClipDataset(
        ClipDatasetConfig(
            repo_id=cfg.repo_id,
            root=cfg.root,
            spec=spec,
            episodes=episodes,
            image_key=cfg.image_key,
            action_key=cfg.action_key,
            state_key=cfg.state_key,
            env_state_key=cfg.env_state_key,
        )
    )
