"""One table over AVDC's 11 Meta-World tasks from the results files of several `benchmark policies
--variant metaworld` runs: each arm's success per task and its mean over the tasks run so far (the
issue's ≥ 60 % target is over all 11). The runs must share their rollout setting and seeds.

    python benchmarks/metaworld_table.py benchmarks/results/metaworld/native_expert_*.json \
        --out benchmarks/results/metaworld/avdc_table.json
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cosmos3_robot.envs.metaworld import AVDC_TASKS, env_id  # noqa: E402
from cosmos3_robot.files import write_json_atomic  # noqa: E402
from cosmos3_robot.scripts.bench_table import suite_table  # noqa: E402
from cosmos3_robot.scripts.common import commit  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("results", nargs="+", type=Path, help="results JSON files of `benchmark policies`")
p.add_argument("--out", type=Path, help="write the table's figures here (JSON)")
a = p.parse_args()
runs = []
for path in a.results:
    data = json.loads(path.read_text())
    summary = data.get("summary", data)  # a committed file keeps the run's summary under `summary`
    if "rows" not in summary or "variant" not in summary:
        raise SystemExit(f"{path} is not a results file of `benchmark policies` (no rows / variant)")
    runs.append((path.name, summary))
try:
    text, figures = suite_table(runs, {env_id(t): t for t in AVDC_TASKS})
except ValueError as e:
    raise SystemExit(str(e)) from None
print(text, end="")
if a.out is not None:
    write_json_atomic(a.out, {"command": " ".join(sys.argv), "commit": commit(), **figures})
    print(f"written: {a.out}")
