"""The state estimator: spatial softmax against the maths, learning where the named one of two coloured
squares is (the drawn position is the oracle), `train-estimator` on a recorded dataset, and the policy
runner reading the estimate instead of the env's state."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cosmos3_robot.encoders.state_estimator import (
    EstimatorConfig,
    StateEstimator,
    instruction_words,
    load_estimator,
    save_estimator,
    spatial_softmax,
)
from cosmos3_robot.infra.compiled import compile_estimator, compiler_available


def config(size=32, dim=2, **kw):
    return EstimatorConfig("observation.environment_state", "environment_state", dim, size, width=8, **kw)


def test_spatial_softmax_is_the_expected_position_of_each_map():
    maps = torch.full((1, 2, 5, 9), -1e4)
    maps[0, 0, 1, 6] = 0.0  # one hot: row 1 of 5, column 6 of 9
    maps[0, 1] = 0.0  # uniform: the centre
    x0, x1, y0, y1 = spatial_softmax(maps)[0].tolist()
    assert x0 == pytest.approx(-1 + 2 * 6 / 8) and y0 == pytest.approx(-1 + 2 * 1 / 4)
    assert x1 == pytest.approx(0.0, abs=1e-6) and y1 == pytest.approx(0.0, abs=1e-6)


def test_instruction_words_are_stable_and_case_blind():
    a = instruction_words("Move the fingertip to the RED target.", 1024)
    assert a == instruction_words("move the fingertip to the red target", 1024)
    assert len(a) == 7 and all(0 <= i < 1024 for i in a)
    assert a != instruction_words("move the fingertip to the blue target", 1024)


def squares(n: int, rng: np.random.Generator):
    """Grey 32 px frames with a red and a blue 4 px square; the instruction names one; the state is
    that square's centre in pixels."""
    frames = np.full((n, 32, 32, 3), 128, np.uint8)
    tasks, state = [], np.zeros((n, 2), np.float32)
    for i in range(n):
        (ry, rx), (by, bx) = rng.integers(0, 28, (2, 2))
        while abs(int(ry) - int(by)) < 5 and abs(int(rx) - int(bx)) < 5:
            by, bx = rng.integers(0, 28, 2)
        frames[i, ry : ry + 4, rx : rx + 4] = (230, 20, 20)
        frames[i, by : by + 4, bx : bx + 4] = (20, 40, 230)
        red = rng.random() < 0.5
        tasks.append(f"go to the {'red' if red else 'blue'} square")
        state[i] = (rx + 1.5, ry + 1.5) if red else (bx + 1.5, by + 1.5)
    return torch.from_numpy(frames).permute(0, 3, 1, 2), tasks, torch.from_numpy(state)


