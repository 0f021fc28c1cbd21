"""`cosmos3-robot benchmark labels`: are inverse-dynamics labels good enough to train a policy on?

    cosmos3-robot benchmark labels --variant smoke --out runs/labels-smoke       (a few minutes)
    cosmos3-robot benchmark labels --variant full --out runs/labels --vae VAE_DIR
    cosmos3-robot benchmark labels --variant metaworld --labeller frames --out runs/labels-mw
                                                      (3 Meta-World tasks, about 70 minutes each)

Per task: record the noisy scripted expert twice, on disjoint env seeds: a labelled set (seeds
0 .. L-1, L = --labelled of the --demos) that trains the labeller for --minutes (our model,
`train`; or with --labeller frames the frame-to-frame labeller, `train-labeller`), and a policy
set (seeds L .. demos-1) whose actions the labeller replaces (`label --check`, which also scores
the labels against the true actions). The same policy (--arm, LeRobot's ACT by default) is then
trained for --minutes on the policy set twice, once with the true actions and once with the labels,
and both are rolled out on the same --episodes held-out env seeds 10000, 10001, ..., beside uniform
random actions (the floor). The figure is success(labels) / success(true actions); the target is >= 0.9.
One difference besides the actions: `label` writes its dataset through LeRobot's writer, so the
labelled copy's frames are encoded a second time (the true-action policy reads the recording's).

Writes into --out:
  results.json   per task: both successes (Wilson 95 %), the ratio, the labels' MSE and R² against
                 the true actions beside the mean-action baseline, training steps; the env seeds of
                 both sets and of the rollouts, and the commit
  table.md       the same as a Markdown table
  TASK/          labelled/ and policy/ (recorded), relabelled/ (the labels), labeller/, true/ and
                 labels/ (the training runs; each has rollout/results.json with every episode),
                 random/rollout/ (the floor)
Every stage resumes: the same command continues where a stopped run left off.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np

from cosmos3_robot.files import write_json_atomic
from cosmos3_robot.scripts.benchmark import (
    EVAL_SEED,
    Variant,
    check_fits_env,
    rollout,
    slug,
    train_lerobot,
    train_ours,
    variant_identity,
    write_table,
)
from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    claim_output,
    success_cell,
)

LABELLED = {"smoke": 4, "full": 50, "metaworld": 50}  # demonstrations with true actions, for the labeller
# Where a variant differs from `benchmark policies`' of the same name: on Meta-World the policy set
# keeps that table's 100 demonstrations, and the tasks are three where ACT on the true actions
# succeeded 50/50 there (benchmarks/README.md), so the ratio has room to show what labels lose.
METAWORLD_LABEL_TASKS = ["faucet-open-v3", "handle-press-v3", "door-close-v3"]
DEFAULTS = {
    "metaworld": {"demos": 150, "tasks": [f"cosmos3_robot/MetaWorld-{t}" for t in METAWORLD_LABEL_TASKS]}
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot benchmark labels", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument(
        "--variant", choices=sorted(LABELLED), default="smoke", help="a preset of the settings below"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder (resumed when it holds this run)")
    p.add_argument("--vae", type=Path, help="frozen VAE folder for the labeller (`train-vae`'s vae/)")
    p.add_argument("--tasks", nargs="+", help="envs (default: the variant's)")
    p.add_argument(
        "--arm", choices=["act", "diffusion", "ours"], default="act", help="the policy trained twice"
    )
    p.add_argument(
        "--labeller",
        choices=["model", "frames"],
        default="model",
        help="who labels: our world model's inverse dynamics (`train`), or the frame-to-frame labeller "
        "(`train-labeller`, which needs no VAE)",
    )
    p.add_argument("--demos", type=int, help="demonstrations recorded per task, both sets together")
    p.add_argument("--labelled", type=int, help="of them, the labeller's (the first env seeds)")
    p.add_argument("--episodes", type=int, help="held-out rollouts per policy")
    p.add_argument("--minutes", type=float, help="training budget of the labeller and of each policy")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_threads_option(p)
    return p


def resolve(args: argparse.Namespace) -> tuple[Variant, int]:
    """The variant and the labelled count, with the command line's overrides; bad input refused here."""
    from cosmos3_robot.scripts import benchmark

    given = {"tasks": args.tasks, "demos": args.demos}
    given = {k: DEFAULTS.get(args.variant, {}).get(k) if x is None else x for k, x in given.items()}
    # arms: the policy trained twice; `benchmark.resolve` refuses an `ours` arm without a VAE.
    ns = argparse.Namespace(variant=args.variant, **given, episodes=args.episodes, minutes=args.minutes,
                            arms=[args.arm], vae=args.vae, dataset=[])  # fmt: skip
    if args.vae is None and args.variant != "smoke" and (args.labeller == "model" or args.arm == "ours"):
        raise ValueError(
            "the labeller (our model) needs a frozen video VAE: --vae FOLDER (the vae/ folder of "
            "`cosmos3-robot train-vae`), or --labeller frames; only --variant smoke runs on a random one"
        )
    v, _ = benchmark.resolve(ns)  # the same checks as `benchmark policies`
    labelled = LABELLED[args.variant] if args.labelled is None else args.labelled
    if not 2 <= labelled <= v.demos - 2:
        given = "--labelled" if args.labelled is not None else f"the {args.variant} variant's labelled count"
        raise ValueError(
            f"{given} {labelled} does not fit {v.demos} demonstrations: give --labelled 2 .. {v.demos - 2} "
            "(both sets need at least 2 episodes)"
        )
    return v, labelled


