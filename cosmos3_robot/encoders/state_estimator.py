"""The scene state a policy conditions on, read off the current frame: `observation.environment_state`
(for Reach: goal, distractor and fingertip xy) from pixels and the instruction.

Given the simulator's state, the policy path succeeds where the vision-only one sits at the random
floor (benchmarks/README.md, "The policy path given the simulator's state"): what it lacks is
perception, which neither the Generator's latents nor the Reasoner's text answers learned on two
cores. A `StateEstimator` learns it directly, as a regression on the state the dataset recorded:

    frame uint8 (3, H, W) ─ conv ×3 ─ FiLM(instruction words) ─ 1×1 conv ─ spatial softmax ─┐
    instruction ─ hashed words ─ EmbeddingBag ───────────────────────────────────────────────┴─ MLP ─ state

Spatial-softmax keypoints are the expected (x, y) of each feature map (Levine et al. 2016, "End-to-end
training of deep visuomotor policies"); the instruction modulates the features before them (FiLM,
Perez et al. 2018), so which target is "the goal" follows the words. At rollout (`rollout
--estimator DIR`) the estimate replaces the env's own state in the policy's input; the true one is
never read. Training: `cosmos3-robot train-estimator` (`training/estimator.py`).

    est = load_estimator("runs/estimator")
    state = est.estimate(obs["pixels"], "move the fingertip to the red target")   # (E,) env units
"""

from __future__ import annotations

import re
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cosmos3_robot.files import atomic_folder, read_json, read_tensors, write_checkpoint

CONFIG_FILE = "estimator.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass
class EstimatorConfig:
    state_key: str  # the dataset column it estimates, e.g. observation.environment_state
    obs_key: str  # the env observation key that column records, e.g. environment_state
    state_dim: int
    image_size: int  # frames must come at this size (square), as the dataset recorded them
    width: int = 32  # channels of the first conv; the next two have 2x
    keypoints: int = 32
    vocab: int = 1024  # hashed instruction words
    embed: int = 64
    hidden: int = 256

    def __post_init__(self) -> None:
        check_reader_config(self, ("state_dim", "vocab", "embed"))


def check_reader_config(config, sizes: tuple[str, ...]) -> None:
    """The checks every frame reader's config needs: `sizes` and the trunk's sizes (image_size, width,
    keypoints, hidden) positive integers; width a multiple of 8, image_size of 4."""
    for name in (*sizes, "image_size", "width", "keypoints", "hidden"):
        v = getattr(config, name)
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{type(config).__name__}.{name} must be a positive integer, got {v!r}")
    if config.width % 8:
        raise ValueError(f"width must be a multiple of 8 (GroupNorm of 8 groups), got {config.width}")
    if config.image_size % 4:
        raise ValueError(f"image_size must be a multiple of 4 (two stride-2 convs), got {config.image_size}")


def instruction_words(text: str, vocab: int) -> list[int]:
    """The instruction's lower-cased words, each hashed (CRC-32, stable across runs) into [0, vocab)."""
    words = re.findall(r"[a-z0-9]+", text.lower()) or [""]
    return [zlib.crc32(w.encode()) % vocab for w in words]


def spatial_softmax(features: Tensor) -> Tensor:
    """(B, K, h, w) -> (B, 2K): each map's softmax-weighted mean (x, y) in [-1, 1]."""
    b, k, h, w = features.shape
    prob = features.flatten(2).softmax(-1).view(b, k, h, w)
    ys = torch.linspace(-1, 1, h, dtype=features.dtype)
    xs = torch.linspace(-1, 1, w, dtype=features.dtype)
    x = (prob.sum(2) * xs).sum(-1)
    y = (prob.sum(3) * ys).sum(-1)
    return torch.cat([x, y], dim=1)


def conv_trunk(in_channels: int, width: int) -> tuple[nn.ModuleList, nn.ModuleList]:
    """The three convs (5×5 stride 2, 3×3 stride 2, 3×3) and their GroupNorms that both frame readers
    (this estimator and `encoders/inverse_dynamics.py`) put before their spatial-softmax keypoints."""
    w = width
    convs = nn.ModuleList(
        [
            nn.Conv2d(in_channels, w, 5, stride=2, padding=2),
            nn.Conv2d(w, 2 * w, 3, stride=2, padding=1),
            nn.Conv2d(2 * w, 2 * w, 3, padding=1),
        ]
    )
    return convs, nn.ModuleList([nn.GroupNorm(8, w), nn.GroupNorm(8, 2 * w), nn.GroupNorm(8, 2 * w)])


