#!/usr/bin/env bash
# Issue 18: the vision policy as perception + the policy path. A state estimator learns the
# simulator's state (goal, distractor and fingertip xy) from the frame and the instruction on the
# recorded `observation.environment_state`; the `full` arm of privileged_state.sh (joints + simulator
# state, the same data and settings) is the policy; at rollout the estimate replaces the simulator's
# state, which is never read. Rolled out on the 50 held-out seeds 10000..10049 at --execute 5 and 2.
# Every stage resumes (train-estimator and train from their checkpoints, rollout keeps episodes).
# Usage: estimated_state.sh DATA_DIR [ESTIMATOR_MINUTES] [POLICY_MINUTES] [ESTIMATOR_STEPS]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
EMIN=${2:-10}
PMIN=${3:-15}
ESTEPS=${4:-3000}
CLI=$REPO/.venv/bin/cosmos3-robot
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
$CLI train-estimator --root "$DATA/reach128" --out "$DATA/estimator" --max-minutes "$EMIN" --steps "$ESTEPS" \
  --holdout-episodes 50 --seed 0
[ -f "$DATA/privileged_full/model/config.json" ] || bash "$REPO/benchmarks/recipes/privileged_state.sh" "$DATA" "$PMIN" full
for EXECUTE in 5 2; do
  $CLI rollout --model "$DATA/privileged_full/model" --estimator "$DATA/estimator/estimator" \
    --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 --execute $EXECUTE --steps 10 \
    --out "$DATA/estimated_full/rollout_execute$EXECUTE" --no-video --no-progress
done
echo ESTIMATED_DONE
