#!/usr/bin/env bash
# The shipped Reach set (artefacts/reach/), trained again from nothing: `make reproduce-reach`.
#   1. record 1500 noisy-expert Reach episodes at 128 px (seeds 0-1499)
#   2. the state estimator (10 min cap, 2400 steps) and the 45-minute joints + scene-state policy, then
#      its rollouts on 100 held-out seeds with the estimate (estimated_state.sh)
#   3. the frame-to-frame labeller (12 min cap, 3000 steps)
#   4. bf16 copies into OUT (default artefacts/reach.new; compare, then replace artefacts/reach by hand)
# About 2 hours on 2 cores (record 6 min, latent cache 13, estimator 7, policy 45, rollouts ~30,
# labeller 12). Every stage resumes. Usage: reach_artefacts.sh DATA_DIR [OUT]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath -m "${1:?give a data folder: reach_artefacts.sh DATA_DIR [OUT]}")
OUT=$(realpath -m "${2:-$REPO/artefacts/reach.new}")
CLI=$REPO/.venv/bin/cosmos3-robot
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
mkdir -p "$DATA"
$CLI record --env cosmos3_robot/Reach-v0 --episodes 1500 --noise 0.2 --seed 0 --root "$DATA/reach128" --no-progress
EXECUTES=2 bash "$REPO/benchmarks/recipes/estimated_state.sh" "$DATA" 10 45 2400 "$DATA/privileged_full45" 100
$CLI train-labeller --root "$DATA/reach128" --out "$DATA/labeller" --max-minutes 12 --steps 3000 \
  --holdout-episodes 50 --seed 0
for pair in "privileged_full45/model policy" "estimator/estimator estimator" "labeller/labeller labeller"; do
  set -- $pair
  [ -d "$OUT/$2" ] || $CLI export-bf16 "$DATA/$1" "$OUT/$2"
done
echo "REACH_ARTEFACTS_DONE $OUT"
