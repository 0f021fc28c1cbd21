#!/usr/bin/env bash
# Issue 20, first row: LeRobot ACT on the same 150 noisy-expert Reach episodes at 128 px as
# benchmarks/recipes/state_ablation.sh, camera + state, chunk 10 / execute 5 like our policy, for a
# wall-clock budget of MINUTES; then `rollout` on the same 50 held-out seeds (10000..10049).
# Resumable (train-baseline continues; rollout keeps finished episodes). Usage: act_reach.sh DATA [MINUTES]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
MINUTES=${2:-15}
CLI=$REPO/.venv/bin/cosmos3-robot
OUT=$DATA/baselines/act_reach_${MINUTES}min
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
$CLI train-baseline --kind act --root "$DATA/reach128" --out "$OUT" --minutes "$MINUTES" --batch-size 8 \
  --chunk 10 --execute 5 --seed 0 --no-progress
$CLI rollout --policy "lerobot:$OUT/model" --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 \
  --out "$OUT/rollout" --no-video --no-progress
echo ACT_DONE
