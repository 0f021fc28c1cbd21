#!/usr/bin/env bash
# Issue 18, item 3: proprioceptive state on/off for the Reach policy, everything else equal.
# Two sim-small models (the suite VAE's 48 channels, clips of 5 frames, 1 s action chunks, all four
# modes) trained the same number of steps on the same 150 noisy-expert Reach episodes at 128 px; then
# `rollout` on 50 held-out seeds (10000..10049, disjoint from the recorded 0..149) and `evaluate`
# on the held-out episodes. Needs the data and VAE of benchmarks/recipes/vae_suite.sh.
# Resumable: re-running continues each stage (train resumes, rollout keeps finished episodes).
# Usage: state_ablation.sh DATA_DIR [STEPS]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
STEPS=${2:-1500}
CLI=$REPO/.venv/bin/cosmos3-robot
OUT=$DATA/state_ablation
mkdir -p "$OUT"
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
for arm in off on; do
  extra=()
  if [ "$arm" = on ]; then extra=(model.state_dim=4); fi
  $CLI train model=sim-small model.latent_channels=48 "${extra[@]}" steps="$STEPS" seed=0 \
    out="$OUT/$arm" data.source=lerobot data.root="$DATA/reach128" data.batch_size=16 \
    +data.options.vae="$DATA/vae128/vae" +data.options.num_frames=5 +data.options.num_actions=10 \
    +data.options.pad=true +data.options.latent_cache="$DATA/latents" +data.options.val_fraction=0.1 \
    optim.lr=1e-3 optim.warmup_steps=50 checkpoint.every=500 val_every=500 progress=false
  $CLI rollout --model "$OUT/$arm/model" --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 \
    --execute 5 --steps 10 --out "$OUT/$arm/rollout" --no-video --no-progress
  $CLI evaluate --model "$OUT/$arm/model" --root "$DATA/reach128" --out "$OUT/$arm/eval"
done
echo ABLATION_DONE
