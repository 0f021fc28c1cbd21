"""Actions read off video: a frame-to-frame inverse-dynamics labeller beside the world model.

The world model's own inverse-dynamics mode stayed worse than predicting the mean action on two
cores (benchmarks/README.md), for the reason its policy path did: it never learned where things are
in the frame. This labeller learns it directly, on the action column of a labelled dataset, from the
motion between three consecutive frames:

    frames t-1, t, t+1 ─ conv ×3 ─ 1×1 conv ─ spatial softmax ─ keypoints p(t-1), p(t), p(t+1)
    [p(t),  (p(t) − p(t-1)) · fps / fps₀,  (p(t+1) − p(t)) · fps / fps₀] ─ MLP ─ action(t)

The keypoints are positions (Levine et al. 2016); their differences, scaled by the video's frame
rate over the rate it was trained at (fps₀), are velocities in units of "per training step", so a
video recorded at 15 Hz gives the head the same inputs as the same motion at 10 Hz. The action at t
moves the scene from frame t to t+1; the motion before (t-1 to t) carries the velocity the action
acts on. The first frame of an episode reuses itself as t-1; the last frame, which has no t+1, takes
the label of the one before it. Training: `cosmos3-robot train-labeller` (`training/inverse_dynamics.py`);
labelling: `cosmos3-robot label --labeller DIR`.

    idm = load_labeller("runs/labeller/labeller")
    actions = idm.label_episode(frames, fps=15.0)   # (T, A) in the dataset's action units
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cosmos3_robot.encoders.state_estimator import (
    check_reader_config,
    conv_trunk,
    load_reader,
    save_reader,
    spatial_softmax,
)

CONFIG_FILE = "labeller.json"
VELOCITY_GAIN = 10.0  # keypoint steps are ~0.01-0.1 of the [-1, 1] frame; this puts them near unit scale


@dataclass
class LabellerConfig:
    action_key: str  # the dataset column it predicts, e.g. action
    action_dim: int
    image_size: int  # frames must come at this size (square)
    fps: float  # the frame rate of its training data; other rates are rescaled to it
    width: int = 32
    keypoints: int = 32
    hidden: int = 256

    def __post_init__(self) -> None:
        check_reader_config(self, ("action_dim",))
        if not (isinstance(self.fps, (int, float)) and self.fps > 0):
            raise ValueError(f"LabellerConfig.fps must be a positive frame rate, got {self.fps!r}")


def triplet_indices(length: int) -> np.ndarray:
    """(length − 1, 3) frame indices (t−1, t, t+1) of the transitions t = 0 .. length − 2 of one episode;
    t − 1 is clamped to 0 at the start."""
    if length < 2:
        raise ValueError(f"an episode of {length} frame(s) has no transition to label (needs >= 2 frames)")
    t = np.arange(length - 1)
    return np.stack([np.maximum(t - 1, 0), t, t + 1], axis=1)


class InverseDynamicsLabeller(nn.Module):
    """(frames uint8 (B, 3, 3, H, W) as t−1, t, t+1; fps (B,)) -> normalised action (B, action_dim)."""

    def __init__(self, config: LabellerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.convs, self.norms = conv_trunk(3, c.width)
        self.keypoint_maps = nn.Conv2d(2 * c.width, c.keypoints, 1)
        self.head = nn.Sequential(
            nn.Linear(6 * c.keypoints, c.hidden),
            nn.ReLU(),
            nn.Linear(c.hidden, c.hidden),
            nn.ReLU(),
            nn.Linear(c.hidden, c.action_dim),
        )
        self.register_buffer("mean", torch.zeros(c.action_dim))
        self.register_buffer("std", torch.ones(c.action_dim))

    def keypoints(self, frames: Tensor) -> Tensor:
        """(N, 3, H, W) uint8 -> (N, 2K) keypoint positions in [-1, 1]."""
        x = frames.float() / 127.5 - 1.0
        for conv, norm in zip(self.convs, self.norms, strict=True):
            x = F.relu(norm(conv(x)))
        with torch.autocast(x.device.type, enabled=False):  # positions in fp32 under a bf16 autocast
            return spatial_softmax(self.keypoint_maps(x.float()))

    def forward(self, frames: Tensor, fps: Tensor) -> Tensor:
        b = frames.shape[0]
        p = self.keypoints(frames.flatten(0, 1)).view(b, 3, -1)
        rate = (fps.float() / self.config.fps * VELOCITY_GAIN)[:, None]
        before, after = (p[:, 1] - p[:, 0]) * rate, (p[:, 2] - p[:, 1]) * rate
        with torch.autocast(frames.device.type, enabled=False):
            return self.head(torch.cat([p[:, 1], before, after], dim=1))

    def denormalise(self, action: Tensor) -> Tensor:
        return action * self.std + self.mean

    def check_frames(self, frames: np.ndarray | Tensor, name: str = "the video") -> None:
        s = self.config.image_size
        if frames.ndim != 4 or tuple(frames.shape[1:]) != (s, s, 3):
            raise ValueError(
                f"the labeller reads {s}x{s} RGB frames (the size of the dataset it was trained on); {name} "
                f"has frames of shape {tuple(frames.shape[1:])} as (H, W, 3): record, crop or resize to {s} px"
            )

    @torch.no_grad()
    def label_episode(self, frames: np.ndarray, fps: float, batch: int = 256) -> np.ndarray:
        """One episode's frames (T, H, W, 3) uint8 at `fps` -> actions (T, action_dim) in dataset units."""
        self.check_frames(frames)
        if not fps > 0:
            raise ValueError(f"the video's frame rate must be positive, got {fps!r}")
        video = torch.as_tensor(np.ascontiguousarray(frames)).permute(0, 3, 1, 2)
        idx = torch.from_numpy(triplet_indices(len(frames)))
        actions = self.predict(video, idx, torch.full((len(idx),), float(fps)), batch)
        return torch.cat([actions, actions[-1:]]).numpy().astype(np.float32)

    def predict(self, frames: Tensor, triplets: Tensor, fps: Tensor, batch: int = 256) -> Tensor:
        """Actions in dataset units (M, action_dim) of the transitions `triplets` (M, 3), indices of
        frames (N, 3, H, W) uint8, each filmed at `fps` (M,); `batch` transitions per call."""
        return torch.cat([
            self.denormalise(self(frames[triplets[i : i + batch]], fps[i : i + batch]))
            for i in range(0, len(triplets), batch)
        ])  # fmt: skip


def save_labeller(folder: str | Path, model: InverseDynamicsLabeller, record: dict) -> Path:
    """Write `folder` atomically: the weights (with the actions' normalisation) and `labeller.json`
    (`labeller_config` and `record`: command, data, seed, held-out scores)."""
    return save_reader(folder, model, record, CONFIG_FILE, "labeller_config")


def load_labeller(folder: str | Path) -> InverseDynamicsLabeller:
    return load_reader(folder, CONFIG_FILE, lambda meta: InverseDynamicsLabeller(LabellerConfig(**meta["labeller_config"])),
                       "an inverse-dynamics labeller", "train-labeller")  # fmt: skip
