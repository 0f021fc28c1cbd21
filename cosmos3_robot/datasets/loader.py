"""DataLoader construction with reproducible shuffling and per-worker seeding."""

from __future__ import annotations

import random

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


def _fresh_video_decoders() -> None:
    """Forget torchcodec decoders inherited through fork. LeRobot caches one decoder per video
    file together with its open file handle; after fork the workers share that handle's offset
    with the parent and each other, and concurrent reads corrupt the stream ("Invalid data found
    when processing input"). This bites whenever the main process decoded before the workers
    started (e.g. a validation pass with num_workers=0)."""
    try:
        from lerobot.datasets import video_utils
    except ImportError:
        return
    if hasattr(video_utils, "_default_decoder_cache"):
        video_utils._default_decoder_cache = video_utils.VideoDecoderCache()


def seed_worker(worker_id: int) -> None:
    """`worker_init_fn`: derive numpy/random seeds from torch's per-worker seed (itself derived
    from the loader's generator), so augmentations differ across workers but repeat across runs;
    and give the worker its own video decoders."""
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    _fresh_video_decoders()


def make_dataloader(
    dataset: Dataset,
    batch_size: int = 8,
    shuffle: bool = True,
    num_workers: int = 0,
    seed: int = 0,
    drop_last: bool = False,
    persistent_workers: bool | None = None,
) -> DataLoader:
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if num_workers < 0:
        raise ValueError(f"num_workers={num_workers} must be >= 0")
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        drop_last=drop_last,
        worker_init_fn=seed_worker,
        generator=torch.Generator().manual_seed(seed),
        persistent_workers=bool(num_workers) if persistent_workers is None else persistent_workers,
    )
