"""`cosmos3-robot benchmark imagination`: can the world model stand in for the simulator when it
ranks policies?

    cosmos3-robot benchmark imagination --variant smoke --out runs/imagine-smoke      (a few minutes)
    cosmos3-robot benchmark imagination --variant full --out runs/imagine --model MODEL

The policies, of graded quality: the scripted expert's plan for each episode replayed open loop
with Gaussian noise of rising std (--noises; 0 is the expert itself), uniform random actions and
the zero action. None of them reads its observations, so each takes the same actions in both
simulators, and what is compared is the simulators alone. Each policy runs --episodes episodes on
env seeds 10000, 10001, ... in the real env and in the learned simulator. There its plan is
rolled out a clip at a time (`LearnedEnv.rollout_plan`: one forward-dynamics sample per clip, from
the last imagined frame and the plan's own next actions, as the model was trained), not stepped
like the `cosmos3_robot/Learned-v0` gym env (one sample per step, holding one action over the
clip); the model's success probe judges every imagined frame.

The model: --model, a `train` folder of a model without proprioceptive state whose clip frames and
actions are env steps (a learned simulator imagines pixels, not state); without a success probe
(`train-probe`) one is fitted first and saved in MODEL/success_probe/. Without --model the benchmark makes one: it records --demos
noisy-expert demonstrations (env seeds 0 .. demos-1, or takes --dataset), trains a state-free
model for --minutes as `benchmark policies` trains ours, and fits its probe.

Writes into --out:
  results.json   per policy: success in both simulators (Wilson 95 %) and the share of seeds on
                 which they agree; across policies: Pearson, Spearman and MMRV (SIMPLER's mean
                 maximum rank violation); the variant, seeds, model and commit
  table.md       the same as a Markdown table
  episodes/      per policy and simulator, every episode (seed, success, steps), written as it ends
  world/         the model, when the benchmark trained it
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
    VARIANTS,
    Variant,
    check_fits_env,
    check_tasks,
    check_training,
    train_ours,
    vae_latent_channels,
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


@dataclasses.dataclass
class Imagine:
    train: Variant  # recording and training, when no --model is given
    noises: list[float]  # std of the noise on the expert's open-loop plan, one policy each
    probe_episodes: int  # expert rollouts the success probe is fitted on
    steps: int = 10  # denoising steps per imagined env step


IMAGINE = {
    "smoke": Imagine(dataclasses.replace(VARIANTS["smoke"]), noises=[0.0, 0.1], probe_episodes=8),
    "full": Imagine(dataclasses.replace(VARIANTS["full"], tasks=["cosmos3_robot/Reach-v0"]),
                    noises=[0.0, 0.05, 0.1, 0.2], probe_episodes=40),
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot benchmark imagination", description=__doc__, formatter_class=HelpFormatter
    )
    p.add_argument(
        "--variant", choices=sorted(IMAGINE), default="smoke", help="a preset of the settings below"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder (resumed when it holds this run)")
    p.add_argument("--model", type=Path, help="a state-free `train` model folder (default: train one)")
    p.add_argument("--vae", type=Path, help="frozen VAE folder for the model the benchmark trains")
    p.add_argument("--task", help="the env (default: the variant's, cosmos3_robot/Reach-v0)")
    p.add_argument("--episodes", type=int, help="episodes per policy and simulator")
    p.add_argument("--noises", type=float, nargs="+", help="noise std of each open-loop expert policy")
    p.add_argument("--demos", type=int, help="demonstrations to train the model on (no --model)")
    p.add_argument("--minutes", type=float, help="training budget of the model (no --model)")
    p.add_argument("--dataset", type=Path, help="train on this LeRobot dataset instead of recording one")
    p.add_argument("--latent-cache", type=Path, help="latent cache folder (default: OUT/latents)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_threads_option(p)
    return p


def resolve(args: argparse.Namespace) -> Imagine:
    """The variant with the command line's overrides; bad input refused here, before any work (the
    task and training checks are `benchmark policies`' own)."""
    import math

    v = dataclasses.replace(IMAGINE[args.variant])
    v.train = dataclasses.replace(v.train)
    if args.task is not None:
        v.train.tasks = [args.task]
    for name in ("episodes", "demos", "minutes"):
        if getattr(args, name) is not None:
            setattr(v.train, name, getattr(args, name))
    if args.noises is not None:
        v.noises = list(args.noises)
    check_tasks(v.train.tasks)
    if v.train.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {v.train.episodes}")
    names = {policy_name(s) for s in v.noises}
    if any(not (math.isfinite(s) and s >= 0) for s in v.noises) or len(names) != len(v.noises):
        raise ValueError(f"--noises {v.noises}: give distinct finite noise stds >= 0 (e.g. 0 0.05 0.1 0.2)")
    if args.model is not None:
        if not (args.model / "config.json").is_file():
            raise FileNotFoundError(
                f"--model {args.model}: no model there (a folder `cosmos3-robot train` wrote)"
            )
        return v
    check_training(v.train)
    if args.vae is None and args.variant != "smoke":
        raise ValueError(
            "training the model needs a frozen video VAE: --vae FOLDER (the vae/ folder of `train-vae`), "
            "or give a trained state-free model with --model"
        )
    if args.vae is not None:
        v.train.latent_channels = vae_latent_channels(args.vae)
    return v


