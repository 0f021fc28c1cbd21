"""Crash-safe LeRobot dataset writing, shared by `record` and `label`.

LeRobot 0.6.1 keeps parquet writers open until `finalize()` and rewrites `meta/info.json` after every
episode, so a process killed mid-recording leaves footer-less parquet files that `info.json`
already counts. `resume()` always starts *new* data, video and episode-metadata files, so we write in
sessions of a few episodes:

    session:  [mark in-progress] resume/create -> N x (add_frame..., save_episode) -> finalize
              -> [snapshot meta + file manifest = commit] -> [clear mark]

A run that finds the in-progress mark rolls back to the last commit (restores info/stats/tasks,
deletes files not in the manifest) before writing again, so finished sessions are never corrupted.
Loaders call `check_not_interrupted` first, so a dataset left mid-session says what to do.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from cosmos3_robot.files import write_json_atomic

STATE_DIR = ".cosmos3_record"
_KNOWN_TOP = {"meta", "data", "videos", "images", STATE_DIR}
_SNAPSHOT_META = ("info.json", "stats.json", "tasks.parquet")
_TRACKED_DIRS = ("data", "videos", "meta/episodes")


def tracked_files(root: Path) -> list[str]:
    out = []
    for d in _TRACKED_DIRS:
        base = root / d
        if base.is_dir():
            out += [p.relative_to(root).as_posix() for p in base.rglob("*") if p.is_file()]
    return sorted(out)


def commit(root: Path, total_episodes: int) -> None:
    state = root / STATE_DIR
    state.mkdir(exist_ok=True)
    snap = state / f"commit-{total_episodes:06d}-{time.time_ns()}"
    snap.mkdir()
    for name in _SNAPSHOT_META:
        if (root / "meta" / name).exists():
            shutil.copy2(root / "meta" / name, snap / name)
    (snap / "manifest.json").write_text(json.dumps({"files": tracked_files(root)}))
    # atomic: the commit point
    write_json_atomic(state / "COMMITTED", {"snapshot": snap.name, "total_episodes": total_episodes})
    for old in state.glob("commit-*"):
        if old.name != snap.name:
            shutil.rmtree(old, ignore_errors=True)


def wipe(root: Path) -> None:
    extra = [p.name for p in root.iterdir() if p.name not in _KNOWN_TOP and not p.name.startswith("tmp")]
    if extra:
        raise ValueError(
            f"{root}: holds files that are not part of a LeRobot dataset ({extra}); choose another --root"
        )
    shutil.rmtree(root)


def rollback(root: Path) -> None:
    """Bring `root` back to its last committed state if a session did not finish."""
    state = root / STATE_DIR
    if not (state / "IN_PROGRESS").exists():
        return
    pointer = state / "COMMITTED"
    if not pointer.exists():  # the first session never committed: nothing worth keeping
        wipe(root)
        return
    snap = state / json.loads(pointer.read_text())["snapshot"]
    keep = set(json.loads((snap / "manifest.json").read_text())["files"])
    for rel in tracked_files(root):
        if rel not in keep:
            (root / rel).unlink()
    for name in _SNAPSHOT_META:
        if (snap / name).exists():
            shutil.copy2(snap / name, root / "meta" / name)
    for p in root.iterdir():  # staging images and encoder temp dirs of the dead session
        if p.is_dir() and (p.name == "images" or p.name.startswith("tmp")):
            shutil.rmtree(p)
    (state / "IN_PROGRESS").unlink()


def close_session(dataset, root: Path) -> None:
    if dataset.has_pending_frames():
        dataset.clear_episode_buffer()
    dataset.finalize()
    commit(root, dataset.meta.total_episodes)
    (root / STATE_DIR / "IN_PROGRESS").unlink(missing_ok=True)


REPO_ID_FILE = "repo_id"  # in STATE_DIR: the repo id the dataset was created under


def recorded_repo_id(root: str | Path) -> str | None:
    """The repo id `record` / `label` created the dataset at `root` under (LeRobot's own files do
    not keep it), or None for a dataset they did not write."""
    path = Path(root) / STATE_DIR / REPO_ID_FILE
    return path.read_text().strip() if path.is_file() else None


def check_repo_id(root: Path, repo_id: str | None) -> str:
    """The repo id to write `root` under: the recorded one (which a given other one contradicts), else
    the given one, else local/<root name>."""
    recorded = recorded_repo_id(root) if root.exists() else None
    if recorded is None:
        return repo_id or f"local/{root.name}"
    if repo_id is not None and repo_id != recorded:
        raise ValueError(
            f"dataset {root} was created as repo id {recorded!r}, not {repo_id!r}; pass --repo-id {recorded} "
            "(or leave it out) to add to it, or choose another root"
        )
    return recorded


def open_session(root: Path, repo_id: str, fps: int, features: dict, robot_type: str | None):
    """A LeRobot writer on `root` (created, or resumed after the last commit), marked in progress."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    if root.exists():
        (root / STATE_DIR / "IN_PROGRESS").touch()
        return LeRobotDataset.resume(repo_id, root=root)
    dataset = LeRobotDataset.create(repo_id, fps, features, root=root, robot_type=robot_type, use_videos=True)
    (root / STATE_DIR).mkdir(exist_ok=True)
    (root / STATE_DIR / REPO_ID_FILE).write_text(repo_id + "\n")
    (root / STATE_DIR / "IN_PROGRESS").touch()
    return dataset


