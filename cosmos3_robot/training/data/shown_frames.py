"""The frame a Generator-stage clip shows the Reasoner (`DataConfig.reasoner_frame`): the clip's first
observed frame, through the ViT, before the instruction, as the reasoner stage showed its frames and
as a policy shows the current frame when it plans (docs/design.md, "The three action modes").

Clips read from the latent cache carry no pixels, so `EpisodeFrames` decodes each episode once, the
first time one of its clips is drawn, at the ViT's size, and keeps it (uint8: 49 KB per frame at
128 px, about 110 MB for 150 Reach episodes).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from cosmos3_robot.datasets import open_lerobot_dataset
from cosmos3_robot.datasets.episodes import iter_lerobot_episodes
from cosmos3_robot.encoders.vision_inputs import image_text_prompts, vit_image_size
from cosmos3_robot.processors.frames import resize_frames, to_uint8


class EpisodeFrames:
    """uint8 (3, s, s) frames of a LeRobot dataset by (episode, frame index), decoded per episode."""

    def __init__(self, root: str | None, repo_id: str | None, image_key: str, size: int) -> None:
        self.root, self.repo_id, self.image_key, self.size = root, repo_id, image_key, size
        self._lerobot = None
        self._episodes: dict[int, Tensor] = {}

    def get(self, episode: int, frame: int) -> Tensor:
        if episode not in self._episodes:
            if self._lerobot is None:
                self._lerobot = open_lerobot_dataset(self.repo_id, self.root)
            for ep, frames, _ in iter_lerobot_episodes(self._lerobot, self.image_key, [episode], self.size):
                self._episodes[ep] = frames
        frames = self._episodes[episode]
        return frames[min(frame, len(frames) - 1)]


class ShownFrames:
    """Prompts that show each clip's first frame to the Reasoner before its instruction."""

    def __init__(self, cfg, tokenizer, vit_cfg, image_size: int) -> None:
        self.tokenizer, self.vit_cfg = tokenizer, vit_cfg
        self.size = vit_image_size(vit_cfg, cfg.vit_image_size or image_size)
        self.frames = EpisodeFrames(cfg.root, cfg.repo_id, cfg.image_key, self.size)

    def first_frame(self, sample: dict[str, Any]) -> Tensor:
        """uint8 (3, s, s): from the clip's decoded video when it has one, else from its episode."""
        if "video" in sample:
            return resize_frames(to_uint8(sample["video"][:1]), self.size)[0]
        return self.frames.get(int(sample["episode_index"]), int(sample["frame_index"]))

    def prompts(self, samples: list[dict[str, Any]]) -> tuple[Tensor, Tensor, dict[str, Any]]:
        """ids (B, L), lengths (B,) and the ViT inputs of the samples' first frames and instructions."""
        frames = [self.first_frame(s) for s in samples]
        return image_text_prompts(
            self.tokenizer, [s["task"] for s in samples], frames, self.vit_cfg, self.size
        )

    def state(self) -> dict[str, Any]:
        return {"vit_image_size": self.size}


def check_shown_frames(cfg, vit) -> None:
    """`reasoner_frame` needs the reasoner stage's ViT; refuse before any work starts."""
    if cfg.reasoner_frame and vit is None:
        raise ValueError(
            "+data.options.reasoner_frame=true shows the Reasoner each clip's frame through the ViT, but the "
            "model has none: start from a reasoner-stage model trained with a ViT (model.init=OUT/model of "
            "`cosmos3-robot train stage=reasoner model.vit=sim-small ...`)"
        )
