"""`cosmos3-robot label`: label action-free video with actions, into a new LeRobot dataset.

    cosmos3-robot label --model runs/push/model --source videos/ --out data/push_labelled
    cosmos3-robot label --model runs/push/model --source data/push --out data/push_relabelled --check
    cosmos3-robot label --labeller runs/labeller/labeller --source videos/ --out data/labelled

Reads: a model folder written by `cosmos3-robot train` (trained with actions; its inverse-dynamics
mode labels), or with --labeller the frame-to-frame labeller `train-labeller` wrote
(`encoders/inverse_dynamics.py`: any frame rate, rescaled to its own), and --source: a folder
of videos (.mp4/.webm/...; `<name>.txt` beside a video holds its task text) or a LeRobot dataset
(its actions are ignored). Frames must be square at the model's image size (or pass --resize) and
the video at the model's frame rate.
Writes --out, a LeRobot v3 dataset written with LeRobot's own writer: per frame `observation.image`,
`action` (inverse dynamics over overlapping windows, averaged; see policies/labelling.py),
`label_confidence` (1 when all windows and samples agree; not written with --labeller, which is
deterministic), and `observation.state` and the task text
when the source has them. `meta/cosmos3_label.json` holds the run's config, commit, speed (frames
labelled per second, and the VAE encode alone) and, with --check, per-dimension MSE and R² against the
source's true actions beside the mean-action baseline.
Resumable: episodes are committed one at a time; a killed run loses only the episodes it was
labelling, and the same command continues after the last committed one.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from cosmos3_robot.files import write_json_atomic
from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    provenance,
    run_config,
)

if TYPE_CHECKING:
    from cosmos3_robot.policies.labelling import EpisodeLabels

REPORT = "meta/cosmos3_label.json"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot label", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument("--model", type=Path, default=None, help="model folder written by `cosmos3-robot train`")
    p.add_argument(
        "--labeller",
        type=Path,
        default=None,
        help="instead of --model: the labeller/ folder `cosmos3-robot train-labeller` wrote",
    )
    p.add_argument("--source", type=Path, required=True, help="folder of videos, or a LeRobot dataset folder")
    p.add_argument(
        "--out", type=Path, required=True, help="the labelled LeRobot dataset to write (or continue)"
    )
    p.add_argument(
        "--repo-id",
        default=None,
        help="LeRobot repo id of the new dataset, kept beside it so loaders find it (default: local/<out name>)",
    )
    p.add_argument("--image-key", default="observation.image", help="the source dataset's image key")
    p.add_argument("--task", default="", help="task text for videos without a <name>.txt (default: empty)")
    p.add_argument(
        "--resize", action="store_true", help="resize square frames of another size to the model's"
    )
    p.add_argument(
        "--stride",
        type=int,
        default=None,
        help="frames between window starts (default: half the actions a window's frames show)",
    )
    p.add_argument(
        "--samples", type=int, default=2, help="inverse-dynamics samples per window (default: %(default)s)"
    )
    p.add_argument("--steps", type=int, default=10, help="denoising steps (default: %(default)s)")
    p.add_argument("--batch", type=int, default=16, help="windows per model call (default: %(default)s)")
    p.add_argument(
        "--group",
        type=int,
        default=4,
        help="episodes whose windows are batched together (default: %(default)s)",
    )
    p.add_argument(
        "--max-episodes", type=int, default=None, help="label only the first N episodes of the source"
    )
    p.add_argument("--check", action="store_true", help="compare with the source's true actions (MSE, R²)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_threads_option(p)
    return p


@dataclass
class Job:
    """What `label` needs of either labeller: the frames it reads, the labels it writes."""

    name: str  # "the model" or "the labeller", in error messages
    image_size: int
    fps: float | None  # the rate the frames must come at; None: any (the labeller rescales)
    action_dim: int
    action_mean: np.ndarray  # the training mean: the --check baseline
    min_frames: int  # shorter episodes are padded (and listed in the report)
    confidence: bool  # writes label_confidence
    label: Callable[[list[np.ndarray], list[str], list[float]], list[EpisodeLabels]]
    encode_seconds: Callable[[], float] | None  # seconds its VAE has spent encoding (None: no VAE)


def world_job(args) -> Job:
    from cosmos3_robot.policies.labelling import EpisodeLabeller
    from cosmos3_robot.policies.runners import SamplingConfig
    from cosmos3_robot.policies.world_model import WorldModel

    world = WorldModel.from_folder(args.model)
    labeller = EpisodeLabeller(world, args.stride, args.samples, args.batch, SamplingConfig(steps=args.steps))
    g = world.geometry
    return Job("the model", g.image_size, g.fps, world.actions.dim,
               np.asarray(world.actions.normalizer.stats[world.actions.key].mean, dtype=np.float64),
               (g.num_frames - 1) * g.frame_step + 1, True,
               lambda frames, tasks, fps: labeller.label(frames, tasks), lambda: world.encode_seconds)  # fmt: skip


def labeller_job(args) -> Job:
    from cosmos3_robot.encoders.inverse_dynamics import load_labeller
    from cosmos3_robot.policies.labelling import EpisodeLabels

    idm = load_labeller(args.labeller)
    c = idm.config

    def label(frames, tasks, fps) -> list[EpisodeLabels]:
        return [EpisodeLabels(idm.label_episode(f, r), None, None) for f, r in zip(frames, fps, strict=True)]

    mean = idm.mean.double().numpy()
    return Job("the labeller", c.image_size, None, c.action_dim, mean, 2, False, label, None)  # no VAE


def output_features(job: Job, source) -> dict:
    names = None
    if source.dataset is not None and source.has_actions:
        names = source.dataset.meta.features[source.action_key].get("names")
    dim, size = job.action_dim, job.image_size
    feats = {
        "observation.image": {
            "dtype": "video",
            "shape": (size, size, 3),
            "names": ["height", "width", "channels"],
        },
        "action": {"dtype": "float32", "shape": (dim,), "names": names or [f"a{i}" for i in range(dim)]},
    }
    if job.confidence:
        feats["label_confidence"] = {"dtype": "float32", "shape": (1,), "names": ["confidence"]}
    if source.has_state:
        st = source.dataset.meta.features[source.state_key]
        feats["observation.state"] = {
            "dtype": "float32",
            "shape": tuple(st["shape"]),
            "names": st.get("names"),
        }
    return feats


def prepare(job: Job, ep, resize: bool) -> np.ndarray:
    """Frames at the labeller's size and rate, or a clear error."""
    import torch

    from cosmos3_robot.processors.frames import resize_frames

    if job.fps is not None and abs(ep.fps - job.fps) > 1e-3 * job.fps:
        raise ValueError(
            f"{ep.name} is at {ep.fps:g} fps; the model was trained at {job.fps:g} (resample the video, or "
            "label it with a `train-labeller` labeller, which takes any rate)"
        )
    h, w = ep.frames.shape[1:3]
    size = job.image_size
    if (h, w) != (size, size):
        if not resize or h != w:
            raise ValueError(
                f"{ep.name} has {h}x{w} frames; {job.name} was trained on {size}x{size}"
                + (" (pass --resize)" if h == w else " (crop them square first)")
            )
        ep.frames = (
            resize_frames(torch.from_numpy(ep.frames).permute(0, 3, 1, 2), size).permute(0, 2, 3, 1).numpy()
        )
    if len(ep.frames) < 2:
        raise ValueError(f"{ep.name} has {len(ep.frames)} frame(s); a label needs a transition (>= 2 frames)")
    return ep.frames