class StateEstimator(nn.Module):
    """(frames uint8 (B, 3, H, W), instructions) -> normalised state (B, state_dim)."""

    def __init__(self, config: EstimatorConfig) -> None:
        super().__init__()
        self.config = c = config
        w = c.width
        self.convs, self.norms = conv_trunk(3, w)
        self.words = nn.EmbeddingBag(c.vocab, c.embed, mode="mean")
        self.film = nn.Linear(c.embed, 4 * w)  # (scale, shift) of the last conv's channels
        self.keypoint_maps = nn.Conv2d(2 * w, c.keypoints, 1)
        self.head = nn.Sequential(
            nn.Linear(2 * c.keypoints + c.embed, c.hidden),
            nn.ReLU(),
            nn.Linear(c.hidden, c.hidden),
            nn.ReLU(),
            nn.Linear(c.hidden, c.state_dim),
        )
        self.register_buffer("mean", torch.zeros(c.state_dim))
        self.register_buffer("std", torch.ones(c.state_dim))

    def embed_tasks(self, tasks: list[str]) -> Tensor:
        ids = [instruction_words(t, self.config.vocab) for t in tasks]
        offsets = torch.tensor([0] + [len(i) for i in ids[:-1]]).cumsum(0)
        return self.words(torch.tensor([j for i in ids for j in i]), offsets)

    def forward(self, frames: Tensor, tasks: list[str]) -> Tensor:
        return self.read(frames, self.embed_tasks(tasks))

    def read(self, frames: Tensor, words: Tensor) -> Tensor:
        """frames uint8 (B, 3, H, W) and the instructions' word embeddings (B, embed) -> normalised
        state (B, state_dim). `infra/compiled.compile_estimator` replaces it by its compiled form."""
        x = frames.float() / 127.5 - 1.0
        for conv, norm in zip(self.convs[:-1], self.norms[:-1], strict=True):
            x = F.relu(norm(conv(x)))
        scale, shift = self.film(words)[:, :, None, None].chunk(2, dim=1)
        x = F.relu(self.norms[-1](self.convs[-1](x)) * (1 + scale) + shift)
        with torch.autocast(x.device.type, enabled=False):  # positions in fp32 under a bf16 autocast
            points = spatial_softmax(self.keypoint_maps(x.float()))
            return self.head(torch.cat([points, words.float()], dim=1))

    def normalise(self, state: Tensor) -> Tensor:
        return (state - self.mean) / self.std

    def denormalise(self, state: Tensor) -> Tensor:
        return state * self.std + self.mean

    def check_frames(self, frames: Tensor) -> None:
        s = self.config.image_size
        if frames.ndim != 4 or tuple(frames.shape[1:]) != (3, s, s):
            raise ValueError(
                f"the state estimator reads frames of {s}x{s} RGB (the size of the dataset it was trained "
                f"on), got shape {tuple(frames.shape)} as (batch, 3, H, W); record or render at {s} px"
            )

    @torch.no_grad()
    def estimate(self, pixels: np.ndarray, task: str) -> np.ndarray:
        """One env frame (H, W, 3) uint8 and its instruction -> the state (state_dim,) in env units."""
        frames = torch.as_tensor(np.ascontiguousarray(pixels)).permute(2, 0, 1)[None]
        self.check_frames(frames)
        return self.denormalise(self(frames, [task]))[0].numpy().astype(np.float32)


def save_reader(
    folder: str | Path, model: nn.Module, record: dict, config_file: str, config_key: str
) -> Path:
    """Write a frame reader's `folder` atomically: its weights (with its normalisation buffers) and
    `config_file` holding `record` (command, data, seed, held-out scores) and its config under
    `config_key`. Shared by the estimator and the labeller (`encoders/inverse_dynamics.py`)."""
    with atomic_folder(folder) as tmp:
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        write_checkpoint(
            tmp, {WEIGHTS_FILE: state}, {config_file: {**record, config_key: asdict(model.config)}}
        )
    return Path(folder)


def load_reader(folder: str | Path, config_file: str, build, what: str, command: str) -> nn.Module:
    """The frame reader `save_reader` wrote: `build(meta)` makes the module from the config file's
    contents; a folder without the config file raises naming `what` and the `command` that writes it."""
    folder = Path(folder)
    if not (folder / config_file).exists():
        sub = config_file.removesuffix(".json")
        raise FileNotFoundError(
            f"{folder} is not {what} folder (no {config_file}); give the {sub}/ folder that "
            f"`cosmos3-robot {command} --out DIR` wrote (DIR/{sub})"
        )
    model = build(read_json(folder / config_file, f"{what} config"))
    model.load_state_dict(read_tensors(folder / WEIGHTS_FILE))
    return model.eval()


def save_estimator(folder: str | Path, model: StateEstimator, record: dict) -> Path:
    """Write `folder` atomically: the weights (with the state's normalisation) and `estimator.json`
    (`estimator_config` and `record`: command, data, seed, held-out scores)."""
    return save_reader(folder, model, record, CONFIG_FILE, "estimator_config")


def load_estimator(folder: str | Path) -> StateEstimator:
    return load_reader(folder, CONFIG_FILE, lambda meta: StateEstimator(EstimatorConfig(**meta["estimator_config"])),
                       "a state estimator", "train-estimator")  # fmt: skip
