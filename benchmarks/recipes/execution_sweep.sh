#!/usr/bin/env bash
# Issue 18 item 5: how the policy executes its 1 s chunks, on the state-on model of
# state_ablation.sh: every 10th, 5th (the ablation's) action re-planned, or ACT's temporal ensembling
# (re-plan each step, average the overlapping chunks, m = 0.01). 50 held-out seeds each.
# Usage: execution_sweep.sh DATA
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
CLI=$REPO/.venv/bin/cosmos3-robot
MODEL=$DATA/state_ablation/on/model
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
common=(--model "$MODEL" --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 --steps 10 --no-video --no-progress)
$CLI rollout "${common[@]}" --execute 10 --out "$DATA/state_ablation/on/rollout_execute10"
$CLI rollout "${common[@]}" --ensemble 0.01 --out "$DATA/state_ablation/on/rollout_ensemble"
echo SWEEP_DONE