def _video_length(path) -> int:
    """Frames of a video file: the container's count when it has one (no decoding), else decoded."""
    import av

    with av.open(str(path)) as c:
        counted = c.streams.video[0].frames
        return counted if counted > 0 else sum(1 for _ in c.decode(video=0))


def write_episode(root, repo_id, fps, features, ep, labels) -> None:
    from cosmos3_robot.datasets.writer import close_session, open_session, rollback

    dataset = open_session(root, repo_id, fps, features, None)
    try:
        for t in range(len(ep.frames)):
            frame = {"observation.image": ep.frames[t], "action": labels.actions[t], "task": ep.task}
            if "label_confidence" in features:
                frame["label_confidence"] = labels.confidence[t : t + 1]
            if "observation.state" in features:
                frame["observation.state"] = ep.state[t]
            dataset.add_frame(frame)
        dataset.save_episode()
    except BaseException:
        import contextlib

        with contextlib.suppress(Exception):
            dataset.finalize()
        rollback(root)
        raise
    close_session(dataset, root)


def check_report(true: list[np.ndarray], pred: list[np.ndarray], mean: np.ndarray) -> dict:
    from cosmos3_robot.eval.metrics import action_errors

    return action_errors(np.concatenate(pred), np.concatenate(true), mean)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cosmos3_robot.files import exclusive_lock

    with exclusive_lock(args.out, "label"):  # one run per output folder at a time
        return _run(args)


def resume_point(out: Path, repo_id: str, config: dict) -> tuple[int, dict]:
    """(episodes already committed, the report to continue) for --out; refuses a folder that another
    run (or another command) wrote."""
    from cosmos3_robot.datasets.writer import rollback

    report_path = out / REPORT
    done = 0
    if out.exists():
        prev = json.loads(report_path.read_text()) if report_path.exists() else None
        if prev is None or prev.get("config") != config:
            raise ValueError(
                f"--out {out} exists and was not written by a `label` run with these options; choose another "
                "--out, or repeat that run's options to continue it"
            )
        rollback(out)
        from lerobot.datasets.dataset_metadata import LeRobotDatasetMetadata

        done = LeRobotDatasetMetadata(repo_id, root=out).total_episodes  # what is committed
        report = {**prev, "episodes_done": done}
    else:
        report = {
            **provenance("label", config),
            "episodes_done": 0,
            "frames": 0,
            "seconds": 0.0,
            "encode_seconds": 0.0,
        }
    return done, report


