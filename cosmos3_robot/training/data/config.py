"""The data configuration both training stages read (`DataConfig`); see `training/data/__init__.py`
for the pipeline."""

from __future__ import annotations

from dataclasses import dataclass

from cosmos3_robot.datasets import (
    ClipSpec,
)
from cosmos3_robot.datasets.text import QA_KINDS
from cosmos3_robot.processors.geometry import check_spatial_size, num_latent_frames

TEXT_STYLES = {"qa": ("relative", "distance"), "caption": ("caption",), "mixed": QA_KINDS}


# ------------------------------------------------------------------------------------------------
# Config
# ------------------------------------------------------------------------------------------------


@dataclass
class DataConfig:
    """Where the data is and how it becomes batches. Rates in Hz, times in seconds."""

    root: str | None = None  # local LeRobot dataset folder
    repo_id: str | None = None  # hub id (only read from the local cache when offline)
    image_key: str = "observation.image"
    action_key: str = "action"
    state_key: str = "observation.state"  # proprioception, for a state-conditioned model
    env_state_key: str = "observation.environment_state"
    # Clip geometry (ClipSpec): num_frames = 1 + 4k video frames -> 1 + k latent frames.
    num_frames: int = 9
    frame_stride: int | None = None  # dataset frames between video frames; or video_fps
    video_fps: float | None = None
    num_actions: int = 16
    action_hz: float | None = None  # None: the dataset fps
    obs_frames: int = 1  # leading latent frames observed (clean) in forward dynamics / policy
    clip_stride: int = 1  # a clip starts at every clip_stride-th frame of an episode
    pad: bool = False  # allow clips running past an episode's end (padded frames flagged invalid)
    image_size: int | None = None  # resize frames to a square (multiple of 32); None: native size
    # Actions: normalised per dimension, zero-padded to the model's action width.
    action_width: int | None = None  # None: model_cfg.action_dim
    action_norm: str = "min_max"  # or mean_std
    embodiment: int | str = 0  # id of the action projection; a name is registered as id 0
    # Loading.
    batch_size: int = 8
    num_workers: int = 0
    val_fraction: float = 0.1
    max_val_batches: int = 4
    seed: int = 0
    # Video VAE (generator stage): a trained Diffusers AutoencoderKLWan folder (`train-vae`), or, for
    # tests and smoke runs only, `vae_preset`: a seeded random frozen VAE with the model's latent
    # channels. One of the two must be given. A VAE whose `train-vae` evaluation says it collapsed
    # or ignores later latents is refused unless `allow_weak_vae`.
    vae: str | None = None
    vae_preset: str | None = None
    allow_weak_vae: bool = False
    latent_cache: bool | str = False  # True: ~/.cache/cosmos3_robot/latents; a str: that folder
    action_free_folder: str | None = None  # mp4 clips mixed into generator training, action=None
    # Text.
    tokenizer: str | None = None  # None: the byte tokenizer; else a local HF tokenizer folder
    text: str = "mixed"  # reasoner samples: qa | caption | mixed
    vit_image_size: int | None = None  # frame size shown to the ViT; None: image_size or native
    # Generator stage: show the Reasoner each clip's first frame (through the reasoner stage's ViT)
    # before the instruction, as a policy then shows it the current frame.
    reasoner_frame: bool = False

    def __post_init__(self) -> None:
        if self.root is None and self.repo_id is None:
            raise ValueError("DataConfig: give `root` (a local LeRobot dataset folder) or `repo_id`")
        if self.root is not None:
            self.root = str(self.root)
        try:
            num_latent_frames(self.num_frames)
        except ValueError as e:
            raise ValueError(f"DataConfig.num_frames: {e}") from None
        if self.frame_stride is not None and self.video_fps is not None:
            raise ValueError("DataConfig: set frame_stride or video_fps, not both")
        for name in ("clip_stride", "batch_size", "max_val_batches"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"DataConfig.{name} must be an int >= 1, got {v!r}")
        for name in ("num_actions", "num_workers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"DataConfig.{name} must be an int >= 0, got {v!r}")
        t_lat = num_latent_frames(self.num_frames)
        if not 0 <= self.obs_frames <= t_lat:
            raise ValueError(
                f"DataConfig.obs_frames={self.obs_frames} must lie in [0, {t_lat}] (the latent frames of a "
                f"{self.num_frames}-frame clip)"
            )
        if self.action_width is not None and self.action_width < 1:
            raise ValueError(f"DataConfig.action_width must be >= 1 or None, got {self.action_width}")
        if self.action_norm not in ("min_max", "mean_std"):
            raise ValueError(
                f"DataConfig.action_norm must be 'min_max' or 'mean_std', got {self.action_norm!r}"
            )
        if isinstance(self.embodiment, int) and self.embodiment < 0:
            raise ValueError(f"DataConfig.embodiment must be >= 0 (or a name), got {self.embodiment}")
        if not 0.0 <= self.val_fraction < 1.0:
            raise ValueError(f"DataConfig.val_fraction must be in [0, 1), got {self.val_fraction}")
        if self.image_size is not None:
            try:
                check_spatial_size(self.image_size, self.image_size)
            except ValueError as e:
                raise ValueError(f"DataConfig.image_size: {e}") from None
        if self.text not in TEXT_STYLES:
            raise ValueError(f"DataConfig.text must be one of {sorted(TEXT_STYLES)}, got {self.text!r}")
        if self.vit_image_size is not None and self.vit_image_size < 1:
            raise ValueError(f"DataConfig.vit_image_size must be >= 1 or None, got {self.vit_image_size}")
        for name in ("vae", "action_free_folder", "tokenizer"):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, str(v))
        if not isinstance(self.latent_cache, bool):
            self.latent_cache = str(self.latent_cache)

    def clip_spec(self) -> ClipSpec:
        return ClipSpec(
            num_frames=self.num_frames,
            frame_stride=self.frame_stride,
            video_fps=self.video_fps,
            num_actions=self.num_actions,
            action_hz=self.action_hz,
            pad=self.pad,
        )
