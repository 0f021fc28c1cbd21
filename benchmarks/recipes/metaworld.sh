#!/usr/bin/env bash
# Issue 20 on Meta-World v3: ours (state estimator + joints-and-state policy, the Reach recipe of
# estimated_state.sh) against LeRobot ACT at equal wall-clock budget, per task, on the same
# demonstrations and the same held-out env seeds.
#   1. record: DEMOS noisy-expert episodes (Meta-World's scripted expert, --noise 0.1, env seeds 0..)
#   2. ours:   train-estimator (EST_MIN minutes, the last HOLDOUT episodes held out) on
#              observation.environment_state, then the `full` policy (sim-small on joints + that
#              state, seeded random tiny VAE, POLICY_MIN minutes, the settings of privileged_state.sh),
#              rolled out on EPISODES seeds from 10000 re-planning every 2 actions, the state read
#              off the frame by the estimator (the simulator's is never read); then the same model
#              trained on the policy mode alone for the same POLICY_MIN, rolled out the same way
#   3. ACT:    train-baseline --kind act on camera + joints for EST_MIN + POLICY_MIN minutes, all
#              episodes, chunk 10, execute 2, batch 8; rolled out on the same seeds
# Every stage resumes (record, the trainers and rollout keep what finished).
# Usage: metaworld.sh DATA_DIR [TASKS...]   (default tasks: door-open-v3 button-press-topdown-v3)
#   env: DEMOS=100 EPISODES=50 EST_MIN=5 POLICY_MIN=15 HOLDOUT=10 (estimator episodes held out)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DATA=$(realpath -m "${1:-data}")
shift || true
TASKS=${*:-door-open-v3 button-press-topdown-v3}
DEMOS=${DEMOS:-100}
EPISODES=${EPISODES:-50}
EST_MIN=${EST_MIN:-5}
POLICY_MIN=${POLICY_MIN:-15}
HOLDOUT=${HOLDOUT:-10}
CLI=$REPO/.venv/bin/cosmos3-robot
export MUJOCO_GL=egl HF_HUB_OFFLINE=1
width() {  # width INFO_JSON FEATURE: the feature's vector width in a LeRobot dataset
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['features'][sys.argv[2]]['shape'][0])" "$1" "$2"
}
policy() {  # policy OUT [overrides...]: sim-small on joints + state of task $D (a finished one is kept)
  local out=$1
  shift
  [ -d "$out/model" ] && return 0
  $CLI train model=sim-small model.latent_channels=48 model.state_dim=$DIM minutes="$POLICY_MIN" steps=1000000 \
    seed=0 out="$out" data.source=lerobot data.root="$D/data" data.batch_size=16 \
    +data.options.vae_preset=tiny +data.options.state_key=observation.state+observation.environment_state \
    +data.options.num_frames=5 +data.options.num_actions=10 +data.options.pad=true \
    +data.options.latent_cache="$D/latents" +data.options.val_fraction=0.1 \
    optim.lr=1e-3 optim.warmup_steps=50 checkpoint.every=200 val_every=0 progress=false "$@"
}
ours_rollout() {  # ours_rollout MODEL_RUN OUT: the state read off the frame by task $D's estimator
  $CLI rollout --model "$1/model" --estimator "$D/estimator/estimator" --env "$ENV" --episodes "$EPISODES" \
    --seed 10000 --execute 2 --steps 10 --out "$2" --no-video --no-progress
}
for T in $TASKS; do
  ENV=cosmos3_robot/MetaWorld-$T
  D=$DATA/$T
  mkdir -p "$D"
  $CLI record --env "$ENV" --episodes "$DEMOS" --noise 0.1 --seed 0 --image-size 128 --root "$D/data" \
    --no-progress
  $CLI train-estimator --root "$D/data" --out "$D/estimator" --max-minutes "$EST_MIN" --steps 100000 \
    --holdout-episodes "$HOLDOUT" --seed 0
  INFO=$D/data/meta/info.json
  DIM=$(( $(width "$INFO" observation.state) + $(width "$INFO" observation.environment_state) ))
  policy "$D/policy"
  ours_rollout "$D/policy" "$D/ours_rollout"
  # the same model trained on the policy mode alone (all its steps spent on acting)
  policy "$D/policy_only" 'generator.modes={forward_dynamics: 0, inverse_dynamics: 0, policy: 1, video: 0}'
  ours_rollout "$D/policy_only" "$D/ours_policy_only_rollout"
  $CLI train-baseline --kind act --root "$D/data" --out "$D/act" --minutes $(( EST_MIN + POLICY_MIN )) \
    --batch-size 8 --chunk 10 --execute 2 --seed 0 --no-progress
  $CLI rollout --policy "lerobot:$D/act/model" --env "$ENV" --episodes "$EPISODES" --seed 10000 \
    --out "$D/act_rollout" --no-video --no-progress
  echo "METAWORLD_DONE $T"
done
