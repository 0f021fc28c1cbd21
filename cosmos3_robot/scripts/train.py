"""`cosmos3-robot train`: Hydra composes `cosmos3_robot/conf/train.yaml` on top of the dataclass schema
(`training/config.py`), then the library trainer runs on a plain `TrainConfig`.

    cosmos3-robot train stage=generator model=sim-small data.source=lerobot data.root=data/push steps=2000
    cosmos3-robot train stage=reasoner model=tiny data.source=synthetic steps=50 out=runs/r1
    torchrun --nproc_per_node 2 -m cosmos3_robot.cli train model=tiny data.batch_size=8 ...
    cosmos3-robot train stage=vae --repo-id local/push --root data/push --out runs/vae   (= train-vae)

Hydra's compose API is used, so the working directory is never changed and no `outputs/` folder
or `.hydra/` subfolder is written; the resolved config is saved as `<out>/config.yaml` instead.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

from cosmos3_robot.model import ModelConfig
from cosmos3_robot.training.config import TrainConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

HELP = f"""usage: cosmos3-robot train [KEY=VALUE ...] [--print-config]

Train the model. Stages: reasoner (stage 1: Reasoner + ViT, next-token CE on text),
generator (stage 2: Generator only, flow matching over mixed action modes), vae (stage 0:
forwarded to `cosmos3-robot train-vae`, whose --flags it takes).

Configuration: Hydra overrides on {CONF_DIR}/train.yaml, checked against the dataclass
schema cosmos3_robot.training.config.TrainConfig (an unknown key is an error). Defaults in [ ];
`--print-config` prints every key with its value.
  model=tiny|sim-small [tiny]                  model preset (conf/model/*.yaml)
  model.init=PATH  model.vit=tiny|sim-small    start from a save_model folder; train a ViT
  stage=reasoner|generator [generator]  steps=N [1000]  seed=S [0]  precision=fp32|bf16 [fp32]
  out=DIR [runs/train]  minutes=M [none]   a wall-clock budget of the training steps, over resumes:
                                           stops at whichever of steps / minutes comes first
  data.source=synthetic|lerobot [synthetic]  data.root=DIR  data.batch_size=B (global) [8]
  +data.options.K=V   (lerobot: a field of cosmos3_robot.training.data.DataConfig; the `+` is
                      needed because options start empty): vae=DIR (train-vae's vae/ folder, the
                      frozen VAE) or vae_preset=tiny (random VAE, smoke tests only), num_frames=1+4k,
                      num_actions=N, obs_frames=K, image_key, action_key, val_fraction, clip_stride,
                      latent_cache=true|DIR, action_free_folder=DIR, tokenizer=DIR, allow_weak_vae,
                      reasoner_frame=true (show the Reasoner each clip's first frame through the
                      ViT of model.init, a reasoner-stage model), text=qa|caption|mixed (reasoner)
  model.latent_channels=C                      the frozen VAE's latent channels, if not the preset's
  model.state_dim=S                            condition policy and forward dynamics on
                                               observation.state, padded to S dims [none]
  optim.lr= [3e-4]  optim.warmup_steps= [100]  optim.weight_decay= [0.05]  optim.grad_clip= [1.0]
  optim.min_lr_ratio= [0.1]
  generator.modes='{{forward_dynamics:0.3,inverse_dynamics:0.3,policy:0.3,video:0.1}}'
  generator.mode_mix=per_sample|per_batch  generator.prompt_dropout=P  generator.sigma.shift=S
  generator.state_noise=STD [0]                noise on the normalised conditioning state in training
  checkpoint.every=N [500]  checkpoint.keep_last=K [3]  checkpoint.resume=auto|never|PATH [auto]
  micro_batch_size=M  ema_decay=D [0.999]  log_every=N [10]  val_every=N [200]  val_batches=N
  threads=T [torch's default]
  distributed.strategy=ddp|fsdp  distributed.backend=auto|gloo|nccl   (under torchrun)

Outputs in `out`: checkpoints/step-*/ (resumable), model/ (EMA weights, load_model-able),
metrics.jsonl, plots/loss_<mode>.png, config.yaml.
  --print-config   print the composed config and exit
"""


def build_data(cfg: TrainConfig, model_config: ModelConfig, vit=None):
    """The DataSource for cfg.data: "synthetic" here; "lerobot" from cosmos3_robot.training.data
    (data.root / data.repo_id / data.batch_size / data.seed, and data.options = its DataConfig fields)."""
    d = cfg.data
    if d.source == "synthetic":
        from cosmos3_robot.training.data.synthetic import SyntheticData

        return SyntheticData(model_config, cfg.stage, d.batch_size, seed=d.seed, **d.options)
    if d.source != "lerobot":
        raise ValueError(f"data.source={d.source!r}; choose 'synthetic' or 'lerobot'")
    from cosmos3_robot.training import data as data_module  # noqa: I001

    known = {f.name for f in dataclasses.fields(data_module.DataConfig)}
    unknown = sorted(set(d.options) - known)
    if unknown:
        raise ValueError(
            f"unknown data option(s) {unknown}; the lerobot source takes +data.options.K=V for K in {sorted(known)}"
        )
    dcfg = data_module.DataConfig(
        root=d.root, repo_id=d.repo_id, batch_size=d.batch_size, seed=d.seed, **d.options
    )
    if cfg.stage == "reasoner":
        return data_module.make_reasoner_data(dcfg, model_config, vit)
    return data_module.make_generator_data(dcfg, model_config, vit)


# ------------------------------------------------------------------------------------------------
# Hydra
# ------------------------------------------------------------------------------------------------


# Dict-valued keys that a command-line value replaces whole (Hydra would merge it into the default,
# so `generator.modes={video:1.0}` would still train all four modes).
REPLACED_DICTS = ("generator.modes", "generator.loss_weights")


def _parse_value(text: str):
    from hydra._internal.grammar.utils import escape_special_characters  # noqa: F401  (grammar loaded)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_override(f"x={text}").value()


def register_schema() -> None:
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="train_schema", node=TrainConfig)


def compose(overrides: list[str]) -> TrainConfig:
    """Compose conf/train.yaml + overrides into a validated TrainConfig (no cwd change, no outputs)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    register_schema()
    try:
        # A dict given on the command line replaces the default whole (not merged, and not refused for
        # keys the default lacks): it is applied after Hydra, and TrainConfig validates its keys.
        replaced = [o for o in overrides if o.split("=", 1)[0].lstrip("+") in REPLACED_DICTS]
        rest = [o for o in overrides if o not in replaced]
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="train"):
            raw = hydra_compose(config_name="train", overrides=rest)
        raw = OmegaConf.masked_copy(raw, [k for k in raw if k != "hydra"]) if "hydra" in raw else raw
        OmegaConf.set_struct(raw, False)
        for item in replaced:
            key, text = item.split("=", 1)
            OmegaConf.update(
                raw, key.lstrip("+"), OmegaConf.create({"v": _parse_value(text)})["v"], merge=False
            )
        OmegaConf.set_struct(raw, True)
        return OmegaConf.to_object(raw)
    except (HydraException, OmegaConfBaseException) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        cause = e.__cause__
        if cause is not None and str(cause):
            msg += f" ({str(cause).splitlines()[0]})"
        if "data.options." in msg and "+data.options." not in msg:
            msg += "; data.options start empty, so each key needs a leading +: +data.options.KEY=VALUE"
        raise ValueError(f"bad train config: {msg}. See `cosmos3-robot train --help` for the keys.") from e