def policy_name(noise: float) -> str:
    return f"expert-open-loop-noise-{noise:g}"


def policies(v: Imagine, task: str, image_size: int, fps: int) -> dict:
    from cosmos3_robot.policies.reference import OpenLoopExpert, RandomPolicy, ZeroPolicy

    out: dict = {policy_name(s): OpenLoopExpert(task, s, image_size, fps) for s in v.noises}
    dim = next(iter(out.values())).action_dim
    return out | {"random": RandomPolicy(dim), "zero": ZeroPolicy(dim)}


def prepare_model(args: argparse.Namespace, v: Imagine, progress: bool) -> Path:
    """The model folder to imagine with, trained (no --model) and given a success probe as needed."""
    from cosmos3_robot.policies.success_probe import PROBE_DIR
    from cosmos3_robot.scripts import train_probe

    task, model = v.train.tasks[0], args.model
    if model is None and (args.out / "world" / "model" / PROBE_DIR).is_dir():
        model = args.out / "world" / "model"  # trained and probed by an earlier run (the probe comes last)
    if model is None:
        data = args.dataset
        if data is None:
            from cosmos3_robot.envs.record import record_dataset

            data = args.out / "data"
            print(
                f"[{task}] recording {v.train.demos} demonstrations (noise {v.train.noise}) ...", flush=True
            )
            record_dataset(task, data, v.train.demos, noise=v.train.noise, seed=0,
                           image_size=v.train.image_size, progress=progress)  # fmt: skip
        check_fits_env(data, task, v.train.image_size)
        print(f"[{task}] training a state-free world model for {v.train.minutes} min ...", flush=True)
        cache = args.latent_cache or args.out / "latents"
        train_ours(v.train, data, args.out / "world", args.vae, None, cache, progress)
        model = args.out / "world" / "model"
    if not (model / PROBE_DIR).is_dir():
        print(f"[{task}] fitting the success probe on {v.probe_episodes} expert rollouts ...", flush=True)
        train_probe.main(["--model", str(model), "--env", task, "--episodes", str(v.probe_episodes),
                          "--check-episodes", "0"])  # fmt: skip
    return model


def plan_of(policy, seed: int, steps: int, task: str) -> np.ndarray:
    """The (steps, A) actions an observation-free policy takes in the episode with env seed `seed`."""
    from cosmos3_robot.policies.rollout import start_episode

    start_episode(policy, seed)
    return np.stack([policy.act({}, task) for _ in range(steps)])


def run_policy(
    name: str, policy, real, learned, episodes: int, folder: Path, log: dict[Path, list[dict]]
) -> dict[str, list[dict]]:
    """Episodes 0..episodes-1 of one policy in both simulators. The real env steps it closed loop;
    imagination rolls out its plan a clip at a time (`rollout_plan`). `log` holds every episodes file
    of the run: one an earlier run finished is read back once, then kept here as it grows."""
    from cosmos3_robot.policies.rollout import run_episode

    done: dict[str, list[dict]] = {}
    folder.mkdir(parents=True, exist_ok=True)
    for sim in ("real", "imagined"):
        path = folder / f"{name}.{sim}.json"
        if path not in log:
            log[path] = json.loads(path.read_text())["episodes"] if path.exists() else []
        eps = log[path]
        for e in range(len(eps), episodes):
            seed = EVAL_SEED + e
            if sim == "real":
                ep = run_episode(real, policy, seed)
                success, steps = bool(ep.success), ep.steps
            else:
                plan = plan_of(policy, seed, learned.max_steps, "")  # blind policies ignore the task too
                success, steps = learned.rollout_plan(seed, plan)
            eps.append({"seed": seed, "success": success, "steps": steps})
            write_json_atomic(path, {"policy": name, "simulator": sim, "episodes": eps})
        done[sim] = eps[:episodes]
    return done