def _run(args: argparse.Namespace) -> int:
    apply_threads(args.threads)
    from tqdm import tqdm

    from cosmos3_robot.datasets.episodes import open_source, read_episodes
    from cosmos3_robot.datasets.writer import quiet_writer

    if (args.model is None) == (args.labeller is None):
        raise ValueError(
            "label needs exactly one of --model (a trained world model) and --labeller (train-labeller's)"
        )
    job = world_job(args) if args.model is not None else labeller_job(args)
    source = open_source(args.source, args.image_key)
    if source.files is not None and all(_video_length(f) < job.min_frames for f in source.files):
        raise ValueError(
            f"every video in {args.source} is shorter than one clip of the model ({job.min_frames} frames)"
        )
    if args.check and not source.has_actions:
        raise ValueError(f"--check needs true actions, and {args.source} has none")
    if args.group < 1 or (args.max_episodes is not None and args.max_episodes < 1):
        raise ValueError(f"--group and --max-episodes must be >= 1, got {args.group} and {args.max_episodes}")
    from cosmos3_robot.datasets.writer import check_repo_id

    out = args.out
    repo_id = check_repo_id(out, args.repo_id)
    config = run_config(args)
    report_path = out / REPORT
    done, report = resume_point(out, repo_id, config)
    features = output_features(job, source)
    fps = None  # the output's rate: the source's (one rate per output dataset)
    total = source.num_episodes if args.max_episodes is None else min(args.max_episodes, source.num_episodes)
    todo = list(range(done, total))
    bar = tqdm(total=total, initial=done, desc="label", unit="ep", disable=args.no_progress)
    true, pred = [], []
    for i in range(0, len(todo), args.group):
        eps = list(read_episodes(source, todo[i : i + args.group], args.task))
        frames = [prepare(job, ep, args.resize) for ep in eps]
        for ep in eps:
            fps = fps or int(round(ep.fps))
            if abs(ep.fps - fps) > 1e-3 * fps:
                raise ValueError(f"{ep.name} is at {ep.fps:g} fps and earlier episodes at {fps}: one output "
                                 "dataset has one frame rate; label them into separate --out folders")  # fmt: skip
            if len(ep.frames) < job.min_frames:  # its windows repeat the last frame: labelled, and reported
                report.setdefault("padded_episodes", []).append(ep.index)
                bar.write(f"warning: {ep.name} has {len(ep.frames)} frames, fewer than one clip of the model "
                          f"({job.min_frames}); its windows repeat its last frame")  # fmt: skip
        encoded = job.encode_seconds or (lambda: 0.0)
        t0, enc0 = time.perf_counter(), encoded()
        labels = job.label(frames, [ep.task for ep in eps], [ep.fps for ep in eps])
        report["seconds"] += time.perf_counter() - t0
        report["encode_seconds"] += encoded() - enc0
        for ep, lab in zip(eps, labels, strict=True):
            with quiet_writer():
                write_episode(out, repo_id, fps, features, ep, lab)
            report["episodes_done"] += 1
            report["frames"] += len(ep.frames)
            write_json_atomic(report_path, report)
            if args.check:
                true.append(ep.actions)
                pred.append(lab.actions)
            bar.update(1)
        report["frames_per_second"] = report["frames"] / max(report["seconds"], 1e-9)
        if job.encode_seconds is not None:
            report["vae_encode_frames_per_second"] = report["frames"] / max(report["encode_seconds"], 1e-9)
        write_json_atomic(report_path, report)
    bar.close()
    if args.check and true:
        report["check"] = {
            **check_report(true, pred, job.action_mean),
            "episodes": len(true),
        }  # labelled by this call
        write_json_atomic(report_path, report)
        c = report["check"]
        print(f"check: action MSE {c['mse']:.4f} (mean action {c['mean_action_mse']:.4f}), R² {c['r2']:.3f}; "
              f"per dim MSE {np.round(c['mse_per_dim'], 4).tolist()}, R² {np.round(c['r2_per_dim'], 3).tolist()}")  # fmt: skip
    vae = report.get("vae_encode_frames_per_second")
    print(f"{out}: {report['episodes_done']} episodes labelled, {report.get('frames_per_second', 0):.1f} frames/s"
          + (f" (VAE encode alone {vae:.1f} frames/s)" if vae is not None else "") + f"; {report_path}")  # fmt: skip
    return 0
