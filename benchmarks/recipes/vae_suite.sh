#!/usr/bin/env bash
# The suite VAE of issue 18, from nothing: demonstrations of both envs at 128 px, then one VAE over
# both. Resumable: re-running continues each step where it stopped (record continues after its
# committed episodes, train-vae from its checkpoint). Usage: benchmarks/recipes/vae_suite.sh DATA_DIR
set -euo pipefail
DATA=${1:-data}
cd "$(dirname "$0")/../.."
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
CLI=.venv/bin/cosmos3-robot
$CLI record --env cosmos3_robot/Reach-v0 --episodes 150 --root "$DATA/reach128" --image-size 128 --noise 0.2 --seed 0
$CLI record --env cosmos3_robot/Push-v0 --episodes 150 --root "$DATA/push128" --image-size 128 --noise 0.2 --seed 0
$CLI train-vae --root "$DATA/reach128" "$DATA/push128" --out "$DATA/vae128" --preset sim-small \
  --latent-channels 48 --steps 4000 --video-fraction 0.5 --holdout-episodes 4 --eval-every 250 \
  --save-every 250 --seed 0
