#!/usr/bin/env bash
# Issue 18: does a foreground-weighted reconstruction loss keep Reach's target colours? Two arms
# continue the suite VAE's step-1250 checkpoint (DATA/vae128b, from vae_suite.sh continued in fp32)
# for 22 minutes each, one after the other, same settings and schedule: --foreground-weight 10 and
# the plain loss; then benchmarks/vae_colours.py scores both. Resumable per arm.
# Usage: benchmarks/recipes/vae_foreground.sh DATA_DIR
set -euo pipefail
DATA=${1:-data}
cd "$(dirname "$0")/../.."
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
for arm in fg10 plain; do
  OUT="$DATA/vae128_$arm"
  if [ ! -f "$OUT/checkpoint.safetensors" ]; then mkdir -p "$OUT"; cp "$DATA/vae128b/checkpoint.safetensors" "$OUT/"; fi
  W=0; [ "$arm" = fg10 ] && W=10
  .venv/bin/cosmos3-robot train-vae --root "$DATA/reach128" "$DATA/push128" --out "$OUT" \
    --preset sim-small --latent-channels 48 --steps 4000 --video-fraction 0.5 --holdout-episodes 4 \
    --eval-every 250 --save-every 250 --max-minutes 22 --seed 0 --dtype fp32 --threads 2 --foreground-weight "$W"
done
.venv/bin/python benchmarks/vae_colours.py "$DATA/vae128/vae" "$DATA/vae128b/vae" "$DATA/vae128_fg10/vae" \
  "$DATA/vae128_plain/vae" --out benchmarks/results/vae/target_colours.json