def label_quality(true_root: Path, labelled_root: Path, mean: np.ndarray) -> dict:
    """The labels' MSE and R² against the true actions over every frame of the policy set (not
    only the episodes one resumed `label` call wrote), beside the labeller's mean-action baseline."""
    from cosmos3_robot.datasets import open_lerobot_dataset
    from cosmos3_robot.datasets.episodes import episode_column
    from cosmos3_robot.eval.metrics import action_errors

    true, pred = (
        episode_column(ds, "action", 0, ds.num_frames)
        for ds in (open_lerobot_dataset(None, r) for r in (true_root, labelled_root))
    )
    if true.shape != pred.shape:
        raise ValueError(
            f"{labelled_root} holds {pred.shape[0]} labelled frames, {true_root} {true.shape[0]}: the "
            f"labelling stopped part way; run the same command again to finish it"
        )
    return action_errors(pred, true, mean) | {"frames": int(true.shape[0])}


def train_labeller(
    args: argparse.Namespace, v: Variant, folder: Path, progress: bool
) -> tuple[dict, list[str], np.ndarray]:
    """The labeller on the labelled set for `v.minutes`: (summary, the `label` options that use it,
    its training mean action: the baseline of the label figures)."""
    if args.labeller == "model":
        summary = train_ours(
            v, folder / "labelled", folder / "labeller", args.vae, None, folder / "latents", progress
        )
        model = folder / "labeller" / "model"
        state = json.loads((model / "data_state.json").read_text())["action_transform"]
        mean = np.asarray(state["normalizer"]["stats"][state["key"]]["mean"], dtype=np.float64)
        return summary, ["--model", str(model)], mean
    from cosmos3_robot.encoders.inverse_dynamics import load_labeller
    from cosmos3_robot.scripts.common import provenance
    from cosmos3_robot.training.inverse_dynamics import LabellerTrainConfig
    from cosmos3_robot.training.inverse_dynamics import train_labeller as fit

    cfg = LabellerTrainConfig(out=str(folder / "labeller_frames"), root=[str(folder / "labelled")],
                              holdout_episodes=1, max_minutes=v.minutes, steps=1_000_000, eval_every=250)  # fmt: skip
    result = fit(
        cfg,
        provenance("benchmark labels", {"labeller": "frames"}),
        log=lambda m: print("   " + m, flush=True),
    )
    lab = load_labeller(result["labeller"])
    return {"steps": result["step"]}, ["--labeller", result["labeller"]], lab.mean.double().numpy()


def train_policy(
    arm: str, v: Variant, data: Path, run: Path, state_dim: int, vae: Path | None, progress: bool
):
    if arm == "ours":
        return train_ours(v, data, run, vae, state_dim, run.parent / "latents", progress)
    return train_lerobot(arm, v, data, run, progress)


