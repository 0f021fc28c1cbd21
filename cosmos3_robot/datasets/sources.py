"""Open LeRobot datasets from a local root, or from the hub only when the user is online.

LeRobot itself would try to download when `root` lacks the dataset; offline that surfaces as a
hub error far from the cause, so we check first and name the folder.
"""

from __future__ import annotations

import os
from pathlib import Path

_TRUE = {"1", "ON", "YES", "TRUE"}


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").upper() in _TRUE


def _resolve(repo_id: str | None, root: str | Path | None) -> tuple[str, Path | None]:
    if root is None and repo_id is None:
        raise ValueError("give a local dataset root or a hub repo_id")
    root = Path(root) if root is not None else None
    if repo_id is None:
        from cosmos3_robot.datasets.writer import recorded_repo_id

        repo_id = recorded_repo_id(root) or f"local/{root.name}"
    local = root
    if local is None:
        from lerobot.utils.constants import HF_LEROBOT_HOME

        local = Path(HF_LEROBOT_HOME) / repo_id
    from cosmos3_robot.datasets.writer import check_not_interrupted

    check_not_interrupted(local)
    if not (local / "meta" / "info.json").exists():
        if hub_offline() or repo_id.startswith("local/"):
            why = "HF_HUB_OFFLINE=1 forbids downloading" if hub_offline() else "no hub repo_id was given"
            raise FileNotFoundError(
                f"dataset {repo_id}: no LeRobot dataset at root {local} (meta/info.json missing) and {why}; "
                f"record one with `cosmos3-robot record --root {local}` or fix the path"
            )
    return repo_id, root


def open_lerobot_metadata(repo_id: str | None, root: str | Path | None):
    from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

    repo_id, root = _resolve(repo_id, root)
    return LeRobotDatasetMetadata(repo_id, root=root)


def open_lerobot_dataset(repo_id: str | None, root: str | Path | None, **kwargs):
    """`LeRobotDataset(repo_id, root=root, **kwargs)` with the offline check above."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    repo_id, root = _resolve(repo_id, root)
    return LeRobotDataset(repo_id, root=root, **kwargs)
