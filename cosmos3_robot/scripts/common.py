"""What every command shares: its output folder (owned by one run, resumable), the run's provenance
(command line, commit, time), atomic JSON results, and latency statistics."""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from cosmos3_robot.files import write_json_atomic
from cosmos3_robot.infra.cpu_pack import TRAINING_DTYPES

RUN_FILE = "run.json"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every command's --help: the description as written, and each option's default after its help
    (unless the help already gives it, or there is none to give: required, None, a flag)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "default" in text
            or action.required
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def commit() -> str:
    """The git commit of this checkout (with '+dirty' when it has changes), or 'unknown'."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (sha + ("+dirty" if dirty else "")) if sha else "unknown"


def provenance(command: str, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "command": command,
        "argv": ["cosmos3-robot", *sys.argv[1:]] if sys.argv and "cosmos3" in sys.argv[0] else None,
        "config": config,
        "commit": commit(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def run_config(args, skip: tuple[str, ...] = ("threads", "no_progress")) -> dict[str, Any]:
    """A command's parsed options as the JSON its run is known by (paths as strings), less `skip`:
    the options that do not change what the run computes."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k not in skip}


def claim_output(out: Path, command: str, config: dict[str, Any]) -> dict[str, Any]:
    """Make `out` this run's folder. A folder written by the same command with the same config is
    resumed; one written by another command or other options, or one with foreign files, is
    refused with a message that says so."""
    out = Path(out)
    run_file = out / RUN_FILE
    config = json.loads(json.dumps(config, default=str))
    if run_file.exists():
        try:
            prev = json.loads(run_file.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ValueError(f"{run_file} is corrupt; remove {out} or choose another --out") from None
        if prev.get("command") != command or prev.get("config") != config:
            changed = sorted(
                k
                for k in set(config) | set(prev.get("config", {}))
                if prev.get("config", {}).get(k) != config.get(k)
            )
            what = (
                f"`{prev.get('command')}`"
                if prev.get("command") != command
                else f"other options: {', '.join(changed)}"
            )
            raise ValueError(
                f"--out {out} belongs to another run ({what}); choose another --out, or repeat that run's "
                "options to resume it"
            )
        return prev
    if out.exists() and any(out.iterdir()):
        raise ValueError(
            f"--out {out} exists and holds files of something else; choose a new or empty folder"
        )
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance(command, config)
    write_json_atomic(run_file, prov)
    return prov


def latency_stats(ms: list[float]) -> dict[str, float | int | None]:
    """p50 / p95 / min / max of per-call latencies in milliseconds."""
    if not ms:
        return {"calls": 0, "p50_ms": None, "p95_ms": None, "min_ms": None, "max_ms": None}
    a = np.asarray(ms, dtype=np.float64)
    return {
        "calls": int(a.size),
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
    }


def dataclass_options(
    parser: argparse.ArgumentParser,
    cls,
    helps: dict[str, str],
    required: tuple[str, ...] = ("out", "root"),
    many: tuple[str, ...] = ("root",),
) -> None:
    """One --option per field of the dataclass `cls` (int, float or str by its annotation), with the
    field's default; `required` fields have none, `many` take one or more values."""
    import dataclasses

    for field in dataclasses.fields(cls):
        name = field.name
        kind = int if field.type.startswith("int") else float if field.type.startswith("float") else str
        kwargs: dict[str, Any] = {"type": kind, "help": helps[name]}
        if name in required:
            kwargs["required"] = True
        else:
            kwargs["default"] = field.default
        if name in many:
            kwargs["nargs"] = "+"
        if name == "dtype":
            kwargs["choices"] = TRAINING_DTYPES
        parser.add_argument("--" + name.replace("_", "-"), **kwargs)


SMALL_TRAINER_HELP = {
    "root": "local LeRobot dataset folder(s), read offline",
    "image_key": "the dataset's image key",
    "holdout_episodes": "last episodes of each dataset held out for evaluation",
    "lr": "peak learning rate (linear warmup, cosine to 5 %%)",
    "warmup": "warmup steps",
    "steps": "optimiser steps in all (a resumed run continues to this count; the cosine runs over it)",
    "max_minutes": "stop (and save) once the run has spent this wall time, resumes included (a rerun of a "
    "finished run trains nothing more)",
    "eval_every": "steps between held-out evaluations",
    "save_every": "steps between checkpoints",
    "width": "channels of the first conv (a multiple of 8)",
    "keypoints": "spatial-softmax keypoints",
    "dtype": "autocast dtype of the training steps; auto: bf16 where the CPU has oneDNN bf16 kernels (about 4x "
    "faster than fp32 there), else fp32 (bf16 is ~40x slower on an AVX2-only CPU)",
    "seed": "seed of the weights and of the batch sampler",
}


def small_trainer_main(
    argv, command: str, doc: str, cls, helps: dict[str, str], train, shown: tuple[str, ...]
) -> int:
    """The main of `train-estimator` and `train-labeller`: options from the config dataclass `cls`
    (help texts: `helps` over SMALL_TRAINER_HELP), `train(cfg, record, log)`, then the `shown` keys
    of its result as one JSON line."""
    p = argparse.ArgumentParser(
        prog=f"cosmos3-robot {command}", description=doc, formatter_class=HelpFormatter
    )
    dataclass_options(p, cls, {**SMALL_TRAINER_HELP, **helps})
    add_threads_option(p)
    args = p.parse_args(argv)
    apply_threads(args.threads)
    cfg = cls(**{k: v for k, v in vars(args).items() if k != "threads"})
    result = train(
        cfg, provenance(command, run_config(args, skip=("threads",))), log=lambda m: print(m, flush=True)
    )
    print(json.dumps({k: result.get(k) for k in shown}))
    return 0


def add_threads_option(parser) -> None:
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )


def apply_threads(threads: int | None) -> None:
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    import torch

    torch.set_num_threads(threads)


def success_cell(summary: dict) -> str:
    """`eval.metrics.success_summary`'s dict as a table cell: '7/50 = 14% (7%-26%)'."""
    lo, hi = summary["wilson95"]
    return f"{summary['successes']}/{summary['episodes']} = {summary['success_rate']:.0%} ({lo:.0%}-{hi:.0%})"


def parse_modes(items: list[str]) -> dict[str, float]:
    """`MODE=WEIGHT ...` -> generator.modes; an unknown mode or a bad weight refused."""
    from cosmos3_robot.tasks import TASKS

    modes = {}
    for item in items:
        name, sep, weight = item.partition("=")
        try:
            w = float(weight) if sep else float("nan")
        except ValueError:
            w = float("nan")
        if name not in TASKS or not (math.isfinite(w) and w >= 0):
            raise ValueError(
                f"--modes {item!r}: give MODE=WEIGHT, MODE one of {', '.join(sorted(TASKS))}, WEIGHT >= 0"
            )
        modes[name] = w
    if sum(modes.values()) <= 0:
        raise ValueError(f"--modes {' '.join(items)}: at least one mode needs a positive weight")
    return modes