def run_task(args: argparse.Namespace, v: Variant, labelled: int, task: str, progress: bool) -> dict:
    from cosmos3_robot.envs.record import record_dataset
    from cosmos3_robot.scripts import label
    from cosmos3_robot.scripts import rollout as rollout_script

    folder = args.out / slug(task)
    sets = {"labelled": (0, labelled), "policy": (labelled, v.demos - labelled)}
    for name, (seed, n) in sets.items():
        print(f"[{task}] recording the {name} set: {n} demonstrations from env seed {seed} ...", flush=True)
        record_dataset(
            task, folder / name, n, noise=v.noise, seed=seed, image_size=v.image_size, progress=progress
        )
    state_dim = check_fits_env(folder / "policy", task, v.image_size)["observation.state"]
    print(f"[{task}] training the labeller ({args.labeller}) for {v.minutes} min ...", flush=True)
    labeller, use, mean = train_labeller(args, v, folder, progress)
    print(f"[{task}] labelling the policy set ...", flush=True)
    label.main([*use, "--source", str(folder / "policy"), "--out", str(folder / "relabelled"), "--check",
                *(["--no-progress"] if not progress else [])])  # fmt: skip
    check = label_quality(folder / "policy", folder / "relabelled", mean)
    row = {"task": task, "arm": args.arm, "labeller": args.labeller, "labelled_demos": labelled,
           "policy_demos": v.demos - labelled,
           "labeller_steps": labeller["steps"],
           "label_quality": {k: check[k] for k in ("mse", "mean_action_mse", "r2", "frames")},
           "seeds": {"labelled": [0, labelled - 1], "policy": [labelled, v.demos - 1],
                     "eval": [EVAL_SEED, EVAL_SEED + v.episodes - 1]}}  # fmt: skip
    for name, data in (("true", folder / "policy"), ("labels", folder / "relabelled")):
        what = "true actions" if name == "true" else "labelled actions"
        print(f"[{task}] {args.arm} on the {what}: training for {v.minutes} min ...", flush=True)
        train = train_policy(args.arm, v, data, folder / name, state_dim, args.vae, progress)
        res = rollout(args.arm, task, v, folder / name, progress)
        row[name] = {k: res[k] for k in ("episodes", "successes", "success_rate", "wilson95")} | {
            "train_steps": train["steps"]
        }
    # The floor: uniform random actions on the same seeds. A task that chance solves often would let
    # poor labels look good; the label figures beside the ratio tell the rest.
    print(f"[{task}] the floor: random actions on the same {v.episodes} seeds ...", flush=True)
    rollout_script.main(["--policy", "random", "--env", task, "--episodes", str(v.episodes), "--seed",
                         str(EVAL_SEED), "--out", str(folder / "random" / "rollout"), "--no-video",
                         *(["--no-progress"] if not progress else [])])  # fmt: skip
    res = json.loads((folder / "random" / "rollout" / "results.json").read_text())
    row["random"] = {k: res[k] for k in ("episodes", "successes", "success_rate", "wilson95")}
    t, lab = row["true"]["success_rate"], row["labels"]["success_rate"]
    row["ratio"] = None if t == 0 else lab / t  # undefined when the true-action policy never succeeds
    return row


def table(rows: list[dict]) -> str:
    lines = ["| task | policy | true actions | labels | ratio | label MSE (mean action) / R² | random actions |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        cell = [success_cell(r[k]) for k in ("true", "labels")]
        ratio = "undefined" if r["ratio"] is None else f"{r['ratio']:.2f}"
        q = r["label_quality"]
        floor = success_cell(r["random"]) if "random" in r else "not run"  # rows from before the floor
        lines.append(f"| {r['task']} | {r['arm']} | {cell[0]} | {cell[1]} | {ratio} | "
                     f"{q['mse']:.3f} ({q['mean_action_mse']:.3f}) / {q['r2']:.2f} | {floor} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cosmos3_robot.files import exclusive_lock

    v, labelled = resolve(args)  # refuse bad input before any work
    with exclusive_lock(args.out, "benchmark"):
        apply_threads(args.threads)
        config = {"table": "labels", "variant": variant_identity(v) | {"episodes": None}, "arm": args.arm,
                  "labeller": args.labeller,
                  "labelled": labelled, "vae": None if args.vae is None else str(args.vae.resolve())}  # fmt: skip
        prov = claim_output(args.out, "benchmark labels", config)
        rows = []
        for task in v.tasks:
            rows.append(run_task(args, v, labelled, task, not args.no_progress))
            write_json_atomic(
                args.out / "results.json", {**prov, "variant": dataclasses.asdict(v), "rows": rows}
            )
        write_table(args.out, table(rows))
    return 0
