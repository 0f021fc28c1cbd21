"""`cosmos3-robot benchmark policies`: our policy against LeRobot's ACT and Diffusion Policy on the same
demonstrations, the same wall-clock training budget and the same held-out seeds. (Two more tables have
their own options: `benchmark imagination`, the world model as a policy evaluator, and `benchmark
labels`, policies trained on inverse-dynamics labels.)

    cosmos3-robot benchmark policies --variant smoke --out runs/bench-smoke          (about 8 minutes)
    cosmos3-robot benchmark policies --variant full --out runs/bench --vae VAE_DIR  (see benchmarks/README.md)
    cosmos3-robot benchmark policies --variant metaworld --out runs/bench-mw       (13 tasks, ~75 min each)

For every task: `record` the scripted expert with injected noise (env seeds 0 .. demos-1), train each
arm on that dataset for --minutes of training steps (ours: `train` with `minutes=`; ACT / Diffusion
Policy: `train-baseline --minutes`), then `rollout` every arm on the same --episodes env seeds
10000, 10001, ... (disjoint from the demonstrations). Every arm executes --execute actions of each
chunk before re-planning (--ensemble: a plan every step, overlapping chunks averaged). The arms:
  ours            our model on the camera (a frozen video VAE) and the proprioceptive state
  ours-estimator  a state estimator (`train-estimator`, --estimator-minutes of the budget) reads the
                  scene state off the frame; our model, trained for the rest of the budget on the
                  proprioceptive and the recorded scene state (a seeded random VAE: the frame reaches
                  it through the estimator), acts on the estimate (`rollout --estimator`); the
                  simulator's state is never read at run time
  act, diffusion  LeRobot's ACT and Diffusion Policy on the camera and the proprioceptive state
Our arms train generator.modes --modes (default: the trainer's mix of the four design modes).

Writes into --out:
  results.json         per task and arm: success with a Wilson 95 % interval, control latency p50/p95
                       per chunk, training steps and seconds; the variant, seeds and commit
  table.md             the same as a Markdown table
  record.json          results.json with every rollout's episodes and every arm's training log, whole
  TASK/data            the demonstrations (a LeRobot dataset; or --dataset ENV=ROOT's own)
  TASK/ARM/            the arm's training run; TASK/ARM/rollout/results.json has every episode
                       (ours-estimator: TASK/ours-estimator/{estimator,policy}/ and its rollout/)
Every stage resumes: the same command continues where a stopped run left off, and a larger
--episodes extends the rollouts. The `ours` arm needs a frozen video VAE: --vae (a `train-vae`
folder), or in the smoke variant a seeded random one (its figures show that the harness runs,
nothing more).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from cosmos3_robot.envs import METAWORLD_IDS
from cosmos3_robot.scripts.bench_record import slug, write_results
from cosmos3_robot.scripts.bench_table import table, write_table
from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    claim_output,
    parse_modes,
)

ARMS = ("ours", "ours-estimator", "act", "diffusion")
BOTH_STATES = "observation.state+observation.environment_state"  # what ours-estimator's model reads
EVAL_SEED = 10_000  # rollouts use env seeds EVAL_SEED + e; demonstrations use 0 .. demos - 1
MIN_MINUTES = 0.25  # below this no arm gets through its first steps (a sim-small step is ~0.5 s)


@dataclasses.dataclass
class Variant:
    tasks: list[str]
    demos: int  # demonstrations recorded per task
    episodes: int  # held-out rollouts per task and arm
    minutes: float  # training budget per task and arm
    image_size: int
    model: str  # our model preset
    latent_channels: int | None  # the frozen VAE's, when not the preset's
    batch_size: int
    arms: tuple[str, ...] = ("ours", "act", "diffusion")  # the default of --arms
    execute: int = 5
    chunk: int = 10  # actions per chunk (1 s at 10 Hz)
    noise: float = 0.1
    modes: dict[str, float] | None = None  # our arms' generator.modes; None = the trainer's default
    estimator_minutes: float = 5.0  # ours-estimator: the estimator's share of `minutes`
    estimator_holdout: int = 10  # ours-estimator: demonstrations held out to score the estimator
    state_noise: float = 0.0  # our arms' generator.state_noise (std, normalised units)
    ensemble: float | None = None  # every arm's temporal ensembling weight (ACT's); None: --execute


VARIANTS = {
    "smoke": Variant(["cosmos3_robot/Reach-v0"], demos=8, episodes=3, minutes=0.75, image_size=64,
                     model="tiny", latent_channels=None, batch_size=8, estimator_minutes=0.25, estimator_holdout=1),
    "full": Variant(["cosmos3_robot/Reach-v0", "cosmos3_robot/Push-v0"], demos=150, episodes=50, minutes=15.0,
                    image_size=128, model="sim-small", latent_channels=48, batch_size=16, noise=0.2),
    # AVDC's 11 Meta-World tasks, then reach and push; the settings of benchmarks/README.md's table.
    "metaworld": Variant(list(METAWORLD_IDS), demos=100, episodes=50, minutes=20.0, image_size=128,
                         model="sim-small", latent_channels=48, batch_size=16,
                         arms=("ours-estimator", "act", "diffusion"), execute=2, modes={"action_policy": 1.0}),
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot benchmark", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument(
        "table",
        choices=["policies", "imagination", "labels"],
        help="which table (`benchmark imagination --help` and `benchmark labels --help` list their own options)",
    )
    p.add_argument(
        "--variant", choices=sorted(VARIANTS), default="smoke", help="a preset of the settings below"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder (resumed when it holds this run)")
    p.add_argument(
        "--vae", type=Path, default=None, help="frozen VAE folder for our arm (`train-vae`'s vae/)"
    )
    p.add_argument("--tasks", nargs="+", default=None, help="env ids (default: the variant's)")
    p.add_argument(
        "--arms", nargs="+", choices=ARMS, default=None, help="policies to compare (default: the variant's)"
    )
    p.add_argument("--demos", type=int, default=None, help="demonstrations per task (default: the variant's)")
    p.add_argument("--episodes", type=int, default=None, help="held-out rollouts per task and arm")
    p.add_argument("--minutes", type=float, default=None, help="training budget per task and arm")
    p.add_argument(
        "--estimator-minutes", type=float, default=None,
        help="ours-estimator: minutes of the budget that train the state estimator (default: the variant's)",
    )  # fmt: skip
    p.add_argument(
        "--estimator-holdout", type=int, default=None,
        help="ours-estimator: demonstrations held out to score the estimator (default: the variant's)",
    )  # fmt: skip
    p.add_argument(
        "--modes", nargs="+", default=None, metavar="MODE=WEIGHT",
        help="generator.modes of our arms, e.g. policy=1 or action_policy=1 (default: the variant's)",
    )  # fmt: skip
    p.add_argument(
        "--ensemble", type=float, default=None, metavar="M",
        help="every arm re-plans each step and averages its overlapping chunks, weights exp(-M*i), i=0 the "
        "oldest (weighs most; M=0.01 is ACT's), instead of executing --execute actions per chunk; ours "
        "and ACT only, not Diffusion Policy (default: the variant's)",
    )  # fmt: skip
    p.add_argument(
        "--state-noise", type=float, default=None,
        help="our arms: std of the noise added to the normalised state in training (default: the variant's)",
    )  # fmt: skip
    p.add_argument(
        "--dataset", action="append", default=[], metavar="ENV=ROOT",
        help="use this LeRobot dataset for ENV instead of recording one (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--latent-cache", type=Path, default=None,
        help="where our arm keeps the VAE latents of each dataset; shareable between runs (default: OUT/latents)",
    )  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_threads_option(p)
    return p


def resolve(args: argparse.Namespace) -> tuple[Variant, dict[str, Path]]:
    """The variant with the command line's overrides, and the datasets given; bad input refused here."""

    v = dataclasses.replace(VARIANTS[args.variant])
    names = ("tasks", "demos", "episodes", "minutes", "estimator_minutes", "estimator_holdout", "state_noise",
             "ensemble", "arms")  # fmt: skip
    for name in names:
        given = getattr(args, name, None)  # other tables' parsers lack the estimator's options
        if given is not None:
            setattr(v, name, tuple(given) if name == "arms" else given)
    if getattr(args, "modes", None) is not None:
        v.modes = parse_modes(args.modes)
    check_tasks(v.tasks)
    if v.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {v.episodes}")
    if not (math.isfinite(v.state_noise) and v.state_noise >= 0):
        raise ValueError(f"--state-noise must be a std >= 0, got {v.state_noise}")
    if v.ensemble is not None:
        if not (math.isfinite(v.ensemble) and v.ensemble >= 0):
            raise ValueError(
                f"--ensemble must be a finite weight decay >= 0 (ACT's is 0.01), got {v.ensemble}"
            )
        if "diffusion" in v.arms:
            raise ValueError(
                "--ensemble: LeRobot's Diffusion Policy has no temporal ensembling; drop the diffusion arm "
                "(--arms) or --ensemble"
            )
    check_training(v)
    if "ours" in v.arms and args.vae is None and args.variant != "smoke":
        raise ValueError(
            "the `ours` arm needs a frozen video VAE: --vae FOLDER (the vae/ folder of `cosmos3-robot "
            "train-vae`); only --variant smoke runs it on a random one (the ours-estimator arm needs none)"
        )
    if args.vae is not None:
        v.latent_channels = vae_latent_channels(args.vae)
    datasets = {}
    for item in args.dataset:
        env, sep, root = item.partition("=")
        if not sep or env not in v.tasks:
            raise ValueError(f"--dataset {item!r}: give ENV=ROOT with ENV one of the tasks {v.tasks}")
        datasets[env] = Path(root)
    return v, datasets