def main(argv: list[str]) -> int:
    argv = list(argv)
    if any(a in ("-h", "--help") for a in argv) and "stage=vae" not in argv:
        print(HELP)
        return 0
    if "stage=vae" in argv:
        from cosmos3_robot.scripts import train_vae as vae

        return int(vae.main([a for a in argv if a != "stage=vae"]) or 0)
    print_only = "--print-config" in argv
    overrides = [a for a in argv if a != "--print-config"]
    bad = [a for a in overrides if a.startswith("-")]
    if bad:
        print(
            f"cosmos3-robot train: unknown option(s) {bad}; settings are KEY=VALUE overrides (see --help)",
            file=sys.stderr,
        )
        return 2
    try:
        cfg = compose(overrides)
    except ValueError as e:
        print(f"cosmos3-robot train: {e}", file=sys.stderr)
        return 2
    import yaml

    text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    if print_only:
        print(text)
        return 0
    return run(cfg, config_text=text)


def run(cfg: TrainConfig, config_text: str | None = None) -> int:
    train(cfg, config_text)
    return 0


def train(cfg: TrainConfig, config_text: str | None = None) -> dict:
    """Build, train and export as `cosmos3-robot train` does; returns the trainer's summary."""
    from cosmos3_robot.infra.distributed import init_distributed, shutdown
    from cosmos3_robot.training.trainer import Trainer, build_model

    info = init_distributed(cfg.distributed.backend)
    say = print if cfg.progress and info.is_main else (lambda *a, **k: None)
    try:
        t0 = time.perf_counter()
        say(f"building the model ({cfg.model.preset}) ...", flush=True)
        model, vit = build_model(cfg)
        say(f"opening the data ({cfg.data.source}: dataset, frozen VAE, latent cache) ...", flush=True)
        data = build_data(cfg, model.config, vit)
        trainer = Trainer(cfg, data, model=model, vit=vit, dist_info=info)
        say(f"ready in {time.perf_counter() - t0:.1f} s; training", flush=True)
        if info.is_main and config_text is not None:
            Path(cfg.out).mkdir(parents=True, exist_ok=True)
            (Path(cfg.out) / "config.yaml").write_text(config_text)
        summary = trainer.fit()
        if info.is_main:
            if summary["steps_run"] == 0:
                print(
                    f"{cfg.out} is already trained to step {summary['step']} (steps={cfg.steps}, "
                    f"minutes={cfg.minutes}); nothing to do"
                )
            else:
                loss = summary["final_loss"]
                print(
                    f"trained {summary['steps_run']} steps (to step {summary['step']}) in {summary['seconds']:.1f} s; "
                    f"mean loss over the last {summary['final_loss_window']} steps {loss:.4f}"
                )
            print(
                f"model: {summary['model']}  metrics: {summary['metrics']}  plots: {', '.join(summary['plots'])}"
            )
    finally:
        shutdown()
    return summary
