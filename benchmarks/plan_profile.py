"""Where one closed-loop plan of our policy spends its time: the state estimator, the VAE's encoding of
the frame, the batch, the sampling request, the denoising steps (`MoT.euler_step`: the step's
tokens embedded, the Generator tower, the velocities read out) and the rest of the sampler, timed
per plan over real episodes (the policy acting in the env, as `rollout` runs it). For choosing what
to make faster toward issue 18's 50 ms per chunk; `rollout` stays the figure of record.

    python benchmarks/plan_profile.py --model artefacts/reach/policy --estimator artefacts/reach/estimator \
        --env cosmos3_robot/Reach-v0 --linear-dtype bf16 --compile --out benchmarks/results/latency/plan_profile.json
"""

import argparse
import functools
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.envs import make_env  # noqa: E402
from cosmos3_robot.files import write_json_atomic  # noqa: E402
from cosmos3_robot.policies import runners  # noqa: E402
from cosmos3_robot.policies.rollout import WorldModelPolicy, run_episode  # noqa: E402
from cosmos3_robot.policies.world_model import WorldModel  # noqa: E402
from cosmos3_robot.scripts.common import commit, latency_stats  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--model", required=True)
p.add_argument("--estimator")
p.add_argument("--env", required=True)
p.add_argument("--episodes", type=int, default=10)
p.add_argument("--seed", type=int, default=10_000)
p.add_argument("--execute", type=int, default=2)
p.add_argument("--linear-dtype", default="fp32", choices=("fp32", "bf16"))
p.add_argument("--compile", action="store_true")
p.add_argument("--out", type=Path)
a = p.parse_args()

world = WorldModel.from_folder(a.model)
world.set_linear_dtype(a.linear_dtype)
if a.compile:
    world.compile(a.linear_dtype)
estimator = None
if a.estimator is not None:
    from cosmos3_robot.encoders.state_estimator import load_estimator

    estimator = load_estimator(a.estimator)
    if a.compile:
        from cosmos3_robot.infra.compiled import compile_estimator

        compile_estimator(estimator)
policy = WorldModelPolicy(
    world, execute=a.execute, sampling=runners.SamplingConfig(steps=10), estimator=estimator
)
phases: dict[str, list[float]] = {}


def timed(owner, name: str, phase: str) -> None:
    """Replace owner.name by a wrapper that adds each call's milliseconds to phases[phase]."""
    f = getattr(owner, name)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            phases.setdefault(phase, []).append((time.perf_counter() - t0) * 1e3)

    setattr(owner, name, wrapper)


if estimator is not None:
    timed(estimator, "estimate", "estimator")
timed(world, "encode_frames", "vae_encode")
timed(world, "clip_batch", "clip_batch")
timed(world.model, "prepare_request", "prepare_request")
timed(world.model, "euler_step", "denoising_step")
timed(runners, "sample_mode", "sample")
timed(policy.runner, "plan", "plan_after_estimate")

env = make_env(a.env, image_size=world.geometry.image_size)
run_episode(env, policy, a.seed - 1)  # warm-up (and, with --compile, the compiles): not counted
phases.clear()
for e in range(a.episodes):
    run_episode(env, policy, a.seed + e)
    phases.setdefault("chunk (as rollout times it)", []).extend(c.latency_ms for c in policy.chunks)
env.close()
calls = len(phases["denoising_step"]) / len(phases["sample"])
stats = {k: latency_stats(v) for k, v in phases.items()}
sampler_rest = [
    s - r - calls * stats["denoising_step"]["p50_ms"]
    for s, r in zip(phases["sample"], phases["prepare_request"], strict=True)
]
result = {
    "command": " ".join(sys.argv), "commit": commit(), "env": a.env, "seeds": [a.seed, a.seed + a.episodes - 1],
    "linear_dtype": a.linear_dtype, "compile": a.compile, "denoising_steps_per_plan": calls,
    "phases_ms": stats, "sampler_rest_per_plan_ms_p50": latency_stats(sampler_rest)["p50_ms"],
}  # fmt: skip
for k, s in stats.items():
    print(f"{k:28s} calls {s['calls']:5d}  min {s['min_ms']:6.2f}  p50 {s['p50_ms']:6.2f}  "
          f"p95 {s['p95_ms']:6.2f}  max {s['max_ms']:7.2f} ms")  # fmt: skip
rest = result["sampler_rest_per_plan_ms_p50"]
print(f"sampler outside the denoising steps and the request, per plan (p50): {rest:.2f} ms")
if a.out is not None:
    write_json_atomic(a.out, result)
    print(f"written: {a.out}")
