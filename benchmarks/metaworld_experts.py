"""Meta-World's scripted experts at our 10 Hz, run at their own 80 Hz (`native_plan`, the default)
against held for the step (`native_rate=False`): success and episode length per task, noise-free,
on the same seeds.

    python benchmarks/metaworld_experts.py --episodes 20 --out benchmarks/results/metaworld/experts.json
"""

import argparse
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

p = argparse.ArgumentParser()
p.add_argument("--episodes", type=int, default=20)
p.add_argument("--seed", type=int, default=0, help="episode i resets with seed + i")
p.add_argument("--tasks", nargs="+", default=list(TASKS))
p.add_argument("--out", type=Path, default=Path("benchmarks/results/metaworld/experts.json"))
a = p.parse_args()
result = {"command": " ".join(sys.argv), "commit": commit(), "seeds": [a.seed, a.seed + a.episodes - 1],
          "tasks": {}}  # fmt: skip
for task in a.tasks:
    env = make_env(env_id(task), image_size=32)
    row = {}
    for name, native in (("held", False), ("native", True)):
        expert = MetaWorldExpert(env, native_rate=native)
        wins, steps, t0 = [], [], time.perf_counter()
        for i in range(a.episodes):
            obs, _ = env.reset(seed=a.seed + i)
            done, n = False, 0
            while not done:
                obs, _, term, trunc, info = env.step(expert.act(obs))
                done, n = term or trunc, n + 1
            wins.append(bool(info["is_success"]))
            steps.append(n)
        row[name] = {**success_summary(wins), "steps": {"min": min(steps), "median": float(np.median(steps)),
                     "max": max(steps)}, "seconds": time.perf_counter() - t0}  # fmt: skip
        s = row[name]
        print(f"{task:26s} {name:6s} {s['successes']}/{s['episodes']} steps {s['steps']}", flush=True)
    env.close()
    result["tasks"][task] = row
    write_json_atomic(a.out, result)
