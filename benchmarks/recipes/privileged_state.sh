#!/usr/bin/env bash
# Issue 18: can the policy path (Generator, action chunks, normalisation, re-planning) succeed at all
# when the information the task needs is handed to it? One sim-small model conditioned on the
# simulator's own state (observation.environment_state: goal xy, distractor xy, fingertip xy) instead of
# proprioception, on a seeded random VAE (the frames then carry no trained features), the same 150
# noisy-expert Reach episodes at 128 px and the same training settings as `benchmark policies`; then
# `rollout` on the 50 held-out seeds 10000..10049. Resumable (train resumes, rollout keeps episodes).
# Usage: privileged_state.sh DATA_DIR [MINUTES]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
MINUTES=${2:-15}
CLI=$REPO/.venv/bin/cosmos3-robot
OUT=$DATA/privileged
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
$CLI train model=sim-small model.latent_channels=48 model.state_dim=6 minutes="$MINUTES" steps=1000000 \
  seed=0 out="$OUT" data.source=lerobot data.root="$DATA/reach128" data.batch_size=16 \
  +data.options.vae_preset=tiny +data.options.state_key=observation.environment_state \
  +data.options.num_frames=5 +data.options.num_actions=10 +data.options.pad=true \
  +data.options.latent_cache="$DATA/latents_random" +data.options.val_fraction=0.1 \
  optim.lr=1e-3 optim.warmup_steps=50 checkpoint.every=200 val_every=0 progress=false
$CLI rollout --model "$OUT/model" --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 \
  --execute 5 --steps 10 --out "$OUT/rollout" --no-video --no-progress
echo PRIVILEGED_DONE