def test_it_learns_where_the_named_square_is():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    frames, tasks, state = squares(512, rng)
    test_frames, test_tasks, test_state = squares(128, rng)
    model = StateEstimator(config())
    model.mean.fill_(16.0)
    model.std.fill_(8.0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        idx = torch.randint(0, 512, (32,))
        loss = torch.nn.functional.mse_loss(
            model(frames[idx], [tasks[i] for i in idx]), model.normalise(state[idx])
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        err = (model.denormalise(model(test_frames, test_tasks)) - test_state).abs().mean().item()
    mean_err = (test_state - state.mean(0)).abs().mean().item()
    wrong_square = (
        test_tasks[0].replace("red", "blue")
        if "red" in test_tasks[0]
        else test_tasks[0].replace("blue", "red")
    )
    with torch.no_grad():
        swapped = model.denormalise(model(test_frames[:1], [wrong_square]))[0]
    assert err < 0.25 * mean_err, (err, mean_err)  # pixels, held out
    assert (swapped - test_state[0]).abs().max() > 4  # the instruction picks the square


@pytest.mark.skipif(not compiler_available(), reason="torch.compile needs a C++ compiler")
def test_a_compiled_estimator_estimates_as_the_eager_one():
    torch.manual_seed(0)
    model, eager = StateEstimator(config(dim=6)).eval(), StateEstimator(config(dim=6)).eval()
    eager.load_state_dict(model.state_dict())
    compile_estimator(model)
    rng = np.random.default_rng(0)
    for task in ("red", "the blue square", "red"):  # instructions of other lengths: one program
        pixels = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
        np.testing.assert_allclose(
            model.estimate(pixels, task), eager.estimate(pixels, task), rtol=1e-5, atol=1e-5
        )


def test_save_load_round_trip_and_frame_size_check(tmp_path):
    torch.manual_seed(0)
    model = StateEstimator(config(dim=6)).eval()
    model.mean.copy_(torch.arange(6.0))
    save_estimator(tmp_path / "est", model, {"command": "test", "config": {"steps": 1}})  # as provenance()
    back = load_estimator(tmp_path / "est")
    pixels = np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    np.testing.assert_array_equal(model.estimate(pixels, "red"), back.estimate(pixels, "red"))
    with pytest.raises(ValueError, match="32x32"):
        back.estimate(pixels[:16], "red")
    with pytest.raises(FileNotFoundError, match="train-estimator"):
        load_estimator(tmp_path)


def test_train_estimator_on_a_recording_writes_a_folder_and_resumes(tiny_world, tmp_path):
    from cosmos3_robot.training.estimator import EstimatorTrainConfig, train_estimator

    _, root, _ = tiny_world
    cfg = EstimatorTrainConfig(out=str(tmp_path / "run"), root=[str(root)], holdout_episodes=1, steps=4,
                               eval_every=2, save_every=2, batch_size=4, width=8, keypoints=4)  # fmt: skip
    first = train_estimator(cfg, {"command": "test", "config": {"steps": 4}}, log=lambda s: None)
    assert first["steps_run"] == 4 and set(first["mae_per_dim"]) >= {"goal_x", "fingertip_y"}
    est = load_estimator(first["estimator"])
    assert est.config.obs_key == "environment_state" and est.config.image_size == 32
    cfg.steps = 6
    second = train_estimator(cfg, {"command": "test"}, log=lambda s: None)
    assert second["steps_run"] == 2 and second["step"] == 6


def test_a_minutes_budget_is_the_whole_runs_over_resumes(tiny_world, tmp_path):
    """--max-minutes counts the wall time of every invocation: a rerun of a run that spent it trains
    nothing (the benchmark harness reruns finished stages), a larger budget trains on from there."""
    import json

    from cosmos3_robot.training.estimator import EstimatorTrainConfig, train_estimator

    _, root, _ = tiny_world
    cfg = EstimatorTrainConfig(out=str(tmp_path / "run"), root=[str(root)], holdout_episodes=1, steps=10**6,
                               max_minutes=0.005, eval_every=10**6, save_every=10**6, batch_size=4, width=8,
                               keypoints=4)  # fmt: skip
    first = train_estimator(cfg, {"command": "test"}, log=lambda s: None)
    wall = json.loads((tmp_path / "run" / "train_log.json").read_text())["wall_seconds"]
    assert first["steps_run"] >= 1 and wall >= 0.3
    said = []
    again = train_estimator(cfg, {"command": "test"}, log=said.append)
    assert again["steps_run"] == 0 and again["step"] == first["step"]
    assert any("--max-minutes 0.005 was spent by this run already" in s for s in said)
    cfg.max_minutes = wall / 60 + 0.005
    more = train_estimator(cfg, {"command": "test"}, log=lambda s: None)
    assert more["steps_run"] >= 1 and more["step"] == first["step"] + more["steps_run"]


def test_train_estimator_refuses_a_dataset_without_the_state(tmp_path):
    from cosmos3_robot.training.estimator import EstimatorTrainConfig, train_estimator
    from tests._data_fixtures import write_tiny_dataset

    root = write_tiny_dataset(tmp_path / "plain", [3, 3])
    cfg = EstimatorTrainConfig(out=str(tmp_path / "run"), root=[str(root)], holdout_episodes=1)
    with pytest.raises(ValueError, match="no 'observation.environment_state' column"):
        train_estimator(cfg, {}, log=lambda s: None)
    with pytest.raises(ValueError, match="state_key must be one recorded state column"):
        EstimatorTrainConfig(out="x", root=["y"], state_key="action")


@pytest.fixture(scope="module")
def env_state_world(state_world_dir):
    from cosmos3_robot.policies.world_model import WorldModel

    return WorldModel.from_folder(state_world_dir)


def test_the_runner_plans_on_the_estimate_and_never_reads_the_env_state(env_state_world):
    from cosmos3_robot.policies.runners import PolicyRunner

    torch.manual_seed(0)
    est = StateEstimator(config(dim=6)).eval()
    seen = []

    class Spy(PolicyRunner):
        def plan(self, pixels, task, state=None):
            seen.append(state)
            return super().plan(pixels, task, state)

    runner = Spy(env_state_world, execute=2, estimator=est)
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)
    joints = np.arange(4, dtype=np.float32)
    task = "move the fingertip to the blue target"
    # no environment_state in the observation at all: the estimate stands in for it
    runner.act({"pixels": pixels, "agent_pos": joints}, task)
    np.testing.assert_allclose(seen[0], np.concatenate([joints, est.estimate(pixels, task)]), rtol=1e-6)
    runner.reset()
    runner.act({"pixels": pixels, "agent_pos": joints, "environment_state": np.full(6, np.nan)}, task)
    assert np.all(np.isfinite(seen[1]))  # the env's value (NaN here) was dropped unread


def test_the_runner_refuses_a_mismatched_estimator(env_state_world, tiny_world):
    from cosmos3_robot.policies.runners import PolicyRunner
    from cosmos3_robot.policies.world_model import WorldModel

    with pytest.raises(ValueError, match="reads 64 px frames and the model 32 px"):
        PolicyRunner(env_state_world, execute=2, estimator=StateEstimator(config(size=64, dim=6)))
    plain = WorldModel.from_folder(tiny_world[0])  # no state at all
    with pytest.raises(ValueError, match="conditioned on no state"):
        PolicyRunner(plain, execute=2, estimator=StateEstimator(config(dim=6)))
