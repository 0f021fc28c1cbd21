"""Proprioceptive state as clean conditioning: from the dataset's `observation.state` to the token
the Generator reads, to `act(obs)` with `agent_pos`. Checked against the parquet files and the stats
LeRobot wrote (the oracle), and against the model without the state token."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cosmos3_robot.interop.diffusers_config import config_to_diffusers
from cosmos3_robot.model import GenInput, preset, series_stream
from cosmos3_robot.policies.runners import PolicyRunner, SamplingConfig
from cosmos3_robot.policies.world_model import WorldModel
from cosmos3_robot.tasks import make_task
from tests.builders import tiny_model

STATE_WIDTH = 6  # Reach's agent_pos has 4 dims: 2 padded entries


def compose_state(out, root, *extra):
    from cosmos3_robot.scripts.train import compose

    return compose([
        "stage=generator", "model=tiny", f"model.state_dim={STATE_WIDTH}", "steps=2", f"out={out}",
        "data.source=lerobot", f"data.root={root}", "data.batch_size=2", "+data.options.num_frames=5",
        "+data.options.num_actions=4", "+data.options.val_fraction=0.34", "+data.options.vae_preset=tiny",
        "progress=false", *extra,
    ])  # fmt: skip


@pytest.fixture(scope="module")
def state_world(tiny_world, tmp_path_factory):
    """A tiny state-conditioned model trained for 2 steps on the session's Reach recording."""
    from cosmos3_robot.scripts.train import build_data
    from cosmos3_robot.training.trainer import Trainer, build_model

    _, root, _ = tiny_world
    cfg = compose_state(tmp_path_factory.mktemp("state_run"), root)
    model, vit = build_model(cfg)
    data = build_data(cfg, model.config, vit)
    summary = Trainer(cfg, data, model=model, vit=vit).fit()
    return WorldModel.from_folder(summary["model"]), data, root, summary["model"]


def test_batches_carry_the_normalised_state_of_the_observed_frame(state_world):
    _, data, root, _ = state_world
    frames = pd.concat(pd.read_parquet(p) for p in sorted(Path(root, "data").rglob("*.parquet")))
    raw = np.stack(frames["observation.state"].to_numpy())
    mean, std = raw.mean(0), raw.std(0)
    checked = 0
    for idx in data.train_idx[:4]:
        sample = data.ds[int(idx)]
        batch = data.robot_batch([sample])
        row = frames[
            (frames.episode_index == sample["episode_index"]) & (frames.frame_index == sample["frame_index"])
        ]
        want = (np.stack(row["observation.state"].to_numpy())[0] - mean) / std
        assert batch.state.shape == (1, 1, STATE_WIDTH)
        np.testing.assert_allclose(batch.state[0, 0, :4].numpy(), want, rtol=1e-3, atol=1e-3)
        assert batch.state[0, 0, 4:].abs().sum() == 0  # padding
        assert batch.state_time.tolist() == [[0.0]]
        checked += 1
    assert checked == 4


def test_state_conditions_policy_and_forward_dynamics_but_not_inverse_dynamics(state_world):
    _, data, _, _ = state_world
    batch = data.val_batches()[0]
    assert make_task("policy").streams(batch).state is not None
    assert make_task("forward_dynamics").streams(batch).state is not None
    assert make_task("inverse_dynamics").streams(batch).state is None  # it labels video without state
    assert make_task("video").streams(batch).state is None


def state_stream(b, values, valid=None):
    return series_stream(
        values, torch.zeros(b, values.shape[1]), torch.zeros(b, values.shape[1], dtype=torch.bool),
        valid=valid, embodiment=torch.zeros(b, dtype=torch.long),
    )  # fmt: skip


def test_the_state_token_reaches_the_output_and_padding_hides_it():
    from tests.builders import make_gen

    model = tiny_model(state_dim=3)
    base = make_gen(2, [3, 3], [4, 4], [1, 1])
    cache = model.reason(torch.randint(0, 100, (2, 5)), torch.tensor([5, 5])).cache
    gen = lambda s: GenInput(video=base.video, audio=base.audio, action=base.action, state=s)  # noqa: E731
    s1 = state_stream(2, torch.randn(2, 1, 3, generator=torch.Generator().manual_seed(1)))
    s2 = state_stream(2, torch.randn(2, 1, 3, generator=torch.Generator().manual_seed(2)))
    with torch.no_grad():
        v_none = model.denoise(cache, base)
        v1, v2 = model.denoise(cache, gen(s1)), model.denoise(cache, gen(s2))
        padded = state_stream(2, s1.latents, valid=torch.zeros(2, 1, dtype=torch.bool))
        v_pad = model.denoise(cache, gen(padded))
    assert (v1["action"] - v2["action"]).abs().max() > 1e-4  # another state, other actions
    assert v1["state"].abs().max() == 0  # conditioning only: no velocity
    for name in ("video", "action", "audio"):  # a padded state token is no token at all
        torch.testing.assert_close(v_pad[name], v_none[name], rtol=1e-5, atol=1e-6)


