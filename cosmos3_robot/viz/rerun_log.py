"""Rerun recordings (`.rrd`) of ground truth against prediction, on one real-time timeline.

    write_comparison("out.rrd", truth, pred, fps=10, actions_true=a, actions_pred=b, action_hz=10)

Frames land at their timestamps in seconds (`time` timeline), so video at any fps and actions at
their own rate line up as they do on the model's RoPE time axis. Open with `rerun out.rrd`.
rerun-sdk is imported inside the function: it is only needed when a recording is written.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import numpy as np


def _hwc(frames) -> np.ndarray:
    """(T, 3, H, W) or (T, H, W, 3) uint8 -> (T, H, W, 3)."""
    x = np.asarray(frames)
    if x.dtype != np.uint8:
        raise ValueError(f"frames must be uint8 images, got {x.dtype}")
    if x.ndim != 4:
        raise ValueError(f"frames must have shape (T, 3, H, W) or (T, H, W, 3), got {x.shape}")
    return x.transpose(0, 2, 3, 1) if x.shape[1] == 3 and x.shape[-1] != 3 else x


def write_comparison(
    path: str | Path,
    truth,
    pred,
    fps: float,
    actions_true=None,
    actions_pred=None,
    action_hz: float | None = None,
    name: str = "cosmos3_robot",
) -> Path:
    """Log ground-truth and predicted frames (and optionally actions) to an .rrd file, atomically."""
    truth, pred = _hwc(truth), _hwc(pred)
    if truth.shape != pred.shape:
        raise ValueError(f"truth {truth.shape} and prediction {pred.shape} must have the same shape")
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    with _recording(path, name) as rec:
        _log_comparison(rec, truth, pred, fps, actions_true, actions_pred, action_hz)
    return Path(path)


@contextlib.contextmanager
def _recording(path: str | Path, name: str):
    """A rerun recording stream saved to `path` atomically (renamed into place when done)."""
    import rerun as rr

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    rec = rr.RecordingStream(name)
    rec.save(str(tmp))
    yield rec
    rec.flush()
    rec.disconnect()
    os.replace(tmp, path)


def _log_comparison(rec, truth, pred, fps, actions_true, actions_pred, action_hz) -> None:
    import rerun as rr

    for t in range(truth.shape[0]):
        rr.set_time("time", duration=t / fps, recording=rec)
        rec.log("video/truth", rr.Image(truth[t]))
        rec.log("video/prediction", rr.Image(pred[t]))
        err = np.abs(truth[t].astype(np.int16) - pred[t].astype(np.int16)).mean()
        rec.log("video/abs_error", rr.Scalars(float(err)))
    if actions_true is not None:
        hz = action_hz or fps
        a_true = np.asarray(actions_true, dtype=np.float64)
        a_pred = None if actions_pred is None else np.asarray(actions_pred, dtype=np.float64)
        for i in range(a_true.shape[0]):
            rr.set_time("time", duration=i / hz, recording=rec)
            for d in range(a_true.shape[1]):
                rec.log(f"action/{d}/truth", rr.Scalars(float(a_true[i, d])))
                if a_pred is not None:
                    rec.log(f"action/{d}/prediction", rr.Scalars(float(a_pred[i, d])))


def write_rollout(
    path: str | Path, frames, fps: float, actions=None, chunks=(), name: str = "cosmos3_robot"
) -> Path:
    """One closed-loop episode: the realised frames and actions at their times in seconds, and for
    every re-plan the frames the policy imagined, at the times they stand for, beside the error
    against what happened (`chunks`: objects with `step` and `imagined` (K, H, W, 3) or None)."""

    frames = _hwc(frames)
    if fps <= 0:
        raise ValueError(f"fps must be > 0, got {fps}")
    with _recording(path, name) as rec:
        _log_rollout(rec, frames, fps, actions, chunks)
    return Path(path)


def _log_rollout(rec, frames, fps, actions, chunks) -> None:
    import rerun as rr

    for t in range(frames.shape[0]):
        rr.set_time("time", duration=t / fps, recording=rec)
        rec.log("video/realised", rr.Image(frames[t]))
        if actions is not None and t < len(actions):
            for d, v in enumerate(np.asarray(actions[t], dtype=np.float64)):
                rec.log(f"action/{d}", rr.Scalars(float(v)))
    for c in chunks:
        if c.imagined is None:
            continue
        imagined = _hwc(c.imagined)
        for k in range(imagined.shape[0]):
            t = c.step + 1 + k
            rr.set_time("time", duration=t / fps, recording=rec)
            rec.log("video/imagined", rr.Image(imagined[k]))
            if t < frames.shape[0] and frames[t].shape == imagined[k].shape:
                err = np.abs(frames[t].astype(np.int16) - imagined[k].astype(np.int16)).mean()
                rec.log("video/imagined_abs_error", rr.Scalars(float(err)))
