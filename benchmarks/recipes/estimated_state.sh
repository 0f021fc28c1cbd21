#!/usr/bin/env bash
# Issue 18: the vision policy as perception + the policy path. A state estimator learns the
# simulator's state (goal, distractor and fingertip xy) from the frame and the instruction on the
# recorded `observation.environment_state`; the `full` arm of privileged_state.sh (joints + simulator
# state, the same data and settings, POLICY_MINUTES of training) is the policy; at rollout the
# estimate replaces the simulator's state, which is never read. Rolled out on EPISODES held-out seeds
# from 10000, re-planning every 5 and every 2 actions (EXECUTES).
# Every stage resumes (train-estimator and train from their checkpoints, rollout keeps episodes).
# Usage: estimated_state.sh DATA_DIR [ESTIMATOR_MINUTES] [POLICY_MINUTES] [ESTIMATOR_STEPS] [POLICY_DIR] [EPISODES]
#   the 15-minute policy: estimated_state.sh DATA 10 15 2400            (POLICY_DIR = DATA/privileged_full)
#   the 45-minute policy: estimated_state.sh DATA 10 45 2400 DATA/privileged_full45 100   (EXECUTES="2")
# Another task: TASK=cosmos3_robot/Push-v0 DATASET=DIR LATENTS=DIR ESTIMATOR=DIR (defaults: Reach,
# DATA/reach128, DATA/latents_random, DATA/estimator); privileged_state.sh reads the same variables.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
EMIN=${2:-10}
PMIN=${3:-15}
ESTEPS=${4:-3000}
POLICY=${5:-$DATA/privileged_full}
EPISODES=${6:-50}
CLI=$REPO/.venv/bin/cosmos3-robot
export TASK=${TASK:-cosmos3_robot/Reach-v0}
export DATASET=$(realpath "${DATASET:-$DATA/reach128}")
export LATENTS=${LATENTS:-$DATA/latents_random}
ESTIMATOR=${ESTIMATOR:-$DATA/estimator}
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
$CLI train-estimator --root "$DATASET" --out "$ESTIMATOR" --max-minutes "$EMIN" --steps "$ESTEPS" \
  --holdout-episodes 50 --seed 0
[ -f "$POLICY/model/config.json" ] || bash "$REPO/benchmarks/recipes/privileged_state.sh" "$DATA" "$PMIN" full "$POLICY"
for EXECUTE in ${EXECUTES:-5 2}; do
  $CLI rollout --model "$POLICY/model" --estimator "$ESTIMATOR/estimator" \
    --env "$TASK" --episodes "$EPISODES" --seed 10000 --execute "$EXECUTE" --steps 10 \
    --out "$POLICY/estimated_rollout_execute$EXECUTE" --no-video --no-progress
done
echo ESTIMATED_DONE
