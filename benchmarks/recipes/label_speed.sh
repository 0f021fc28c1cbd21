#!/usr/bin/env bash
# Issue 19: `label` speed at 128 px on 2 cores. A sim-small model with the suite VAE's 48 channels,
# trained 2 steps (speed does not depend on how trained it is), labels the first 40 Reach episodes
# three ways. Needs the data and VAE of benchmarks/recipes/vae_suite.sh. Usage: label_speed.sh DATA_DIR
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath "${1:-data}")
CLI=$REPO/.venv/bin/cosmos3-robot
WORK=$(mktemp -d /tmp/label-speed-XXXX)
cd "$WORK"
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
$CLI train model=sim-small model.latent_channels=48 steps=2 out="$WORK/run" data.source=lerobot \
  data.root="$DATA/reach128" +data.options.vae="$DATA/vae128/vae" +data.options.num_frames=5 \
  +data.options.num_actions=4 +data.options.allow_weak_vae=true progress=false data.batch_size=4 val_every=0
for cfg in "2 16" "1 16" "1 32"; do
  set -- $cfg
  $CLI label --model run/model --source "$DATA/reach128" --out "$WORK/out_$1_$2" --max-episodes 40 \
    --steps 10 --samples "$1" --batch "$2" --no-progress
done
echo "reports: $WORK/out_*/meta/cosmos3_label.json"