def check_not_interrupted(root: str | Path) -> None:
    """Raise, saying how to repair it, if a writer was killed mid-session on `root`."""
    root = Path(root)
    if (root / STATE_DIR / "IN_PROGRESS").exists():
        raise ValueError(
            f"dataset {root} was left mid-write by an interrupted `record` or `label` (its last session is "
            "unfinished); run the same command again to roll it back to its last committed episode and "
            "continue"
        )


AV_LOG_ERROR = 16  # FFmpeg's libavutil/log.h


def ffmpeg_log_level():
    """PyAV's bundled libavutil (for `av_log_get_level` / `av_log_set_level`), or None.

    LeRobot's encoder calls `av.logging.restore_default_callback()` after every video; from then on
    FFmpeg's own callback prints whatever passes FFmpeg's global level (INFO by default: the mp4
    muxer's "Starting second pass" line per episode). PyAV's `set_level` does not touch that global
    level, so it is set here through the same shared library PyAV loaded."""
    try:
        import av
    except ImportError:  # pragma: no cover - av is a LeRobot dependency
        return None
    libs = sorted((Path(av.__file__).resolve().parent.parent / "av.libs").glob("libavutil-*.so*"))
    if not libs:
        return None
    try:
        return ctypes.CDLL(str(libs[0]))
    except OSError:  # pragma: no cover - an unusual PyAV build
        return None


@contextlib.contextmanager
def quiet_writer() -> Iterator[None]:
    """Silence what LeRobot's writer prints per episode (a `datasets` "Map" bar, libav's and
    libsvtav1's lines), so a command's own progress bar stays readable; restored afterwards.

    LeRobot's `SuppressProgressBars` re-enables `datasets`' bars when it exits, whatever they were
    before; inside this block that re-enabling is a no-op (the CLI also sets
    HF_DATASETS_DISABLE_PROGRESS_BARS=1 before `datasets` is imported, which has priority)."""
    import datasets
    import datasets.utils.logging as ds_logging

    os.environ.setdefault("SVT_LOG", "1")  # libsvtav1 (LeRobot's default codec): errors only
    bars_were_on = not datasets.are_progress_bars_disabled()
    enable = ds_logging.enable_progress_bar
    datasets.disable_progress_bars()
    ds_logging.enable_progress_bar = lambda: None
    try:
        import av

        av.logging.set_level(av.logging.ERROR)
    except ImportError:  # pragma: no cover - av is a LeRobot dependency
        pass
    libav = ffmpeg_log_level()
    if libav is not None:
        libav_level = libav.av_log_get_level()
        libav.av_log_set_level(AV_LOG_ERROR)
    try:
        yield
    finally:
        if libav is not None:
            libav.av_log_set_level(libav_level)
        ds_logging.enable_progress_bar = enable
        if bars_were_on:
            datasets.enable_progress_bars()