def check_tasks(tasks: list[str]) -> None:
    """Refuse a task no registered env has (ours and Meta-World's)."""
    import gymnasium as gym

    from cosmos3_robot.envs import ALL_ENV_IDS

    for task in tasks:
        if task not in gym.registry or task not in ALL_ENV_IDS:
            raise ValueError(f"unknown task {task!r}; known: {', '.join(ALL_ENV_IDS)}")


def check_training(v: Variant) -> None:
    """Refuse a training set or budget too small to train anything."""
    if v.demos < 2:
        raise ValueError(f"--demos must be >= 2 (a training and a validation episode), got {v.demos}")
    if not (math.isfinite(v.minutes) and v.minutes >= MIN_MINUTES):
        raise ValueError(
            f"--minutes {v.minutes} is too small to train anything (a sim-small step takes about 0.5 s, an "
            f"ACT step about 0.9 s on 2 cores); give at least {MIN_MINUTES}"
        )
    if "ours-estimator" in v.arms:
        left = v.minutes - v.estimator_minutes
        if not (math.isfinite(v.estimator_minutes) and v.estimator_minutes > 0 and left >= MIN_MINUTES):
            raise ValueError(
                f"--estimator-minutes {v.estimator_minutes} of --minutes {v.minutes} leaves the ours-estimator "
                f"arm's policy {left:g} minutes; give the estimator more than 0 and the policy at least {MIN_MINUTES}"
            )
        if v.estimator_holdout < 1:
            raise ValueError(f"--estimator-holdout must be >= 1, got {v.estimator_holdout}")
        if v.demos <= v.estimator_holdout:
            raise ValueError(
                f"--demos {v.demos}: the ours-estimator arm holds {v.estimator_holdout} demonstrations out to "
                f"score its state estimator; record more than {v.estimator_holdout}"
            )


