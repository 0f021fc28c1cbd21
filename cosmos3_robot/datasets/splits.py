"""Train/validation split by episode (never by frame: clips of one episode stay on one side),
saved as JSON next to the dataset (`<root>/meta/cosmos3_split.json`) or a run."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SPLIT_FILENAME = "cosmos3_split.json"


@dataclass
class EpisodeSplit:
    train: list[int]
    val: list[int]
    seed: int = 0
    val_fraction: float = 0.1
    dataset: str = ""

    def __post_init__(self) -> None:
        overlap = set(self.train) & set(self.val)
        if overlap:
            raise ValueError(f"episodes {sorted(overlap)} are in both train and val")

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        if path.is_dir():
            path = path / SPLIT_FILENAME
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2))
        return path

    @classmethod
    def load(cls, path: str | Path) -> EpisodeSplit:
        path = Path(path)
        if path.is_dir():
            path = path / SPLIT_FILENAME
        if not path.exists():
            raise FileNotFoundError(f"no split file at {path}; create one with split_episodes(...).save(...)")
        return cls(**json.loads(path.read_text()))


def split_episodes(
    episodes: int | list[int], val_fraction: float = 0.1, seed: int = 0, dataset: str = ""
) -> EpisodeSplit:
    """Shuffle episode indices with `seed`; at least one val episode when val_fraction > 0 and
    at least one train episode always."""
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction} must be in [0, 1)")
    eps = list(range(episodes)) if isinstance(episodes, int) else sorted(int(e) for e in episodes)
    if len(eps) < (2 if val_fraction > 0 else 1):
        raise ValueError(
            f"dataset {dataset or '?'}: {len(eps)} episode(s) cannot be split with val_fraction={val_fraction}"
        )
    order = np.random.default_rng(seed).permutation(len(eps))
    n_val = 0 if val_fraction == 0 else min(len(eps) - 1, max(1, round(val_fraction * len(eps))))
    val = sorted(eps[i] for i in order[:n_val])
    train = sorted(eps[i] for i in order[n_val:])
    return EpisodeSplit(train, val, seed, val_fraction, dataset)


def dataset_split(
    root: str | Path, num_episodes: int, val_fraction: float = 0.1, seed: int = 0
) -> EpisodeSplit:
    """Load `<root>/meta/cosmos3_split.json`, or create and save it. When the dataset has grown
    (a resumed recording), old episodes keep their side and new ones are split with the same
    fraction, so a validation episode never moves into training."""
    path = Path(root) / "meta" / SPLIT_FILENAME
    if not path.exists():
        split = split_episodes(num_episodes, val_fraction, seed, dataset=str(root))
        split.save(path)
        return split
    split = EpisodeSplit.load(path)
    known = set(split.train) | set(split.val)
    new = [e for e in range(num_episodes) if e not in known]
    if new:
        extra = (
            split_episodes(new, split.val_fraction, split.seed + len(known), dataset=str(root))
            if len(new) > 1
            else EpisodeSplit(new, [], split.seed, split.val_fraction)
        )
        split = EpisodeSplit(
            sorted(split.train + extra.train),
            sorted(split.val + extra.val),
            split.seed,
            split.val_fraction,
            split.dataset,
        )
        split.save(path)
    return split