def test_state_streams_are_refused_where_they_make_no_sense():
    from tests.builders import make_gen

    base = make_gen(1, [2], [2], [1])
    cache_model = tiny_model()
    cache = cache_model.reason(torch.randint(0, 100, (1, 3)), torch.tensor([3])).cache
    state = state_stream(1, torch.zeros(1, 1, 3))
    with pytest.raises(ValueError, match="no state projection"):
        cache_model.denoise(cache, GenInput(video=base.video, action=base.action, state=state))
    noisy = series_stream(torch.zeros(1, 1, 3), torch.zeros(1, 1), torch.ones(1, 1, dtype=torch.bool),
                          torch.full((1,), 0.5), embodiment=torch.zeros(1, dtype=torch.long))  # fmt: skip
    with pytest.raises(ValueError, match="conditioning only"):
        noisy.validate("state", 3)
    with pytest.raises(ValueError, match="proprioceptive-state"):
        config_to_diffusers(dataclasses.replace(preset("sim-small"), state_dim=3))


def test_act_reads_agent_pos_and_names_what_is_missing(state_world):
    world, _, _, _ = state_world
    assert world.needs_state and world.state.dim == 4
    runner = PolicyRunner(world, execute=2, sampling=SamplingConfig(steps=2))
    pixels = np.zeros((32, 32, 3), np.uint8)
    with pytest.raises(ValueError, match="needs 'agent_pos'"):
        runner.act({"pixels": pixels}, "reach")
    with pytest.raises(ValueError, match=r"state must be \(batch, state dims\) = \(1, 4\)"):
        runner.act({"pixels": pixels, "agent_pos": np.zeros(3, np.float32)}, "reach")
    a = runner.act({"pixels": pixels, "agent_pos": np.zeros(4, np.float32)}, "reach")
    assert a.shape == (2,) and np.isfinite(a).all()
    # Another state at the same frame gives another plan (same noise seed).
    plan = lambda s: PolicyRunner(world, sampling=SamplingConfig(steps=2)).plan(pixels, "reach", s)  # noqa: E731
    assert not np.allclose(plan(np.zeros(4)), plan(np.full(4, 3.0)))


def test_a_state_model_is_no_learned_simulator_and_needs_a_wide_enough_state(state_world, tmp_path):
    from cosmos3_robot.policies.learned_env import LearnedEnv
    from cosmos3_robot.scripts.train import build_data
    from cosmos3_robot.training.trainer import build_model

    _, _, root, folder = state_world
    with pytest.raises(ValueError, match="does not predict"):
        LearnedEnv(str(folder), "cosmos3_robot/Reach-v0")
    cfg = compose_state(tmp_path / "narrow", root, "model.state_dim=2")
    model, vit = build_model(cfg)
    with pytest.raises(ValueError, match=r"'observation.state' has 4 dims .* model.state_dim=4"):
        build_data(cfg, model.config, vit)


