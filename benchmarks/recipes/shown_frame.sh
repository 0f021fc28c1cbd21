#!/usr/bin/env bash
# Issue 18, item 4: the current frame in the Reasoner. Stage 1 trains the Reasoner and a sim-small ViT on
# questions about the recorded scene (the frame, the instruction that names the target's colour, then
# "where is the target relative to the fingertip?" -> "up and to the left, 0.12 m", from the simulator's
# state); stage 2 freezes both and trains the Generator on clips that show the Reasoner their first frame
# before the instruction (+data.options.reasoner_frame=true); the policy then shows it the frame it plans
# from. Everything else is the `proprio` arm of privileged_state.sh (the same 150 Reach episodes, seeded
# random VAE, joints as state, sim-small, batch 16, lr 1e-3), so the two differ only in the shown frame.
# Resumable (train resumes, rollout keeps episodes).
# Usage: shown_frame.sh DATA_DIR [REASONER_MINUTES] [GENERATOR_MINUTES]
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
RMIN=${2:-10}
GMIN=${3:-15}
CLI=$REPO/.venv/bin/cosmos3-robot
OUT=$DATA/shown_frame
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
MODEL="model=sim-small model.latent_channels=48 model.state_dim=4 seed=0"
DATA_ARGS="data.source=lerobot data.root=$DATA/reach128 data.batch_size=16 +data.options.val_fraction=0.1"
$CLI train stage=reasoner $MODEL model.vit=sim-small minutes="$RMIN" steps=1000000 out="$OUT/reasoner" \
  $DATA_ARGS +data.options.text=qa optim.lr=1e-3 optim.warmup_steps=50 checkpoint.every=200 val_every=200 \
  progress=false
$CLI train stage=generator $MODEL model.init="$OUT/reasoner/model" minutes="$GMIN" steps=1000000 \
  out="$OUT/generator" $DATA_ARGS +data.options.vae_preset=tiny +data.options.state_key=observation.state \
  +data.options.num_frames=5 +data.options.num_actions=10 +data.options.pad=true \
  +data.options.latent_cache="$DATA/latents_random" +data.options.reasoner_frame=true \
  optim.lr=1e-3 optim.warmup_steps=50 checkpoint.every=200 val_every=0 progress=false
$CLI rollout --model "$OUT/generator/model" --env cosmos3_robot/Reach-v0 --episodes 50 --seed 10000 \
  --execute 5 --steps 10 --out "$OUT/rollout" --no-video --no-progress
echo SHOWN_FRAME_DONE
