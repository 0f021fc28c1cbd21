"""LeRobot baselines trained here: a budget in steps, a LeRobot checkpoint the rollout harness loads,
an exact resume, and clear errors for a bad budget or kind."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cosmos3_robot.training.lerobot_baseline import BaselineConfig, train_baseline


def test_act_trains_saves_a_rollout_checkpoint_and_resumes(tiny_world, tmp_path):
    from cosmos3_robot.policies.lerobot import LeRobotPolicy

    _, root, _ = tiny_world
    out = tmp_path / "act"
    cfg = dict(kind="act", root=str(root), out=str(out), batch_size=2, chunk=4, execute=2, save_every=2)
    first = train_baseline(BaselineConfig(**cfg, steps=2), progress=False)
    assert first["step"] == 2 and np.isfinite(first["final_loss"])
    resumed = train_baseline(BaselineConfig(**cfg, steps=3), progress=False)
    assert resumed["step"] == 3  # one more step, not three
    log = json.loads((out / "train_log.json").read_text())
    assert log["step"] == 3 and log["config"]["kind"] == "act"
    policy = LeRobotPolicy.from_folder(out / "model")
    assert policy.policy.config.chunk_size == 4 and policy.policy.config.pretrained_backbone_weights is None
    obs = {"pixels": np.zeros((32, 32, 3), np.uint8), "agent_pos": np.zeros(4, np.float32)}
    action = policy.act(obs, "move the fingertip to the red target")
    assert action.shape == (2,) and np.isfinite(action).all()
    for _ in range(3):
        policy.act(obs, "move the fingertip to the red target")
    assert [c.step for c in policy.chunks] == [0, 2]  # a latency per plan, not per queued action

    # --ensemble: ACT's temporal ensembling, against the weighted mean of its chunks computed here
    m, task = 0.5, "move the fingertip to the red target"
    ens = LeRobotPolicy.from_folder(out / "model", ensemble=m)
    ens.reset()
    obs_at = [{**obs, "agent_pos": np.full(4, 0.1 * k, np.float32)} for k in range(4)]
    got = [ens.act(o, task) for o in obs_at]
    assert [c.step for c in ens.chunks] == [0, 1, 2, 3]  # a plan every step
    chunks = []
    for o in obs_at:
        batch = {"task": task, "observation.image": torch.zeros(1, 3, 32, 32),
                 "observation.state": torch.as_tensor(o["agent_pos"])[None]}  # fmt: skip
        with torch.no_grad():
            chunks.append(policy.policy.predict_action_chunk(policy.pre(batch))[0])  # (4, A) normalised
    w = np.exp(-m * np.arange(4))  # oldest first
    want = sum(w[i] * chunks[i][3 - i].numpy() for i in range(4)) / w.sum()
    want = np.asarray(policy.post(torch.as_tensor(want)[None]), np.float32).reshape(-1)
    np.testing.assert_allclose(got[3], want, rtol=1e-4, atol=1e-5)
    assert not np.allclose(got[3], np.asarray(policy.post(chunks[3][0][None])).reshape(-1))


def test_ensemble_is_refused_for_diffusion_policy(monkeypatch, tmp_path):
    from lerobot.configs.policies import PreTrainedConfig

    from cosmos3_robot.policies.lerobot import LeRobotPolicy

    (tmp_path / "config.json").write_text("{}")
    fake = type("C", (), {"type": "diffusion", "input_features": {}})()
    monkeypatch.setattr(PreTrainedConfig, "from_pretrained", classmethod(lambda cls, folder: fake))
    with pytest.raises(ValueError, match="temporal ensembling for ACT only; drop --ensemble"):
        LeRobotPolicy.from_folder(tmp_path, ensemble=0.01)


def test_diffusion_policy_latency_is_counted_per_plan():
    """Diffusion Policy queues its actions in `_queues["action"]` (ACT: `_action_queue`)."""
    from collections import deque

    import torch

    from cosmos3_robot.policies.lerobot import LeRobotPolicy

    class QueuedLikeDiffusion:
        config = type("C", (), {"input_features": {"observation.state": None}})()

        def __init__(self):
            self._queues = {"action": deque()}

        def reset(self):
            self._queues["action"].clear()

        def select_action(self, batch):
            if not self._queues["action"]:
                self._queues["action"].extend(torch.zeros(1, 2) + i for i in range(3))
            return self._queues["action"].popleft()

    policy = LeRobotPolicy(QueuedLikeDiffusion(), lambda b: b, lambda a: a, image_size=32)
    policy.reset()
    for _ in range(7):
        policy.act({"agent_pos": np.zeros(4, np.float32)}, "reach")
    assert [c.step for c in policy.chunks] == [0, 3, 6]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"kind": "pi0"}, "baseline kind 'pi0'"),
        ({"steps": None, "minutes": None}, "give a budget"),
        ({"minutes": float("nan")}, "minutes must be a finite number"),
        ({"steps": 0}, "steps must be >= 1"),
        ({"execute": 20}, "execute=20 cannot exceed the chunk of 10"),
    ],
)
def test_bad_settings_are_named(kw, match):
    base = dict(kind="act", root="x", out="y", steps=1)
    with pytest.raises(ValueError, match=match):
        BaselineConfig(**{**base, **kw})


def test_act_on_the_environment_state_reads_it_at_rollout(tiny_world, tmp_path):
    """`environment_state=True` (the privileged comparison) adds observation.environment_state to
    ACT's inputs; its rollout then needs the env observation of that name."""
    from cosmos3_robot.policies.lerobot import LeRobotPolicy

    _, root, _ = tiny_world
    out = tmp_path / "act_env"
    cfg = BaselineConfig(kind="act", root=str(root), out=str(out), batch_size=2, chunk=4, execute=2,
                         steps=1, environment_state=True)  # fmt: skip
    train_baseline(cfg, progress=False)
    policy = LeRobotPolicy.from_folder(out / "model")
    assert set(policy.policy.config.input_features) == {
        "observation.image", "observation.state", "observation.environment_state"
    }  # fmt: skip
    obs = {"pixels": np.zeros((32, 32, 3), np.uint8), "agent_pos": np.zeros(4, np.float32)}
    with pytest.raises(ValueError, match=r"obs needs \['environment_state'\]"):
        policy.act(obs, "reach")
    action = policy.act({**obs, "environment_state": np.zeros(6, np.float32)}, "reach")
    assert action.shape == (2,) and np.isfinite(action).all()
