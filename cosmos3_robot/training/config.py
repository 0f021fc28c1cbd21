"""The typed schema of `cosmos3-robot train`.

These dataclasses are the source of truth (docs/design.md, "Configs"): Hydra composes the yaml files
in `cosmos3_robot/conf/` on top of them at the entry point (`train.py`), and the trainer only ever
sees a plain `TrainConfig`. Each section validates itself in `__post_init__` with an error that
says which field to change.

    TrainConfig
      stage, steps, seed, precision, out, micro_batch_size, log/val cadence, ema_decay
      model:       ModelSection      preset name (+ optional init folder, ViT preset)
      data:        DataSection       where batches come from; global batch size
      optim:       OptimSection      AdamW, warm-up + cosine, grad clipping
      generator:   GeneratorSection  mode mix, prompt dropout (CFG), σ sampler, loss weights
      checkpoint:  CheckpointSection cadence, keep-last-k, resume
      distributed: DistributedSection ddp | fsdp, backend
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

STAGES = ("reasoner", "generator", "vae")
PRECISIONS = ("fp32", "bf16")
DEFAULT_MODES = {"forward_dynamics": 0.3, "inverse_dynamics": 0.3, "policy": 0.3, "video": 0.1}


def _finite(obj: object, *names: str) -> None:
    """Raise naming the key unless each value is a finite number (NaN passes every < and > test)."""
    for name in names:
        v = getattr(obj, name)
        if not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v):
            section = {
                "OptimSection": "optim.",
                "SigmaSection": "generator.sigma.",
                "GeneratorSection": "generator.",
            }
            raise ValueError(
                f"{section.get(type(obj).__name__, '')}{name} must be a finite number, got {v!r}"
            )


def _choice(obj: object, name: str, choices: tuple[str, ...]) -> None:
    value = getattr(obj, name)
    if value not in choices:
        raise ValueError(f"{type(obj).__name__}.{name}={value!r}; choose one of {list(choices)}")


@dataclass
class ModelSection:
    preset: str = "tiny"  # a name from cosmos3_robot.model.config.PRESETS
    # A `save_model` folder to start from (e.g. the reasoner stage's output for the generator stage,
    # or an imported Qwen3-VL / Cosmos 3 folder). None: random init from `preset`.
    init: str | None = None
    vit: str | None = None  # ViT preset (cosmos3_robot.encoders.vit.vit_preset) trained with the Reasoner
    # The preset's latent channels replaced (= the frozen VAE's, e.g. 48 for a Wan2.2-width VAE).
    latent_channels: int | None = None
    # Proprioceptive-state width (observation.state padded to it): policy and forward dynamics are
    # conditioned on the state at the observed frame. None: no state input.
    state_dim: int | None = None

    def __post_init__(self) -> None:
        from cosmos3_robot.model.config import PRESETS

        if self.preset not in PRESETS:
            raise ValueError(f"model.preset={self.preset!r}; choose one of {sorted(PRESETS)}")
        if self.latent_channels is not None and self.latent_channels < 1:
            raise ValueError(f"model.latent_channels must be >= 1, got {self.latent_channels}")
        if self.state_dim is not None and self.state_dim < 1:
            raise ValueError(
                f"model.state_dim must be >= 1 (or null for no state input), got {self.state_dim}"
            )

    def config(self):
        """The ModelConfig this section describes (the preset, with its overrides)."""
        from cosmos3_robot.model.config import preset

        cfg = preset(self.preset)
        if self.latent_channels is not None:
            cfg = dataclasses.replace(cfg, latent_channels=self.latent_channels)
        if self.state_dim is not None:
            cfg = dataclasses.replace(cfg, state_dim=self.state_dim)
        return cfg


@dataclass
class DataSection:
    # "synthetic": random clips/text in the model's shapes (smoke tests, throughput);
    # "lerobot": cosmos3_robot.training.data (root/repo_id/batch_size/seed here, the rest of its
    # DataConfig in `options`, e.g. data.options.num_frames=9).
    source: str = "synthetic"
    root: str | None = None  # local dataset folder (LeRobot root, video folder, text corpus)
    repo_id: str | None = None
    batch_size: int = 8  # the GLOBAL batch: split evenly over ranks
    seed: int = 0  # shuffling / clip sampling seed (the data source's own)
    options: dict[str, Any] = field(default_factory=dict)  # source-specific settings

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"data.batch_size must be >= 1, got {self.batch_size}")


@dataclass
class OptimSection:
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.05  # on matrices only; norms, biases and embeddings-as-vectors get none
    grad_clip: float = 1.0  # max global grad norm; <= 0 disables clipping
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio at the last step

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)
        _finite(self, "lr", "eps", "weight_decay", "grad_clip", "min_lr_ratio")
        if self.lr <= 0 or self.warmup_steps < 0 or not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("optim needs lr > 0, warmup_steps >= 0 and 0 <= min_lr_ratio <= 1")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optim.betas must be two numbers in [0, 1), got {self.betas}")


@dataclass
class SigmaSection:
    kind: str = "logit_normal"  # or "uniform"
    mean: float = 0.0
    std: float = 1.0
    shift: float = 1.0

    def __post_init__(self) -> None:
        _finite(self, "mean", "std", "shift")
        _choice(self, "kind", ("logit_normal", "uniform"))
        if self.std <= 0 or self.shift <= 0:
            raise ValueError(f"generator.sigma.std and .shift must be > 0, got {self.std} and {self.shift}")


@dataclass
class GeneratorSection:
    """How the generator stage mixes the action modes (docs/design.md, "Training mixes the modes")."""

    modes: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MODES))
    mode_mix: str = "per_sample"  # "per_sample" or "per_batch"
    # Classifier-free guidance: a sample's prompt is replaced by the null prompt (id 0, length 1).
    prompt_dropout: float = 0.1
    sigma: SigmaSection = field(default_factory=SigmaSection)
    loss_weights: dict[str, float] = field(default_factory=dict)  # per modality, default 1
    per_frame_sigma: bool = False  # diffusion forcing: one σ per latent frame
    # Std of Gaussian noise added to the normalised conditioning state (its real dimensions) in
    # training steps, not validation: a policy that acts on an estimated state sees a noisy one, and
    # a few hundred demonstration frames are memorised less. 0 = off.
    state_noise: float = 0.0

    def __post_init__(self) -> None:
        from cosmos3_robot.tasks import TASKS

        unknown = sorted(set(self.modes) - set(TASKS))
        if unknown:
            raise ValueError(f"generator.modes has unknown modes {unknown}; choose from {sorted(TASKS)}")
        bad = {k: v for k, v in self.modes.items() if not (isinstance(v, int | float) and math.isfinite(v))}
        if bad:
            raise ValueError(f"generator.modes weights must be finite numbers, got {bad}")
        bad = {
            k: v
            for k, v in self.loss_weights.items()
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0)
        }
        if bad:
            raise ValueError(f"generator.loss_weights must be finite numbers >= 0, got {bad}")
        _finite(self, "prompt_dropout", "state_noise")
        if self.state_noise < 0:
            raise ValueError(f"generator.state_noise must be >= 0 (a std), got {self.state_noise}")
        if not self.modes or any(v < 0 for v in self.modes.values()) or sum(self.modes.values()) <= 0:
            raise ValueError(
                f"generator.modes needs non-negative proportions with a positive sum, got {self.modes}"
            )
        _choice(self, "mode_mix", ("per_sample", "per_batch"))
        if not 0 <= self.prompt_dropout < 1:
            raise ValueError(f"generator.prompt_dropout must be in [0, 1), got {self.prompt_dropout}")


@dataclass
class CheckpointSection:
    every: int = 500  # steps between checkpoints (a last one is always written at the end)
    keep_last: int = 3
    # "auto": resume from the newest checkpoint under <out>/checkpoints if there is one;
    # "never": start fresh (refuses when checkpoints exist, so a run is never silently mixed);
    # a path: resume from that checkpoint folder.
    resume: str = "auto"

    def __post_init__(self) -> None:
        if self.every < 1 or self.keep_last < 1:
            raise ValueError("checkpoint.every and checkpoint.keep_last must be >= 1")


@dataclass
class DistributedSection:
    strategy: str = "ddp"  # "ddp" or "fsdp" (FSDP2 fully_shard); used only under torchrun
    backend: str = "auto"  # "auto": nccl on CUDA, gloo on CPU

    def __post_init__(self) -> None:
        _choice(self, "strategy", ("ddp", "fsdp"))
        _choice(self, "backend", ("auto", "gloo", "nccl"))


@dataclass
class TrainConfig:
    stage: str = "generator"
    steps: int = 1000  # the step budget, and the learning-rate schedule's length
    # Wall-clock budget of the training steps (data + step, not validation or saving), summed over
    # resumes; training stops at whichever budget is reached first, and the learning-rate schedule
    # spans the steps the time allows at the pace so far. None: steps alone.
    minutes: float | None = None
    seed: int = 0
    # "bf16": autocast (weights, optimiser and EMA stay fp32). Measured on the 2-core dev CPU for
    # sim-small, batch 8: generator stage fp32 1.14 s/step vs bf16 8.9 s/step; reasoner 0.13 vs
    # 0.15 s/step. So fp32 is the default; bf16 is for accelerators.
    precision: str = "fp32"
    out: str = "runs/train"
    # Per-rank micro-batch: the rank's share of the global batch is processed in chunks of this size
    # with gradient accumulation. None = one chunk. Noise is seeded per *global* chunk, so a run
    # is the same function of (seed, step) whatever the number of ranks.
    micro_batch_size: int | None = None
    log_every: int = 10
    val_every: int = 200  # 0 disables periodic validation (one still runs at the end)
    val_batches: int | None = None  # cap on validation batches; None = all
    ema_decay: float = 0.999  # EMA of Generator weights; 0 disables
    progress: bool = True  # tqdm bar
    threads: int | None = None  # torch.set_num_threads; None leaves torch's default
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    generator: GeneratorSection = field(default_factory=GeneratorSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    distributed: DistributedSection = field(default_factory=DistributedSection)

    def __post_init__(self) -> None:
        _choice(self, "stage", STAGES)
        _choice(self, "precision", PRECISIONS)
        if self.steps < 1 or self.log_every < 1 or self.val_every < 0:
            raise ValueError("steps and log_every must be >= 1, val_every >= 0")
        if self.minutes is not None and not (math.isfinite(self.minutes) and self.minutes > 0):
            raise ValueError(f"minutes must be > 0 (or null for steps alone), got {self.minutes}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1 or null, got {self.micro_batch_size}")
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"threads must be >= 1 (or null for torch's default), got {self.threads}")
        stateless = self.stage == "reasoner" or (self.model.state_dim is None and self.model.init is None)
        if self.generator.state_noise > 0 and stateless:
            raise ValueError(
                f"generator.state_noise={self.generator.state_noise} perturbs the conditioning state, but this run "
                "has none; set model.state_dim (a generator-stage run with state), or drop generator.state_noise"
            )

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        """Rebuild from `to_dict`; unknown keys raise, naming them."""
        return _build(cls, data, "")


# Fields that may change between a checkpoint and the run resuming it: they do not change what is
# computed (only where it is written, how often it is reported, and how ranks share the work).
RESUMABLE_FIELDS = (
    "out", "log_every", "val_every", "val_batches", "progress", "threads", "checkpoint", "distributed",
    "minutes",
)  # fmt: skip


def identity(cfg: dict[str, Any]) -> dict[str, Any]:
    """The flattened fields that a resumed run must share with its checkpoint."""
    flat = _flatten({k: v for k, v in cfg.items() if k not in RESUMABLE_FIELDS})
    return flat


def config_diff(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """`field: saved -> current` for each identity field that differs. A field the saved config lacks
    (it was written before the field existed) counts as its default, so an older run still resumes."""
    a, b = identity(saved), identity(current)
    defaults = identity(TrainConfig().to_dict())
    a = {**{k: v for k, v in defaults.items() if k in b and k not in a}, **a}
    return [
        f"{k}: {a.get(k, '<absent>')!r} -> {b.get(k, '<absent>')!r}"
        for k in sorted(set(a) | set(b))
        if a.get(k) != b.get(k)
    ]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if (
            isinstance(v, dict)
            and v
            and all(isinstance(x, str) for x in v)
            and k not in ("modes", "loss_weights", "options")
        ):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_jsonable(v) for v in x]
    return x


def _build(cls: type, data: dict[str, Any], where: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"unknown config keys {[where + k for k in unknown]}; known: {sorted(known)}")
    kwargs = {}
    for name, value in data.items():
        sub = _SECTIONS.get((cls.__name__, name))
        kwargs[name] = (
            _build(sub, value, f"{where}{name}.") if sub is not None and isinstance(value, dict) else value
        )
    return cls(**kwargs)


_SECTIONS: dict[tuple[str, str], type] = {
    ("TrainConfig", "model"): ModelSection,
    ("TrainConfig", "data"): DataSection,
    ("TrainConfig", "optim"): OptimSection,
    ("TrainConfig", "generator"): GeneratorSection,
    ("TrainConfig", "checkpoint"): CheckpointSection,
    ("TrainConfig", "distributed"): DistributedSection,
    ("GeneratorSection", "sigma"): SigmaSection,
}
