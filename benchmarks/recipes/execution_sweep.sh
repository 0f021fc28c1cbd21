#!/usr/bin/env bash
# Issue 18 item 5: how the policy executes its 1 s chunks. On a trained model (default: the state-on
# model of state_ablation.sh): re-plan after every 2nd or 10th action (the recipes use 5), or ACT's
# temporal ensembling (re-plan each step, average the overlapping chunks, m = 0.01). 50 held-out
# seeds each; each rollout is written beside the model folder (rollout_execute2, ...).
# Usage: execution_sweep.sh DATA [MODEL_DIR]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
MODEL=$(realpath "${2:-$DATA/state_ablation/on/model}")
RUN=$(dirname "$MODEL")
CLI=$REPO/.venv/bin/cosmos3-robot
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
common=(--model "$MODEL" --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 --steps 10 --no-video --no-progress)
$CLI rollout "${common[@]}" --execute 2 --out "$RUN/rollout_execute2"
$CLI rollout "${common[@]}" --execute 10 --out "$RUN/rollout_execute10"
$CLI rollout "${common[@]}" --ensemble 0.01 --out "$RUN/rollout_ensemble"
echo SWEEP_DONE
