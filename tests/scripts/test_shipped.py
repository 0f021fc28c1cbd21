"""Shipping trained folders: `export-bf16` against the folders it copies, and the demo's step 5 on a
tiny shipped set (a joints + scene-state model, an estimator and a labeller at 32 px)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open

from cosmos3_robot.cli import main
from cosmos3_robot.encoders.inverse_dynamics import InverseDynamicsLabeller, LabellerConfig, save_labeller
from cosmos3_robot.encoders.state_estimator import EstimatorConfig, StateEstimator, save_estimator


@pytest.fixture(scope="module")
def shipped(state_world_dir, tmp_path_factory):
    """A folder laid out as artefacts/reach: policy/ (2 training steps), estimator/, labeller/."""
    folder = tmp_path_factory.mktemp("shipped")
    torch.manual_seed(0)
    est = StateEstimator(
        EstimatorConfig("observation.environment_state", "environment_state", 6, 32, width=8)
    )
    est.mean.copy_(torch.tensor([0.1, -0.1, 0.05, 0.02, 0.0, 0.1]))
    save_estimator(folder / "src_estimator", est, {"command": "test"})
    lab = InverseDynamicsLabeller(LabellerConfig("action", 2, 32, 10.0, width=8))
    lab.std.fill_(0.5)
    save_labeller(folder / "src_labeller", lab, {"command": "test"})
    return folder, state_world_dir


def test_export_bf16_halves_the_weights_keeps_the_units_and_loads_back(shipped, tmp_path):
    from cosmos3_robot.encoders.inverse_dynamics import load_labeller
    from cosmos3_robot.encoders.state_estimator import load_estimator
    from cosmos3_robot.policies.world_model import WorldModel

    folder, model = shipped
    for src, name in (
        (model, "policy"),
        (folder / "src_estimator", "estimator"),
        (folder / "src_labeller", "labeller"),
    ):
        assert main(["export-bf16", str(src), str(tmp_path / name)]) == 0
        meta = json.loads((tmp_path / name / "export.json").read_text())
        assert meta["source"] == str(src) and meta["bytes"]["after"] < 0.7 * meta["bytes"]["before"]
    with safe_open(str(tmp_path / "estimator" / "model.safetensors"), "pt") as f:
        dtypes = {k: f.get_tensor(k).dtype for k in f.keys()}
    assert dtypes["mean"] == dtypes["std"] == torch.float32  # the dataset's units at full precision
    assert dtypes["head.0.weight"] == torch.bfloat16
    original, copy = load_estimator(folder / "src_estimator"), load_estimator(tmp_path / "estimator")
    for k, v in original.state_dict().items():  # every weight is the original rounded to bf16
        torch.testing.assert_close(
            copy.state_dict()[k], v.to(torch.bfloat16).float() if k not in ("mean", "std") else v
        )
    assert load_labeller(tmp_path / "labeller").config.fps == 10.0
    a, b = WorldModel.from_folder(model), WorldModel.from_folder(tmp_path / "policy")
    pb = dict(b.model.named_parameters())
    for k, v in a.model.named_parameters():
        assert pb[k].dtype == torch.float32  # upcast on load for the CPU
        torch.testing.assert_close(pb[k], v.to(torch.bfloat16).float())
    assert main(["export-bf16", str(model), str(tmp_path / "policy")]) == 2  # never merged into another
    assert main(["export-bf16", str(tmp_path), str(tmp_path / "x")]) == 2  # not a trained folder


def test_the_demo_step_5_runs_the_shipped_reach_set(shipped, tmp_path):
    from cosmos3_robot.scripts.demo import shipped_reach

    folder, model = shipped
    reach = tmp_path / "reach"
    for src, name in (
        (model, "policy"),
        (folder / "src_estimator", "estimator"),
        (folder / "src_labeller", "labeller"),
    ):
        assert main(["export-bf16", str(src), str(reach / name)]) == 0
    out = shipped_reach(reach, tmp_path / "work", episodes=1, label_episodes=1, sampling_steps=1)
    policy = out["reach_policy"]
    assert policy["episodes"] == 1 and policy["seeds"] == [10_000, 10_000] and len(policy["wilson95"]) == 2
    for hz in (10, 15):
        c = out[f"labeller_{hz}hz"]
        assert c["episodes"] == 1 and np.isfinite(c["mse"]) and c["mean_action_mse"] > 0
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    assert LeRobotDataset("local/demo_reach_15hz", root=tmp_path / "work" / "reach_15hz").fps == 15
