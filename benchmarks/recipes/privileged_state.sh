#!/usr/bin/env bash
# Issue 18: can the policy path (Generator, action chunks, normalisation, re-planning) succeed at all
# when the information the task needs is handed to it? One sim-small model conditioned on the
# simulator's own state (observation.environment_state: goal xy, distractor xy, fingertip xy) instead of
# proprioception, on a seeded random VAE (the frames then carry no trained features), the same 150
# noisy-expert Reach episodes at 128 px and the same training settings as `benchmark policies`; then
# `rollout` on the 50 held-out seeds 10000..10049. Resumable (train resumes, rollout keeps episodes).
# ARM picks the state token: `environment` (the simulator's state, above), `full` (joint positions and
# velocities followed by the simulator's state: everything the task needs), or `proprio` (joint
# positions and velocities alone: the control arm, which must find the goal in the frames), or
# `act_full` (LeRobot ACT on camera + joints + the simulator's state, `train-baseline
# --environment-state`, the same minutes, batch 8, chunk 10, execute 5: the baseline for `full`).
# Usage: privileged_state.sh DATA_DIR [MINUTES] [ARM] [OUT_DIR] (OUT_DIR: default DATA_DIR/privileged_<arm>)
# Another task: TASK=cosmos3_robot/Push-v0 DATASET=DIR LATENTS=DIR (defaults: Reach, DATA_DIR/reach128,
# DATA_DIR/latents_random); the state widths are read from the dataset. MODES="action_policy: 1" trains
# those generator.modes instead of the trainer's mix of the four design modes.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
MINUTES=${2:-15}
CLI=$REPO/.venv/bin/cosmos3-robot
ARM=${3:-environment}
case $ARM in
  environment) KEY=observation.environment_state OUT=$DATA/privileged ;;
  full) KEY=observation.state+observation.environment_state OUT=$DATA/privileged_full ;;
  proprio) KEY=observation.state OUT=$DATA/privileged_proprio ;;
  act_full) OUT=$DATA/privileged_act_full ;;
  *) echo "ARM must be environment, full, proprio or act_full, got '$ARM'" >&2; exit 2 ;;
esac
OUT=${4:-$OUT}
TASK=${TASK:-cosmos3_robot/Reach-v0}
DATASET=$(realpath "${DATASET:-$DATA/reach128}")
LATENTS=${LATENTS:-$DATA/latents_random}
width() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['features'][sys.argv[2]]['shape'][0])" \
  "$DATASET/meta/info.json" "$1"; }
case $ARM in
  environment) DIM=$(width observation.environment_state) ;;
  full) DIM=$(( $(width observation.state) + $(width observation.environment_state) )) ;;
  proprio) DIM=$(width observation.state) ;;
esac
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
if [ "$ARM" = act_full ]; then
  $CLI train-baseline --kind act --root "$DATASET" --out "$OUT" --minutes "$MINUTES" --batch-size 8 \
    --chunk 10 --execute 5 --seed 0 --environment-state --no-progress
  $CLI rollout --policy "lerobot:$OUT/model" --env "$TASK" --episodes 50 --seed 10000 \
    --out "$OUT/rollout" --no-video --no-progress
  echo PRIVILEGED_DONE "$ARM"
  exit 0
fi
$CLI train model=sim-small model.latent_channels=48 model.state_dim=$DIM minutes="$MINUTES" steps=1000000 \
  seed=0 out="$OUT" data.source=lerobot data.root="$DATASET" data.batch_size=16 \
  +data.options.vae_preset=tiny +data.options.state_key=$KEY \
  +data.options.num_frames=5 +data.options.num_actions=10 +data.options.pad=true \
  +data.options.latent_cache="$LATENTS" +data.options.val_fraction=0.1 \
  optim.lr=1e-3 optim.warmup_steps=50 checkpoint.every=200 val_every=0 progress=false \
  ${MODES:+"generator.modes={$MODES}"}
$CLI rollout --model "$OUT/model" --env "$TASK" --episodes 50 --seed 10000 \
  --execute 5 --steps 10 --out "$OUT/rollout" --no-video --no-progress
echo PRIVILEGED_DONE $ARM