def summarise(results: dict[str, dict[str, list[dict]]]) -> dict:
    from cosmos3_robot.eval.metrics import simulator_agreement, success_summary

    rows = []
    for name, sims in results.items():
        real, imagined = ([e["success"] for e in sims[s]] for s in ("real", "imagined"))
        rows.append({"policy": name, "real": success_summary(real), "imagined": success_summary(imagined),
                     "agreement": sum(a == b for a, b in zip(real, imagined, strict=True)) / len(real)})  # fmt: skip
    rates = {s: [r[s]["success_rate"] for r in rows] for s in ("real", "imagined")}
    return {"rows": rows, "ranking": simulator_agreement(rates["real"], rates["imagined"])}


def table(summary: dict) -> str:
    lines = ["| policy | real simulator | learned simulator | same outcome |", "|---|---|---|---|"]
    for r in summary["rows"]:
        cell = [success_cell(r[s]) for s in ("real", "imagined")]
        lines.append(f"| {r['policy']} | {cell[0]} | {cell[1]} | {r['agreement']:.0%} |")
    k = summary["ranking"]
    fmt = lambda x: "undefined" if x is None else f"{x:.2f}"  # noqa: E731
    lines.append(f"\nPearson {fmt(k['pearson'])}, Spearman {fmt(k['spearman'])}, MMRV {k['mmrv']:.3f} "
                 f"over {k['policies']} policies" + "".join(f"; {n}" for n in k["notes"]))  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cosmos3_robot.files import exclusive_lock

    v = resolve(args)  # refuse bad input before any work
    learned = None
    if args.model is not None:
        from cosmos3_robot.policies.learned_env import LearnedEnv

        # refuses a model that cannot simulate the env (e.g. a state-conditioned one); kept for the run
        learned = LearnedEnv(str(args.model), v.train.tasks[0], steps=v.steps)
    elif args.dataset is not None:
        check_fits_env(args.dataset, v.train.tasks[0], v.train.image_size)
    try:
        with exclusive_lock(args.out, "benchmark"):
            return run(args, v, learned)
    finally:
        if learned is not None:
            learned.close()


def run(args: argparse.Namespace, v: Imagine, learned=None) -> int:
    """`learned`: the given model's LearnedEnv when main already built it (else trained and built here)."""
    from cosmos3_robot.envs import make_env
    from cosmos3_robot.policies.learned_env import LearnedEnv

    apply_threads(args.threads)
    progress, task = not args.no_progress, v.train.tasks[0]
    paths = {k: None if getattr(args, k) is None else str(getattr(args, k).resolve())
             for k in ("model", "vae", "dataset")}  # fmt: skip
    variant = dataclasses.asdict(v)
    variant["train"] = variant_identity(v.train) | {"episodes": None}  # a larger --episodes extends the run
    config = {"table": "imagination", "variant": variant, **paths}
    prov = claim_output(args.out, "benchmark imagination", config)
    model = prepare_model(args, v, progress)
    if learned is None:
        learned = LearnedEnv(str(model), task, steps=v.steps)  # refuses a state-conditioned model
    g = learned.world.geometry
    real = make_env(task, image_size=g.image_size, control_hz=int(g.fps))
    results, log, policy_set = {}, {}, policies(v, task, g.image_size, int(g.fps))
    try:
        print(f"[{task}] {len(policy_set)} policies, {v.train.episodes} episodes each in each simulator ...")
        for upto in range(1, v.train.episodes + 1):  # in rounds: a stopped run holds every policy equally far
            for name, policy in policy_set.items():
                results[name] = run_policy(name, policy, real, learned, upto, args.out / "episodes", log)
            if progress or upto % 10 == 0 or upto == v.train.episodes:
                print(f"[{task}] episode {upto}/{v.train.episodes} of every policy done", flush=True)
    finally:
        for env in [real, learned, *policy_set.values()]:
            if hasattr(env, "close"):
                env.close()
    summary = summarise(results)
    write_json_atomic(args.out / "results.json", {**prov, "model": str(model.resolve()), "task": task,
                      "eval_seeds": [EVAL_SEED, EVAL_SEED + v.train.episodes - 1], **summary})  # fmt: skip
    write_table(args.out, table(summary))
    return 0
