"""Env-facing runners over an exported world model: policy act(obs) with a chunk queue, the
inverse-dynamics labeller and the learned simulator, on a tiny model trained for a few steps."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cosmos3_robot.infra.compiled import compiler_available
from cosmos3_robot.policies.runners import (
    InverseDynamicsLabeller,
    LearnedSimulator,
    PolicyRunner,
    SamplingConfig,
)
from cosmos3_robot.policies.world_model import WorldModel
from cosmos3_robot.processors.data_state import DataState
from cosmos3_robot.training.config import TrainConfig


@pytest.fixture(scope="module")
def world(tiny_world):
    model_dir, _, data = tiny_world
    return WorldModel.from_folder(model_dir), data


def test_exported_model_carries_its_data_state(world):
    wm, data = world
    state = json.loads(json.dumps(wm.data_state.to_dict()))  # JSON-safe, as exported
    assert DataState.from_dict(state) == wm.data_state == data.state()
    assert state["action_transform"]["normalizer"] == data.state().action_transform["normalizer"]
    with pytest.raises(ValueError, match="newer cosmos3-robot: upgrade"):
        DataState.from_dict({**state, "format_version": 99})
    g = wm.geometry
    assert (g.num_frames, g.num_actions, g.latent_frames) == (5, 4, 2)
    torch.testing.assert_close(g.video_time(), torch.tensor([0.0, 0.4]))
    torch.testing.assert_close(g.action_time(), torch.tensor([0.0, 0.1, 0.2, 0.3]))


def bf16_plans_close_to_fp32(wm: WorldModel, to_bf16, seed: int):
    """Plan in fp32, call `to_bf16()`, plan again: the bf16 plan differs, by bf16's precision only.
    Returns the fp32 plan and the planning function."""
    pixels = np.random.default_rng(seed).integers(0, 255, (32, 32, 3), dtype=np.uint8)

    def plan() -> np.ndarray:
        runner = PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2, seed=0))
        return runner.plan(pixels, "move the fingertip to the red target")

    fp32 = plan()
    to_bf16()
    low = plan()
    assert not np.array_equal(low, fp32)  # it ran in bf16 ...
    np.testing.assert_allclose(low, fp32, atol=0.05 * np.abs(fp32).max())  # ... to bf16's precision
    return fp32, plan


def test_bf16_products_plan_close_to_fp32_and_bad_names_are_refused(tiny_world):
    wm = WorldModel.from_folder(tiny_world[0])  # its own copy: the module's `world` stays fp32
    fp32, plan = bf16_plans_close_to_fp32(wm, lambda: wm.set_linear_dtype("bf16"), seed=0)
    wm.set_linear_dtype("fp32")
    np.testing.assert_allclose(plan(), fp32, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="must be one of fp32, bf16"):
        wm.set_linear_dtype("fp16")


@pytest.mark.skipif(not compiler_available(), reason="torch.compile needs a C++ compiler")
def test_a_compiled_model_plans_as_the_eager_one_at_any_instruction_length(tiny_world):
    wm = WorldModel.from_folder(tiny_world[0])  # its own copy: compiling freezes its weights
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(2)]
    # Instructions of three lengths: the Reasoner's keys change length, the compiled step must not
    # serve a stale layout.
    tasks = ["move the fingertip to the red target", "move the fingertip to the blue target", "push it"]

    def plans() -> list[np.ndarray]:
        return [
            PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2, seed=0)).plan(f, t)
            for f in frames
            for t in tasks
        ]

    eager = plans()  # the oracle: the same model, op by op
    wm.compile("fp32")
    compiled = plans()
    for c, e in zip(compiled, eager, strict=True):
        np.testing.assert_allclose(c, e, rtol=1e-4, atol=1e-4 * np.abs(e).max())
    clip = torch.as_tensor(np.stack(frames))[:, None]
    eager_world = WorldModel.from_folder(tiny_world[0])
    # the compiled encoder
    torch.testing.assert_close(wm.encode_frames(clip), eager_world.encode_frames(clip))
    with pytest.raises(ValueError, match="must be one of fp32, bf16"):
        wm.compile("fp16")
    with pytest.raises(ValueError, match="compiled"):  # its weights are frozen into the program
        wm.set_linear_dtype("bf16")
    with pytest.raises(ValueError, match="compiled already"):
        wm.compile("fp32")


@pytest.mark.slow  # a second compile (about 30 s); the fp32 test above checks the compiled path
@pytest.mark.skipif(not compiler_available(), reason="torch.compile needs a C++ compiler")
def test_a_compiled_bf16_step_plans_close_to_the_fp32_one(tiny_world):
    wm = WorldModel.from_folder(tiny_world[0])
    bf16_plans_close_to_fp32(wm, lambda: wm.compile("bf16"), seed=1)


def test_policy_queue_replans_every_execute_steps(world):
    wm, _ = world
    runner = PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2))
    calls = []
    plan = runner.plan
    runner.plan = lambda pixels, task, state=None: calls.append(1) or plan(pixels, task, state)
    obs = {"pixels": np.zeros((32, 32, 3), np.uint8)}
    acts = [runner.act(obs, "move the fingertip to the red target") for _ in range(5)]
    assert len(calls) == 3  # steps 0, 2, 4
    assert all(a.shape == (2,) and a.dtype == np.float32 and np.isfinite(a).all() for a in acts)
    # Actions come back in env units: inside the range the dataset's statistics allow.
    stats = wm.actions.normalizer.stats[wm.actions.key]
    lo, hi = np.asarray(stats.min) - 1.0, np.asarray(stats.max) + 1.0
    assert all(((a >= lo) & (a <= hi)).all() for a in acts)
    with pytest.raises(ValueError, match="execute"):
        PolicyRunner(wm, execute=9)


def test_a_policy_samples_the_mode_its_model_trained_and_refuses_one_it_did_not(world):
    wm, _ = world
    assert wm.trained_modes == TrainConfig().generator.modes  # the trainer's export records its mix
    assert PolicyRunner(wm).mode == "policy"
    with pytest.raises(ValueError, match="never trained in mode 'action_policy'"):
        PolicyRunner(wm, mode="action_policy")
    with pytest.raises(ValueError, match="choose one of policy, action_policy"):
        PolicyRunner(wm, mode="video")
    fast = WorldModel(wm.model, wm.vae, wm.data_state, modes={"policy": 0.0, "action_policy": 1.0})
    runner = PolicyRunner(fast, execute=2, sampling=SamplingConfig(steps=2))
    assert runner.mode == "action_policy"
    tokens = []  # Generator tokens of each denoising step
    step = fast.model.euler_step  # an Euler plan's step (velocity and update)
    fast.model.euler_step = lambda cache, gen, *a, **k: tokens.append(gen.length) or step(cache, gen, *a, **k)
    pixels, task = np.zeros((32, 32, 3), np.uint8), "move the fingertip to the red target"
    assert fast.model is wm.model  # one network: the policy mode's count comes from `wm`
    PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2)).plan(pixels, task)
    chunk = runner.plan(pixels, task)
    del fast.model.euler_step
    assert chunk.shape == (4, 2) and np.isfinite(chunk).all()
    assert runner.imagined_frames() is None  # it imagines no frames
    g = fast.geometry
    future = (g.latent_frames - 1) * (g.image_size // 32) ** 2  # merged tokens of the frames after the first
    assert tokens[:2] == [tokens[0]] * 2 and tokens[2:] == [tokens[0] - future] * 2


def test_policy_reasons_once_per_task_and_plans_as_if_it_reasoned_each_time(world, monkeypatch):
    wm, _ = world
    calls = []
    reason = wm.model.reason
    monkeypatch.setattr(wm.model, "reason", lambda *a, **k: calls.append(1) or reason(*a, **k))
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(3)]
    task = "move the fingertip to the red target"
    cached = PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2))
    got = [cached.plan(f, task) for f in frames]
    assert len(calls) == 1  # the instruction is reasoned once for the three plans
    cached.plan(frames[0], "another task")
    assert len(calls) == 2
    fresh = PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2))  # same noise seed
    want = []
    for f in frames:
        fresh.reset()  # forgets the reasoned instruction: the Reasoner runs again
        want.append(fresh.plan(f, task))
    assert len(calls) == 5
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_a_prepared_instruction_is_the_plans_own_reasoner_pass_and_is_not_run_again(world, monkeypatch):
    wm, _ = world
    task = "move the fingertip to the red target"
    frame = np.random.default_rng(1).integers(0, 255, (32, 32, 3), dtype=np.uint8)
    frames = torch.as_tensor(frame)[None, None]
    batch = wm.clip_batch([task], wm.encode_frames(frames), obs_frames=1, frames=frames[:, 0])
    want = wm.reasoned(batch).cache  # the pass a plan built from its clip batch before
    runner = PolicyRunner(wm, execute=2, sampling=SamplingConfig(steps=2))
    got = runner.prepare(task).cache
    assert got.length == want.length and torch.equal(got.next_position, want.next_position)
    assert (got.valid is None and want.valid is None) or torch.equal(got.valid, want.valid)
    for (gk, gv), (wk, wv) in zip(got.kv, want.kv, strict=True):
        torch.testing.assert_close(gk, wk, rtol=0, atol=0)
        torch.testing.assert_close(gv, wv, rtol=0, atol=0)
    calls = []
    reason = wm.model.reason
    monkeypatch.setattr(wm.model, "reason", lambda *a, **k: calls.append(1) or reason(*a, **k))
    runner.plan(frame, task)
    runner.prepare(task)
    assert calls == []  # the plans and a second prepare of the same task reuse the first pass
    runner.prepare("another task")
    assert len(calls) == 1


def test_a_rollout_prepares_each_episode_before_its_first_action_and_times_it_apart(world, monkeypatch):
    from cosmos3_robot.policies.rollout import WorldModelPolicy, run_episodes

    wm, _ = world
    policy = WorldModelPolicy(wm, execute=4, sampling=SamplingConfig(steps=1))
    events = []
    prepare, act = policy.prepare, policy.act
    monkeypatch.setattr(policy, "prepare", lambda task: events.append("prepare") or prepare(task))
    monkeypatch.setattr(policy, "act", lambda obs, task: events.append("act") or act(obs, task))
    eps = list(run_episodes("cosmos3_robot/Reach-v0", policy, 2, seed=5, image_size=32))
    starts = [i for i, e in enumerate(events) if e == "prepare"]
    assert starts == [0, 1 + eps[0].steps]  # once per episode, before its first action
    assert all(ep.setup_ms is not None and ep.setup_ms > 0 for ep in eps)


def test_closed_loop_rollout_runs_and_records_what_it_imagined(world):
    from cosmos3_robot.policies.rollout import WorldModelPolicy, run_episodes

    wm, _ = world
    policy = WorldModelPolicy(wm, execute=4, sampling=SamplingConfig(steps=1), imagine=True)
    (ep,) = run_episodes("cosmos3_robot/Reach-v0", policy, 1, seed=5, image_size=32)
    assert ep.steps > 0 and ep.frames.shape == (ep.steps + 1, 32, 32, 3) and ep.actions.shape == (ep.steps, 2)
    assert [c.step for c in ep.chunks] == list(range(0, ep.steps, 4))  # one plan every 4 steps
    assert ep.chunks[0].imagined.shape == (4, 32, 32, 3) and ep.chunks[0].imagined.dtype == np.uint8
    errors = ep.chunk_errors()
    assert len(errors) == len(ep.chunks) and all(
        np.isfinite(e["psnr_db_per_frame_ahead"]).all() for e in errors
    )


def test_labeller_and_simulator_shapes(world):
    wm, data = world
    s = data.ds[int(data.val_idx[0])]
    frames = s["video"]
    frames = (frames * 255).round().to(torch.uint8) if frames.dtype != torch.uint8 else frames
    frames = frames.permute(0, 2, 3, 1)  # (T, H, W, 3)
    actions = InverseDynamicsLabeller(wm, SamplingConfig(steps=2)).label_clip(frames, s["task"])
    assert actions.shape == (4, 2) and np.isfinite(actions).all()
    latents = LearnedSimulator(wm, SamplingConfig(steps=2)).predict(
        frames[None, :1], s["action"][None], s["task"]
    )
    assert latents.shape[2] == 2
    with pytest.raises(ValueError, match="frames"):
        InverseDynamicsLabeller(wm).label_clip(frames[:3], s["task"])


def test_learned_simulator_env_passes_check_env_and_repeats_a_seeded_episode(tiny_world):
    import gymnasium as gym
    from gymnasium.utils.env_checker import check_env

    import cosmos3_robot.envs  # noqa: F401  (registers the ids)

    env = gym.make(
        "cosmos3_robot/Learned-v0", model=str(tiny_world[0]), env="cosmos3_robot/Reach-v0", steps=1
    )
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=3)
    real = gym.make("cosmos3_robot/Reach-v0", image_size=32)
    np.testing.assert_array_equal(obs["pixels"], real.reset(seed=3)[0]["pixels"])  # a real first frame
    a = env.action_space.sample()
    first = env.step(a)[0]["pixels"]
    env.reset(seed=3)
    np.testing.assert_array_equal(env.step(a)[0]["pixels"], first)  # seeded: the same imagined frame
    assert first.shape == (32, 32, 3) and first.dtype == np.uint8
    with pytest.raises(ValueError, match="trained on recordings of cosmos3_robot/Reach-v0"):
        gym.make("cosmos3_robot/Learned-v0", model=str(tiny_world[0]), env="cosmos3_robot/Push-v0")


def test_open_loop_plan_in_imagination_feeds_each_clip_its_own_actions(tiny_world):
    from cosmos3_robot.policies.learned_env import LearnedEnv

    env = LearnedEnv(str(tiny_world[0]), "cosmos3_robot/Reach-v0", steps=1)
    assert env.max_steps == 50 and env.world.geometry.num_actions == 4  # Reach's 5 s at 10 Hz; the fixture
    plan = np.linspace(-1, 1, 2 * env.max_steps, dtype=np.float32).reshape(env.max_steps, 2)
    with pytest.raises(ValueError, match="success probe"):
        env.rollout_plan(3, plan)
    seen, judged = [], []

    class Probe:  # calls the imagined frame numbered `hit` (1-based env step) a success
        hit = 6

        def predict(self, world, frames):
            start = len(judged)
            judged.extend(range(start + 1, start + 1 + len(frames)))
            return np.array([k == self.hit for k in judged[start:]])

    real_batch = env.world.clip_batch
    env.world.clip_batch = lambda texts, latents, actions, obs_frames, frames=None: (
        seen.append(actions.numpy().copy())
        or real_batch(texts, latents, actions=actions, obs_frames=obs_frames)
    )
    env.probe = Probe()
    assert env.rollout_plan(3, plan) == (True, 6)
    assert len(seen) == 2 and judged == list(range(1, 9))  # clips of 4 future frames (5-frame clips)
    np.testing.assert_array_equal(seen[0][0], plan[0:4])  # the plan's own next actions, not one held
    np.testing.assert_array_equal(seen[1][0], plan[4:8])
    seen.clear(), judged.clear()
    Probe.hit = 0  # never: the whole episode, 13 clips, the last one cut to the 2 steps left
    assert env.rollout_plan(3, plan[:45]) == (False, 50)
    assert len(seen) == 13 and judged == list(range(1, 51))
    np.testing.assert_array_equal(seen[11][0], np.concatenate([plan[44:45], np.zeros((3, 2), np.float32)]))
    env.close()


def test_temporal_ensembling_averages_the_live_chunks_oldest_first(world):
    wm, _ = world
    m = 0.5
    runner = PolicyRunner(wm, sampling=SamplingConfig(steps=1), ensemble=m)
    na, a = wm.geometry.num_actions, wm.actions.dim
    calls = []

    def plan(pixels, task, state=None):  # the chunk planned at step s: action k is s + k/10 in every dim
        s = len(calls)
        calls.append(s)
        return np.full((na, a), float(s)) + np.arange(na)[:, None] / 10

    runner.plan = plan
    obs = {"pixels": np.zeros((32, 32, 3), np.uint8)}
    for t in range(na + 3):
        got = runner.act(obs, "reach")
        starts = [s for s in range(t + 1) if t - s < na]  # chunks that cover step t, oldest first
        preds = np.array([s + (t - s) / 10 for s in starts])
        w = np.exp(-m * np.arange(len(starts)))
        np.testing.assert_allclose(got, np.full(a, (w * preds).sum() / w.sum()), rtol=1e-6)
    assert calls == list(range(na + 3))  # one plan per step
    runner.reset()
    assert runner.plans == [] and runner.t == 0
    with pytest.raises(ValueError, match="ensemble=-1"):
        PolicyRunner(wm, ensemble=-1)


def test_the_labeller_keeps_only_the_actions_a_window_shows():
    """A 5-frame window shows its first 4 actions of 10: with predictions equal to their offset in the
    window, no label comes from offsets 4..9, and every frame gets one."""
    from types import SimpleNamespace

    from cosmos3_robot.policies.labelling import EpisodeLabeller
    from cosmos3_robot.processors.geometry import ClipGeometry

    g = ClipGeometry(fps=10.0, num_frames=5, frame_step=1, num_actions=10, action_step=1, obs_frames=1,
                     image_size=32)  # fmt: skip
    stats = {"action": SimpleNamespace(std=[1.0, 1.0])}
    world = SimpleNamespace(geometry=g, actions=SimpleNamespace(normalizer=SimpleNamespace(stats=stats),
                                                                key="action", dim=2))  # fmt: skip
    labeller = EpisodeLabeller(world, samples=1)
    assert labeller.seen == 4 and labeller.stride == 2
    assert labeller.starts(12) == [0, 2, 4, 6, 8]  # the last window's 4th label lands on frame 11

    def offsets(windows, tasks):  # (K, B, Na, A): prediction = the action's offset in its window
        return np.broadcast_to(np.arange(10.0)[None, None, :, None], (1, len(windows), 10, 2)).copy()

    labeller._predict = offsets
    (labels,) = labeller.label([np.zeros((12, 32, 32, 3), np.uint8)], ["reach"])
    assert labels.actions.max() <= 3 and labels.actions.shape == (12, 2)
    np.testing.assert_allclose(labels.actions[:, 0], [0, 1, 1, 2, 1, 2, 1, 2, 1, 2, 2, 3])
    with pytest.raises(ValueError, match="stride 5 skips frames: a window labels 4 frames"):
        EpisodeLabeller(world, stride=5)


def test_an_instruction_never_seen_in_training_warns_once_and_still_runs(tiny_world):
    import warnings

    from cosmos3_robot.datasets import open_lerobot_metadata
    from cosmos3_robot.policies.world_model import WorldModel

    world = WorldModel.from_folder(tiny_world[0])
    recorded = sorted(open_lerobot_metadata(None, tiny_world[1]).tasks.index)
    assert world.tasks == recorded  # oracle: the dataset's own task table
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        world.prompt([recorded[0], ""])  # a known instruction, and none at all: silent
    with pytest.warns(
        UserWarning, match="'move the fingertip to the purple target' is not one the model was"
    ):
        ids, _ = world.prompt(["move the fingertip to the purple target"])
    assert ids.shape[0] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        world.prompt(["move the fingertip to the purple target"])  # once per text
