"""Suite-wide settings: offline, headless, one torch thread, a throw-away build cache.

Tiny models run faster on one thread than on two competing ones on a 2-core machine. The fused CPU
kernels (`cpu_kernels`) compile into a temporary folder, not the user's cache.
"""

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
_BUILD_CACHE = None
if "COSMOS3_ROBOT_CACHE" not in os.environ:
    _BUILD_CACHE = os.environ["COSMOS3_ROBOT_CACHE"] = tempfile.mkdtemp(prefix="cosmos3-robot-test-cache-")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def pytest_sessionfinish(session, exitstatus):
    if _BUILD_CACHE is not None:
        shutil.rmtree(_BUILD_CACHE, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_world(tmp_path_factory):
    """A tiny model trained for 3 steps on 3 recorded Reach episodes (32 px, 10 fps, clips of 5 frames
    and 4 actions): (model folder, dataset root, the training data source). Seconds to build."""
    from cosmos3_robot.scripts.train import build_data, compose
    from cosmos3_robot.training.trainer import Trainer, build_model
    from tests._data_fixtures import record_small

    root = tmp_path_factory.mktemp("data") / "reach"
    record_small(root, episodes=3, fps=10, image_size=32)
    out = tmp_path_factory.mktemp("run")
    cfg = compose(
        [
            "stage=generator", "model=tiny", "steps=3", f"out={out}", "data.source=lerobot",
            f"data.root={root}", "data.batch_size=2", "+data.options.num_frames=5",
            "+data.options.num_actions=4", "+data.options.val_fraction=0.34", "+data.options.vae_preset=tiny",
            "progress=false",
        ]
    )  # fmt: skip
    model, vit = build_model(cfg)
    data = build_data(cfg, model.config, vit)
    summary = Trainer(cfg, data, model=model, vit=vit).fit()
    return Path(summary["model"]), root, data


@pytest.fixture(scope="session")
def state_world_dir(tiny_world, tmp_path_factory):
    """The model folder of a tiny model conditioned on joints + the simulator's state (10 wide),
    2 steps on `tiny_world`'s recording: what a state estimator feeds."""
    from cosmos3_robot.scripts.train import build_data, compose
    from cosmos3_robot.training.trainer import Trainer, build_model

    _, root, _ = tiny_world
    cfg = compose([
        "stage=generator", "model=tiny", "model.state_dim=10", "steps=2",
        f"out={tmp_path_factory.mktemp('env_state_run')}", "data.source=lerobot", f"data.root={root}",
        "data.batch_size=2", "+data.options.num_frames=5", "+data.options.num_actions=4",
        "+data.options.val_fraction=0.34", "+data.options.vae_preset=tiny", "progress=false",
        "+data.options.state_key=observation.state+observation.environment_state",
    ])  # fmt: skip
    model, vit = build_model(cfg)
    return Path(Trainer(cfg, build_data(cfg, model.config, vit), model=model, vit=vit).fit()["model"])
