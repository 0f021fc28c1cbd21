"""LeRobot datasets in, clips with timestamps in seconds out (docs/design.md, "Around the model").

    from cosmos3_robot.datasets import ClipDataset, ClipSpec, make_dataloader
    ds = ClipDataset(root="data/reach", spec=ClipSpec(num_frames=4, video_fps=5, num_actions=10))
    batch = next(iter(make_dataloader(ds, batch_size=8, num_workers=2)))

Datasets never import the model. Recording lives in `cosmos3_robot.envs.record`.
"""

from cosmos3_robot.datasets.clips import ClipDataset, ClipDatasetConfig, ClipReadError, ClipSpec, common_rate
from cosmos3_robot.datasets.loader import make_dataloader, seed_worker
from cosmos3_robot.datasets.sources import hub_offline, open_lerobot_dataset, open_lerobot_metadata
from cosmos3_robot.datasets.splits import EpisodeSplit, dataset_split, split_episodes
from cosmos3_robot.datasets.video_folder import VideoFolderConfig, VideoFolderDataset
from cosmos3_robot.processors.normalize import Normalizer

__all__ = [
    "ClipDataset",
    "ClipDatasetConfig",
    "ClipReadError",
    "ClipSpec",
    "EpisodeSplit",
    "Normalizer",
    "VideoFolderConfig",
    "VideoFolderDataset",
    "common_rate",
    "dataset_split",
    "hub_offline",
    "make_dataloader",
    "open_lerobot_dataset",
    "open_lerobot_metadata",
    "seed_worker",
    "split_episodes",
]
