"""Meta-World's scripted experts at our 10 Hz, run at their own 80 Hz (`native_plan`, the default;
arm `native`) against held for the step (`native_rate=False`; arm `held`), and the reference they
are both measured against: the expert in Meta-World's own env at 80 Hz, nothing held (arm `own`;
the same episodes, 8 native steps per step of ours). Success and episode length per task,
noise-free, on the same seeds. `--arms` runs some arms and merges them into an existing `--out`.

    python benchmarks/metaworld_experts.py --episodes 50 --out benchmarks/results/metaworld/experts.json
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.envs import make_env  # noqa: E402
from cosmos3_robot.envs.experts import MetaWorldExpert  # noqa: E402
from cosmos3_robot.envs.metaworld import TASKS, env_id  # noqa: E402
from cosmos3_robot.eval.metrics import success_summary  # noqa: E402
from cosmos3_robot.files import write_json_atomic  # noqa: E402
from cosmos3_robot.scripts.common import commit  # noqa: E402

ARMS = ("held", "native", "own")
p = argparse.ArgumentParser()
p.add_argument("--episodes", type=int, default=20)
p.add_argument("--seed", type=int, default=0, help="episode i resets with seed + i")
p.add_argument("--tasks", nargs="+", default=list(TASKS))
p.add_argument("--out", type=Path, default=Path("benchmarks/results/metaworld/experts.json"))
p.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
a = p.parse_args()
run = {"command": " ".join(sys.argv), "commit": commit(), "seeds": [a.seed, a.seed + a.episodes - 1]}
result = {**run, "tasks": {}}
if a.out.exists() and set(a.arms) != set(ARMS):  # merge into the earlier run's table
    result = json.loads(a.out.read_text())
    if result["seeds"] != run["seeds"]:
        raise SystemExit(f"{a.out} holds seeds {result['seeds']}, not {run['seeds']}: give another --out")
    result.setdefault("runs", []).append(run)


def our_episode(env, expert: MetaWorldExpert) -> tuple[bool, int]:
    """The expert through our env at 10 Hz (it reads the env's state); (success, our steps)."""
    done, n = False, 0
    while not done:
        _, _, term, trunc, info = env.step(expert.act())
        done, n = term or trunc, n + 1
    return bool(info["is_success"]), n


def own_episode(env, expert: MetaWorldExpert) -> tuple[bool, int]:
    """The expert at 80 Hz in Meta-World's own env for at most our step limit; (success, our steps)."""
    u = env.unwrapped
    raw, limit = u.raw_obs, u.max_steps
    for t in range(limit * u.repeat):
        raw, _, term, trunc, info = u.inner.step(np.clip(expert.policy.get_action(raw), -1, 1))
        if info["success"]:
            return True, t // u.repeat + 1
        if term or trunc:
            break
    return False, limit


for task in a.tasks:
    env = make_env(env_id(task), image_size=32)
    row = result["tasks"].get(task, {})
    for name in a.arms:
        expert = MetaWorldExpert(env, native_rate=name == "native")
        wins, steps, t0 = [], [], time.perf_counter()
        episode = own_episode if name == "own" else our_episode
        for i in range(a.episodes):
            env.reset(seed=a.seed + i)
            won, n = episode(env, expert)
            wins.append(won)
            steps.append(n)
        row[name] = {**success_summary(wins), "steps": {"min": min(steps), "median": float(np.median(steps)),
                     "max": max(steps)}, "seconds": time.perf_counter() - t0}  # fmt: skip
        s = row[name]
        print(f"{task:26s} {name:6s} {s['successes']}/{s['episodes']} steps {s['steps']}", flush=True)
    env.close()
    result["tasks"][task] = row
    write_json_atomic(a.out, result)