def vae_latent_channels(vae: Path) -> int:
    """The latent width of a `train-vae` folder (our model's must equal it); a missing one refused."""
    if not (vae / "config.json").is_file():
        raise FileNotFoundError(f"--vae {vae}: no VAE there (expected the vae/ folder `train-vae` writes)")
    return int(json.loads((vae / "config.json").read_text())["z_dim"])


def check_fits_env(root: Path, env_id: str, image_size: int, needs: tuple[str, ...] = ()) -> dict[str, int]:
    """The widths of the dataset's observation.state and of the features `needs`, after checking that it
    has them and that its actions and frames fit the env."""
    from cosmos3_robot.datasets import open_lerobot_metadata
    from cosmos3_robot.envs import make_env
    from cosmos3_robot.training.data.common import square_image_size

    meta = open_lerobot_metadata(None, root)
    env = make_env(env_id)
    want = tuple(env.action_space.shape)
    env.close()
    for key in ("action", "observation.state", "observation.image", *needs):
        if key not in meta.features:
            raise ValueError(
                f"dataset {root} has no {key!r}; the benchmark trains on camera, state and action"
                + (" (and the ours-estimator arm on the recorded scene state)" if key in needs else "")
            )
    got = tuple(meta.features["action"]["shape"])
    if got != want:
        raise ValueError(
            f"dataset {root}: actions are {got[0] if got else got} wide but {env_id} takes {want[0]}-wide actions; "
            f"give a dataset recorded in {env_id} (or leave --dataset out and let the benchmark record one)"
        )
    size = square_image_size(meta, str(root), "observation.image")  # refuses non-square frames
    if size != image_size:
        raise ValueError(
            f"dataset {root}: frames are {size}x{size} px, the variant trains on {image_size} px; record "
            f"the dataset at --image-size {image_size}"
        )
    return {k: int(math.prod(meta.features[k]["shape"])) for k in ("observation.state", *needs)}


