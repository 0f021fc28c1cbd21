"""`cosmos3-robot rollout`: closed-loop episodes of a trained policy in a registered env.

    cosmos3-robot rollout --model runs/reach/model --env cosmos3_robot/Reach-v0 --episodes 50 \\
        --seed 10000 --out runs/reach/rollout

Reads: a model folder written by `cosmos3-robot train` (weights + data_state.json + its VAE), or a
LeRobot policy checkpoint (`--policy lerobot:DIR`: ACT, Diffusion Policy; see policies/lerobot.py),
or a reference floor (`--policy random` / `zero`; see policies/reference.py).
Writes into --out:
  results.json             success rate with a Wilson 95 % interval; per episode seed, success,
                           steps, return, re-plans and the imagined-vs-realised PSNR per re-plan;
                           control latency p50/p95 per action chunk; command, config and commit
  episodes/episode_NNN.mp4 the realised frames of each episode (H.264)
  episodes/episode_NNN.rrd (with --rrd) realised frames, actions and, for every re-plan, the frames
                           the model imagined, on one timeline in seconds (`rerun FILE` opens it)
Episode e uses env seed SEED + e. Results are written after every episode: a run stopped with
Ctrl-C keeps the episodes it finished, and the same command continues from there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from cosmos3_robot.files import write_json_atomic
from cosmos3_robot.infra import cpu_pack
from cosmos3_robot.scripts.common import (
    HelpFormatter,
    add_threads_option,
    apply_threads,
    claim_output,
    latency_stats,
    run_config,
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cosmos3-robot rollout",
        description=__doc__,
        formatter_class=HelpFormatter,
    )
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--model", type=Path, help="model folder written by `cosmos3-robot train`")
    who.add_argument(
        "--policy",
        help="a LeRobot policy checkpoint, as lerobot:DIR; or random (uniform actions) / zero (no motion): "
        "the floor a learned policy must clear",
    )
    p.add_argument("--env", required=True, help="registered env id, e.g. cosmos3_robot/Reach-v0")
    p.add_argument("--episodes", type=int, default=50, help="episodes to run (default: %(default)s)")
    p.add_argument(
        "--seed", type=int, default=10_000, help="episode e uses env seed SEED + e (default: %(default)s)"
    )
    p.add_argument("--out", type=Path, required=True, help="output folder (resumed when it holds this run)")
    p.add_argument(
        "--execute", type=int, default=4, help="actions executed per sampled chunk (default: %(default)s)"
    )
    p.add_argument(
        "--ensemble",
        type=float,
        default=None,
        help="temporal ensembling (ACT): re-plan every step and average the overlapping chunks with "
        "weights exp(-M * i), i = 0 for the oldest, which weighs most; M=0.01 is ACT's (default: off, "
        "use --execute). Our models and LeRobot ACT checkpoints (its own ensembler); not Diffusion Policy",
    )
    p.add_argument(
        "--estimator",
        type=Path,
        default=None,
        help="a state estimator folder (`train-estimator --out DIR` writes DIR/estimator): the part of the "
        "model's state it estimates (e.g. the simulator's environment_state) is read off each frame instead of "
        "taken from the env",
    )
    p.add_argument("--steps", type=int, default=10, help="denoising steps per chunk (default: %(default)s)")
    p.add_argument(
        "--policy-mode",
        choices=("policy", "action_policy"),
        default=None,
        help="the task head that acts: policy (actions and future frames) or action_policy (actions alone, "
        "fewer tokens per step); the model must have trained on it (default: the model's own)",
    )
    p.add_argument(
        "--noise-scale",
        type=float,
        default=1.0,
        help="std of the flow's starting noise: 1 samples the trained distribution, < 1 a lower temperature "
        "(0: one deterministic chunk per observation) (default: %(default)s)",
    )
    p.add_argument(
        "--linear-dtype",
        choices=("fp32", "bf16"),
        default="fp32",
        help="dtype of the model's matrix products: bf16 is faster on CPUs with AMX / AVX512-BF16 (slower on AVX2 alone), at bf16 "
        "precision; the rest stays fp32 (default: %(default)s)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="run what our model's plans run through torch.compile: the Generator's denoising step (at "
        "--linear-dtype), the VAE's encoder and the --estimator (needs a C++ compiler; the first plan of "
        "each input layout compiles for about 30-60 s, then plans run faster)",
    )
    p.add_argument("--image-size", type=int, default=None, help="env camera size (default: the model's)")
    p.add_argument("--rrd", action="store_true", help="also write a rerun recording per episode")
    p.add_argument("--no-video", action="store_true", help="do not write MP4 files")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_threads_option(p)
    return p


def _check(args: argparse.Namespace) -> None:
    import gymnasium as gym

    from cosmos3_robot.envs import ALL_ENV_IDS

    if args.env not in gym.registry:
        raise ValueError(f"unknown env {args.env!r}; registered: {', '.join(ALL_ENV_IDS)}")
    if args.episodes < 1:
        raise ValueError(f"--episodes must be >= 1, got {args.episodes}")
    if args.steps < 1 or args.execute < 1:
        raise ValueError(f"--steps and --execute must be >= 1, got {args.steps} and {args.execute}")
    if args.estimator is not None and args.model is None:
        raise ValueError("--estimator feeds our model's state: it needs --model, not --policy")
    if args.policy_mode is not None and args.model is None:
        raise ValueError("--policy-mode chooses our model's task head: it needs --model, not --policy")
    if args.ensemble is not None and args.policy in ("random", "zero"):
        raise ValueError(
            f"--ensemble averages planned chunks; --policy {args.policy} plans none: drop --ensemble"
        )
    if args.compile and args.model is None:
        raise ValueError("--compile compiles our model: it needs --model, not --policy")
    if args.compile:
        from cosmos3_robot.infra.compiled import compiler_available

        if not compiler_available():
            raise ValueError(
                "--compile needs a C++ compiler (c++, g++ or clang++) on the PATH; install one or drop --compile"
            )


def make_policy(args: argparse.Namespace):
    """(policy, image size, control rate) for --model or --policy."""
    from cosmos3_robot.policies.runners import SamplingConfig

    if args.policy in ("random", "zero"):
        from cosmos3_robot.envs import make_env
        from cosmos3_robot.policies.reference import RandomPolicy, ZeroPolicy

        env = make_env(args.env)
        width = int(np.prod(env.action_space.shape))
        env.close()
        policy = RandomPolicy(width) if args.policy == "random" else ZeroPolicy(width)
        return policy, args.image_size or 128, None
    if args.policy is not None:
        from cosmos3_robot.policies.lerobot import LeRobotPolicy

        kind, _, folder = args.policy.partition(":")
        if kind != "lerobot" or not folder:
            raise ValueError(
                f"--policy {args.policy!r}: give lerobot:DIR (a LeRobot policy checkpoint folder), or random / "
                "zero for the no-learning floor"
            )
        policy = LeRobotPolicy.from_folder(folder, ensemble=args.ensemble)
        return policy, args.image_size or policy.image_size, None
    from cosmos3_robot.policies.world_model import WorldModel

    world = WorldModel.from_folder(args.model)
    world.set_linear_dtype(args.linear_dtype)
    if args.linear_dtype == "bf16" and not cpu_pack.bf16_available():
        print(
            "warning: --linear-dtype bf16 on a CPU without oneDNN bf16 kernels (they need AVX512 BW/VL/DQ or "
            "AVX-NE-CONVERT): the bf16 products run unpacked and are likely slower than fp32; use fp32 here",
            file=sys.stderr,
        )
    if world.actions is None:
        raise ValueError(f"{args.model} was trained without actions: it cannot act; train it with actions")
    if args.compile:
        world.compile(args.linear_dtype)
    sampling = SamplingConfig(steps=args.steps, noise_scale=args.noise_scale)
    from cosmos3_robot.policies.rollout import WorldModelPolicy

    estimator = None
    if args.estimator is not None:
        from cosmos3_robot.encoders.state_estimator import load_estimator

        estimator = load_estimator(args.estimator)
        if args.compile:
            from cosmos3_robot.infra.compiled import compile_estimator

            compile_estimator(estimator)
    policy = WorldModelPolicy(world, execute=args.execute, sampling=sampling, imagine=args.rrd,
                              ensemble=args.ensemble, estimator=estimator, mode=args.policy_mode)  # fmt: skip
    world.check_env(args.env)
    g = world.geometry
    if args.image_size is not None and args.image_size != g.image_size:
        raise ValueError(f"--image-size {args.image_size}: the model was trained on {g.image_size} px frames")
    return policy, g.image_size, int(g.fps)


def summarise(episodes: list[dict], latencies: list[float], prov: dict) -> dict:
    from cosmos3_robot.eval.metrics import success_summary

    setups = [e["setup_ms"] for e in episodes if e.get("setup_ms") is not None]
    return {
        **prov,
        **success_summary([e["success"] for e in episodes]),
        "mean_steps": float(np.mean([e["steps"] for e in episodes])),
        "mean_return": float(np.mean([e["return"] for e in episodes])),
        "latency_per_chunk": latency_stats(latencies),
        # once per episode, before the first action: the instruction's Reasoner pass (our model)
        **({"setup_per_episode": latency_stats(setups)} if setups else {}),
        "episodes_detail": episodes,
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cosmos3_robot.files import exclusive_lock

    with exclusive_lock(args.out, "rollout"):  # one run per output folder at a time
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    apply_threads(args.threads)
    _check(args)
    from tqdm import tqdm

    from cosmos3_robot.policies.rollout import run_episodes

    policy, image_size, control_hz = make_policy(args)
    # What makes two runs the same (the episode count is a target: a run continues to a larger one).
    # An option left at its default that older runs did not have is left out, so that they still resume.
    unset = (("policy_mode",) if args.policy_mode is None else ()) + (() if args.compile else ("compile",))
    config = run_config(args, skip=("no_progress", "threads", "episodes", *unset))
    prov = claim_output(args.out, "rollout", config)
    results_path = args.out / "results.json"
    done: list[dict] = []
    latencies: list[float] = []
    if results_path.exists():
        import json

        prev = json.loads(results_path.read_text())
        done, latencies = prev["episodes_detail"], prev.get("latencies_ms", [])
        if args.model is not None and any("setup_ms" not in e for e in done):
            print(
                f"warning: {args.out} holds episodes rolled out before the instruction's Reasoner pass was timed "
                "apart (their first chunk's latency includes it): latency_per_chunk will mix both; give a new "
                "--out for figures of one kind",
                file=sys.stderr,
            )
    bar = tqdm(
        total=args.episodes,
        initial=len(done),
        desc=f"rollout {args.env}",
        unit="ep",
        disable=args.no_progress,
    )
    fps = control_hz or 10
    for ep in run_episodes(
        args.env, policy, args.episodes, args.seed, image_size, control_hz, skip=len(done)
    ):
        name = f"episode_{len(done):03d}"
        if not args.no_video:
            from cosmos3_robot.viz.video import write_mp4

            write_mp4(args.out / "episodes" / f"{name}.mp4", ep.frames, fps)
        if args.rrd:
            from cosmos3_robot.viz.rerun_log import write_rollout

            write_rollout(args.out / "episodes" / f"{name}.rrd", ep.frames, fps, ep.actions, ep.chunks)
        latencies += [c.latency_ms for c in ep.chunks]
        done.append({"seed": ep.seed, "task": ep.task, "success": ep.success, "steps": ep.steps,
                     "return": ep.ret, "replans": len(ep.chunks), "chunk_errors": ep.chunk_errors(),
                     "setup_ms": ep.setup_ms})  # fmt: skip
        write_json_atomic(results_path, {**summarise(done, latencies, prov), "latencies_ms": latencies})
        bar.update(1)
        bar.set_postfix(success=f"{np.mean([e['success'] for e in done]):.2f}")
    bar.close()
    res = summarise(done, latencies, prov)
    lo, hi = res["wilson95"]
    lat = res["latency_per_chunk"]
    p50 = "n/a" if lat["p50_ms"] is None else f"{lat['p50_ms']:.1f}"
    p95 = "n/a" if lat["p95_ms"] is None else f"{lat['p95_ms']:.1f}"
    setup = res.get("setup_per_episode")
    setup = "" if setup is None else f" (instruction once per episode: p50 {setup['p50_ms']:.1f} ms)"
    print(
        f"{args.env}: success {res['successes']}/{res['episodes']} = {res['success_rate']:.1%} "
        f"(Wilson 95 % {lo:.1%}-{hi:.1%}); latency per chunk p50 {p50} ms, p95 {p95} ms{setup}; {results_path}"
    )
    return 0
