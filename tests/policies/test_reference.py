"""The no-learning floor: `rollout --policy random|zero`, seeded by the env seed, resumable."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cosmos3_robot.cli import main
from cosmos3_robot.policies.reference import RandomPolicy, ZeroPolicy
from cosmos3_robot.policies.rollout import run_episodes


def test_random_actions_follow_the_env_seed_and_zero_stays_still():
    a = [
        ep.actions for ep in run_episodes("cosmos3_robot/Reach-v0", RandomPolicy(2), 3, seed=7, image_size=32)
    ]
    b = [
        ep.actions for ep in run_episodes("cosmos3_robot/Reach-v0", RandomPolicy(2), 3, seed=8, image_size=32)
    ]
    np.testing.assert_array_equal(a[1], b[0])  # env seed 8 both times: the same actions
    assert not np.array_equal(a[0][: len(a[1])], a[1][: len(a[0])])
    assert np.all(np.abs(np.concatenate(a)) <= 1)
    (still,) = run_episodes("cosmos3_robot/Reach-v0", ZeroPolicy(2), 1, seed=7, image_size=32)
    assert not still.actions.any()


def test_rollout_random_resumes_to_the_uninterrupted_run(tmp_path, capsys):
    args = [
        "rollout",
        "--policy",
        "random",
        "--env",
        "cosmos3_robot/Reach-v0",
        "--image-size",
        "32",
        "--no-video",
    ]
    assert main([*args, "--episodes", "3", "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    assert main([*args, "--episodes", "1", "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    assert main([*args, "--episodes", "3", "--out", str(tmp_path / "b"), "--no-progress"]) == 0
    a, b = (json.loads((tmp_path / d / "results.json").read_text())["episodes_detail"] for d in "ab")
    assert a == b and [e["seed"] for e in a] == [10_000, 10_001, 10_002]
    assert main([*args, "--policy", "nope", "--episodes", "1", "--out", str(tmp_path / "c")]) == 2
    assert "or random / zero for the no-learning floor" in capsys.readouterr().err


def test_open_loop_expert_replays_the_expert_and_noise_is_seeded():
    from cosmos3_robot.envs import make_env, make_expert
    from cosmos3_robot.policies.reference import OpenLoopExpert

    # Oracle: the scripted expert closed loop in the real simulator, seed by seed.
    env = make_env("cosmos3_robot/Reach-v0", image_size=32)
    expert_steps = []
    for seed in (3, 4):
        env.reset(seed=seed)
        expert, done, n = make_expert(env), False, 0
        while not done:
            _, _, terminated, truncated, info = env.step(expert.act())
            done, n = terminated or truncated, n + 1
        assert info["is_success"]
        expert_steps.append(n)
    env.close()
    clean = OpenLoopExpert("cosmos3_robot/Reach-v0", 0.0, image_size=32)
    replayed = list(run_episodes("cosmos3_robot/Reach-v0", clean, 2, seed=3, image_size=32))
    assert [e.success for e in replayed] == [True, True]  # blind replay of a deterministic sim
    assert [e.steps for e in replayed] == expert_steps
    noisy = OpenLoopExpert("cosmos3_robot/Reach-v0", 0.5, image_size=32)
    noisy.seed(3)
    first = noisy.plan.copy()
    noisy.seed(3)
    np.testing.assert_array_equal(noisy.plan, first)  # the noise follows the env seed
    clean.seed(3)
    assert first.shape == clean.plan.shape and not np.array_equal(first, clean.plan)
    assert np.all(np.abs(first) <= 1)
    noisy.reset()
    obs = {"pixels": np.zeros((32, 32, 3), np.uint8)}
    np.testing.assert_array_equal(noisy.act(obs, ""), first[0])  # it never reads the observation
    for p in (clean, noisy):
        p.close()
    with pytest.raises(ValueError, match="noise=-0.1"):
        OpenLoopExpert("cosmos3_robot/Reach-v0", -0.1)