@pytest.mark.parametrize(
    "key, obs_keys",
    [
        ("observation.environment_state", ["environment_state"]),
        ("observation.state+observation.environment_state", ["agent_pos", "environment_state"]),
    ],
)
def test_the_state_token_carries_the_keys_it_is_given(state_world, tmp_path, key, obs_keys):
    """`data.state_key` chooses what the state token carries: the simulator's own state (a privileged
    diagnostic), or several recorded keys joined by '+', concatenated in that order, each normalised
    by its own statistics. The policy then reads the matching env observations."""
    from cosmos3_robot.scripts.train import build_data
    from cosmos3_robot.training.trainer import Trainer, build_model

    _, _, root, _ = state_world
    parts = key.split("+")
    frames = pd.concat(pd.read_parquet(p) for p in sorted(Path(root, "data").rglob("*.parquet")))
    raw = {p: np.stack(frames[p].to_numpy()) for p in parts}
    dims = {p: raw[p].shape[1] for p in parts}
    width = sum(dims.values())
    cfg = compose_state(tmp_path / "run", root, f"+data.options.state_key={key}", f"model.state_dim={width}")
    model, vit = build_model(cfg)
    data = build_data(cfg, model.config, vit)
    for idx in data.train_idx[:3]:
        sample = data.ds[int(idx)]
        row = (frames.episode_index == sample["episode_index"]) & (
            frames.frame_index == sample["frame_index"]
        )
        want_raw = np.concatenate([raw[p][row.to_numpy()][0] for p in parts])
        np.testing.assert_allclose(sample["state"][0].numpy(), want_raw, rtol=1e-6)
        want = np.concatenate([(raw[p][row.to_numpy()][0] - raw[p].mean(0)) / raw[p].std(0) for p in parts])
        np.testing.assert_allclose(data.robot_batch([sample]).state[0, 0].numpy(), want, rtol=1e-3, atol=1e-3)
    world = WorldModel.from_folder(Trainer(cfg, data, model=model, vit=vit).fit()["model"])
    assert world.state.key == key and world.state.dim == width
    assert world.state_obs_keys == obs_keys
    runner = PolicyRunner(world, execute=2, sampling=SamplingConfig(steps=2))
    obs = {"pixels": np.zeros((32, 32, 3), np.uint8), "agent_pos": np.zeros(4, np.float32)}
    with pytest.raises(ValueError, match="needs 'environment_state'"):
        runner.act(obs, "reach")
    a = runner.act({**obs, "environment_state": np.zeros(6, np.float32)}, "reach")
    assert a.shape == (2,) and np.isfinite(a).all()


def test_a_joined_state_key_names_distinct_keys_with_statistics():
    from cosmos3_robot.processors.normalize import joined_stats, key_parts

    assert key_parts("a+b") == ["a", "b"]
    for bad in ("a++b", "a+a", "+a"):
        with pytest.raises(ValueError, match="distinct dataset keys"):
            key_parts(bad)
    stats = {
        k: {n: np.full(2, v) for n in ("mean", "std", "min", "max")} for k, v in (("a", 1.0), ("b", 2.0))
    }
    np.testing.assert_array_equal(joined_stats(stats, "b+a")["b+a"]["mean"], [2, 2, 1, 1])
    with pytest.raises(ValueError, match=r"no stats for \['c'\]"):
        joined_stats(stats, "a+c")


def test_state_noise_perturbs_only_real_state_dims_and_only_in_training(state_world):
    """generator.state_noise: N(0, std²) on the normalised state's real dimensions in a training
    step; validation (eval mode) and the padding see the clean state; every other draw is the same."""
    from cosmos3_robot.training.config import GeneratorSection
    from cosmos3_robot.training.stage_loss import StageLoss, noisy_state

    world, data, _, _ = state_world
    batch = data.robot_batch([data.ds[int(i)] for i in data.train_idx[:8]])
    assert batch.state_mask.shape == (8, STATE_WIDTH) and batch.state_mask[:, :4].all()
    assert not batch.state_mask[:, 4:].any()
    out = noisy_state(batch, 0.5, seed=3)
    diff = out.state - batch.state
    assert diff[..., 4:].abs().sum() == 0  # padding stays zero, as at run time
    assert 0.3 < float(diff[..., :4].std()) < 0.7  # std 0.5 over 32 draws
    assert torch.equal(noisy_state(batch, 0.5, seed=3).state, out.state)  # seeded
    assert torch.equal(out.action, batch.action) and torch.equal(out.video, batch.video)

    with pytest.raises(ValueError, match="state_noise must be >= 0"):
        GeneratorSection(state_noise=-0.1)
    cfg = compose_state("unused", "unused", "generator.modes={policy: 1.0}")
    clean = StageLoss(world.model, None, cfg)
    noisy = StageLoss(world.model, None, dataclasses.replace(
        cfg, generator=dataclasses.replace(cfg.generator, state_noise=0.5)))  # fmt: skip
    plan = {"modes": ["policy"] * 8, "noise_seed": 7, "norm": 8}
    try:
        with torch.no_grad():
            noisy.eval(), clean.eval()
            assert torch.equal(noisy(batch, plan)[0], clean(batch, plan)[0])  # validation: clean state
            noisy.train(), clean.train()
            a, b = noisy(batch, plan)[0], clean(batch, plan)[0]
            assert not torch.equal(a, b)
            # the same loss as the clean module given the noised state by hand: only the state changed
            torch.testing.assert_close(a, clean(noisy_state(batch, 0.5, 7), plan)[0])
    finally:
        clean.eval()  # the module-scoped model goes back to eval mode for the tests after this one
    with pytest.raises(
        ValueError, match="state_noise=0.1 perturbs the conditioning state, but this run has none"
    ):
        compose_state("unused", "unused", "model.state_dim=null", "generator.state_noise=0.1")