def dataset_needs(v: Variant) -> tuple[str, ...]:
    """Features beyond camera, state and action that the variant's arms train on."""
    return ("observation.environment_state",) if "ours-estimator" in v.arms else ()


# Fields added after runs were written, at the value those runs had: left out of the run's identity.
LATER_FIELDS = {"state_noise": 0.0, "ensemble": None}


def variant_identity(v: Variant) -> dict:
    """The variant as a run's identity (`claim_output`): its fields, less LATER_FIELDS at their old value."""
    d = dataclasses.asdict(v)
    return {k: x for k, x in d.items() if not (k in LATER_FIELDS and x == LATER_FIELDS[k])}


def train_ours(v: Variant, data: Path, out: Path, vae: Path | None, state_dim: int | None, cache: Path,
               progress: bool, minutes: float | None = None, state_key: str | None = None) -> dict:  # fmt: skip
    """Our model on `data` for `minutes` (default `v.minutes`); `state_dim=None` trains it without
    proprioceptive state, `state_key` reads other recorded state columns than observation.state."""
    from cosmos3_robot.scripts.train import compose, train

    minutes = v.minutes if minutes is None else minutes
    overrides = [
        f"model={v.model}", f"model.state_dim={'null' if state_dim is None else state_dim}", f"minutes={minutes}", "seed=0",
        # `minutes` stops the run and sets the schedule's length; `steps` is only a ceiling.
        "steps=1000000", "data.source=lerobot", f"data.batch_size={v.batch_size}", "+data.options.num_frames=5",
        f"+data.options.num_actions={v.chunk}", "+data.options.pad=true", "+data.options.val_fraction=0.1",
        "optim.lr=1e-3", "optim.warmup_steps=50", "checkpoint.every=200", "val_every=0", f"progress={progress}",
    ]  # fmt: skip
    if v.latent_channels is not None:
        overrides.append(f"model.latent_channels={v.latent_channels}")
    if state_key is not None:
        overrides.append(f"+data.options.state_key={state_key}")
    if v.state_noise:
        overrides.append(f"generator.state_noise={v.state_noise}")
    if v.modes is not None:
        overrides.append("generator.modes={" + ", ".join(f"{k}: {w}" for k, w in v.modes.items()) + "}")
    cfg = compose(overrides)
    # Paths are set on the config, not written into overrides: Hydra's grammar would misread some.
    cfg.out, cfg.data.root = str(out), str(data)
    cfg.data.options["latent_cache"] = str(cache)
    cfg.data.options.update({"vae": str(vae)} if vae is not None else {"vae_preset": "tiny"})
    import yaml

    summary = train(cfg, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return {"train_seconds": summary["train_seconds"], "steps": summary["step"]}


def train_ours_estimator(
    v: Variant, data: Path, out: Path, state_dim: int, cache: Path, progress: bool
) -> dict:
    """The state estimator for `v.estimator_minutes`, then our model for the rest of the budget on the
    proprioceptive and the recorded scene state (`state_dim` wide together), with a seeded random VAE."""
    from cosmos3_robot.scripts import train_estimator

    argv = ["--root", str(data), "--out", str(out / "estimator"), "--max-minutes", str(v.estimator_minutes),
            "--steps", "1000000", "--holdout-episodes", str(v.estimator_holdout), "--seed", "0"]  # fmt: skip
    if train_estimator.main(argv) != 0:
        raise RuntimeError(f"train-estimator failed on {data} (its error is above)")
    log = json.loads((out / "estimator" / "train_log.json").read_text())
    policy = train_ours(v, data, out / "policy", None, state_dim, cache, progress,
                        minutes=v.minutes - v.estimator_minutes, state_key=BOTH_STATES)  # fmt: skip
    held = log["history"][-1] if log.get("history") else {}
    return {"train_seconds": log["train_seconds"] + policy["train_seconds"], "steps": policy["steps"],
            "estimator_steps": log["step"], "estimator_held_out_mae": held.get("mae")}  # fmt: skip


def train_lerobot(kind: str, v: Variant, data: Path, out: Path, progress: bool) -> dict:
    from cosmos3_robot.training.lerobot_baseline import BaselineConfig, train_baseline

    cfg = BaselineConfig(kind=kind, root=str(data), out=str(out), minutes=v.minutes, batch_size=8,
                         chunk=v.chunk, execute=v.execute, seed=0)  # fmt: skip
    summary = train_baseline(cfg, progress=progress)
    return {"train_seconds": summary["train_seconds"], "steps": summary["step"]}


def rollout(arm: str, task: str, v: Variant, run: Path, progress: bool) -> dict:
    from cosmos3_robot.scripts import rollout as rollout_script

    if arm == "ours":
        who = ["--model", str(run / "model")]
    elif arm == "ours-estimator":
        who = ["--model", str(run / "policy" / "model"), "--estimator", str(run / "estimator" / "estimator")]
    else:
        who = ["--policy", f"lerobot:{run / 'model'}"]
    argv = [*who, "--env", task, "--episodes", str(v.episodes), "--seed", str(EVAL_SEED),
            "--execute", str(v.execute), "--steps", "10", "--out", str(run / "rollout"), "--no-video"]  # fmt: skip
    if v.ensemble is not None:
        argv += ["--ensemble", str(v.ensemble)]
    if not progress:
        argv.append("--no-progress")
    rollout_script.main(argv)
    return json.loads((run / "rollout" / "results.json").read_text())


def row(task: str, arm: str, train: dict, res: dict) -> dict:
    lat = res["latency_per_chunk"]
    return {
        "task": task, "arm": arm, "episodes": res["episodes"], "successes": res["successes"],
        "success_rate": res["success_rate"], "wilson95": res["wilson95"],
        "latency_p50_ms": lat["p50_ms"], "latency_p95_ms": lat["p95_ms"],
        "setup_p50_ms": (res.get("setup_per_episode") or {}).get("p50_ms"),
        "train_steps": train.get("steps"), "train_seconds": train.get("train_seconds"),
        "eval_seeds": [EVAL_SEED, EVAL_SEED + res["episodes"] - 1],
        **{k: train[k] for k in ("estimator_steps", "estimator_held_out_mae") if k in train},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["imagination"]:
        from cosmos3_robot.scripts import bench_imagination

        return bench_imagination.main(argv[1:])
    if argv[:1] == ["labels"]:
        from cosmos3_robot.scripts import bench_labels

        return bench_labels.main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.table != "policies":  # its options were parsed as this table's: refuse, do not run policies
        parser.error(f"put the table first: cosmos3-robot benchmark {args.table} [options]")
    from cosmos3_robot.files import exclusive_lock

    v, datasets = resolve(args)  # refuse bad input before any work
    needs = dataset_needs(v)
    widths = {task: check_fits_env(root, task, v.image_size, needs) for task, root in datasets.items()}
    with exclusive_lock(args.out, "benchmark"):
        return run_benchmark(args, v, datasets, widths)


def run_benchmark(
    args: argparse.Namespace, v: Variant, datasets: dict[str, Path], widths: dict[str, dict[str, int]]
) -> int:
    from cosmos3_robot.envs.record import record_dataset

    apply_threads(args.threads)
    progress = not args.no_progress
    needs = dataset_needs(v)
    config = {"table": args.table, "variant": variant_identity(v) | {"episodes": None},
              "vae": None if args.vae is None else str(args.vae.resolve()),
              "datasets": {k: str(p.resolve()) for k, p in datasets.items()}}  # fmt: skip
    prov = claim_output(args.out, f"benchmark {args.table}", config)
    rows: list[dict] = []
    for task in v.tasks:
        folder = args.out / slug(task)
        data = datasets.get(task)
        if data is None:
            data = folder / "data"
            print(f"[{task}] recording {v.demos} demonstrations (noise {v.noise}) ...", flush=True)
            record_dataset(
                task, data, v.demos, noise=v.noise, seed=0, image_size=v.image_size, progress=progress
            )
        width = widths[task] if task in widths else check_fits_env(data, task, v.image_size, needs)
        for arm in v.arms:
            run = folder / arm
            print(f"[{task}] {arm}: training for {v.minutes} min ...", flush=True)
            cache = args.latent_cache or args.out / "latents"
            if arm == "ours":
                train = train_ours(v, data, run, args.vae, width["observation.state"], cache, progress)
            elif arm == "ours-estimator":  # another VAE (a random one): its latents cached apart
                train = train_ours_estimator(
                    v, data, run, sum(width.values()), cache.with_name(cache.name + "-random"), progress
                )
            else:
                train = train_lerobot(arm, v, data, run, progress)
            print(f"[{task}] {arm}: {v.episodes} held-out episodes ...", flush=True)
            rows.append(row(task, arm, train, rollout(arm, task, v, run, progress)))
            write_results(args.out, {**prov, "variant": dataclasses.asdict(v), "rows": rows})
    write_table(args.out, table(rows))
    return 0
