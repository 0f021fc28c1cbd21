"""Meta-World v3 behind our env contract: upright pixels (checked against MuJoCo's own renderer),
seeded resets, the scripted experts at 10 Hz, `record` into a LeRobot dataset, clear unknown names."""

from __future__ import annotations

import numpy as np
import pytest

from cosmos3_robot.envs import METAWORLD_IDS, make_env, make_expert

pytest.importorskip("metaworld")
REACH = "cosmos3_robot/MetaWorld-reach-v3"


@pytest.fixture(scope="module")
def reach():
    env = make_env(REACH, image_size=64)
    yield env
    env.close()


def image_row(model, data, camera: str, point: np.ndarray, size: int) -> float:
    """Row (0 = top) at which `camera` sees world `point`, from the camera pose (pinhole model;
    a MuJoCo camera looks along its -z axis with +y up)."""
    import mujoco

    cam = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
    rot = data.cam_xmat[cam].reshape(3, 3)
    x, y, z = rot.T @ (point - data.cam_xpos[cam])
    focal = 0.5 * size / np.tan(np.deg2rad(model.cam_fovy[cam]) / 2)
    return size / 2 - focal * y / -z


def test_pixels_are_upright(reach):
    """Meta-World's corner2 camera is mounted upside down: in its raw image (what mujoco.Renderer
    draws for that camera, checked equal) a point higher in the world sits lower in the image. In
    ours the world's up is the image's up, and the image is the raw one flipped."""
    import mujoco

    obs, _ = reach.reset(seed=3)
    u = reach.unwrapped.inner.unwrapped
    renderer = mujoco.Renderer(u.model, 64, 64)
    renderer.update_scene(u.data, camera="corner2")
    raw = renderer.render()
    renderer.close()
    np.testing.assert_array_equal(obs["pixels"], raw[::-1])
    hand = obs["agent_pos"][:3].astype(np.float64)
    low, high = (image_row(u.model, u.data, "corner2", hand + dz, 64) for dz in ([0, 0, 0], [0, 0, 0.2]))
    assert high > low  # raw image: up in the world is down in the image
    assert (63 - high) < (63 - low)  # ours, flipped: up is up


def test_reset_is_seeded_and_picks_a_goal_variation_from_the_seed(reach):
    a, info_a = reach.reset(seed=7)
    b, info_b = reach.reset(seed=7)
    np.testing.assert_array_equal(a["pixels"], b["pixels"])
    np.testing.assert_array_equal(a["environment_state"], b["environment_state"])
    goals = {tuple(np.round(reach.reset(seed=s)[0]["environment_state"][-3:], 4)) for s in range(6)}
    assert len(goals) > 1  # other seeds, other goals
    assert info_a["variation"] == info_b["variation"]


@pytest.mark.parametrize("task", ["reach-v3", "door-open-v3"])
def test_the_scripted_expert_succeeds_at_10_hz(task):
    env = make_env(f"cosmos3_robot/MetaWorld-{task}", image_size=32)
    expert = make_expert(env, noise=0.0, seed=0)
    wins = 0
    for seed in range(2):
        obs, _ = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(expert.act(obs))
            done = term or trunc
        wins += bool(info["is_success"])
    env.close()
    assert wins == 2
    assert env.unwrapped.max_steps == 62 and env.unwrapped.control_hz == 10


def test_unknown_task_names_the_registered_ones():
    with pytest.raises(
        ValueError, match="unknown env 'cosmos3_robot/MetaWorld-fly-v3'.*MetaWorld-door-open-v3"
    ):
        make_env("cosmos3_robot/MetaWorld-fly-v3")
    from cosmos3_robot.envs.metaworld import MetaWorldEnv

    with pytest.raises(ValueError, match="unknown Meta-World task 'fly-v3'"):
        MetaWorldEnv("fly-v3")
    with pytest.raises(ValueError, match="must divide Meta-World's 80 Hz"):
        MetaWorldEnv("reach-v3", control_hz=15)
    assert len(METAWORLD_IDS) == 13


def test_record_writes_a_meta_world_dataset(tmp_path):
    from cosmos3_robot.datasets.sources import open_lerobot_dataset
    from cosmos3_robot.envs.record import record_dataset

    res = record_dataset(REACH, tmp_path / "mw", 2, image_size=32, seed=0, progress=False)
    assert res.total_episodes == 2 and all(res.successes)
    ds = open_lerobot_dataset(None, tmp_path / "mw")
    assert ds.meta.robot_type == REACH and ds.fps == 10
    assert ds.meta.features["observation.state"]["shape"] == [4] or tuple(
        ds.meta.features["observation.state"]["shape"]
    ) == (4,)
    assert tuple(ds.meta.features["observation.environment_state"]["shape"]) == (17,)
    assert ds[0]["task"] == "reach the goal position"
