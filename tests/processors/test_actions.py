"""Action transforms: invertible normalisation, padding + mask, embodiment ids, json state."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from cosmos3_robot.processors.actions import (
    ActionTransform,
    EmbodimentRegistry,
    action_normalizer,
    pad_actions,
    unpad_actions,
)
from cosmos3_robot.processors.normalize import Normalizer


def _actions(n: int = 500, d: int = 6, dtype=torch.float64) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    scale = torch.tensor([0.01, 1.0, 50.0, 3.0, 0.5, 200.0])[:d]
    return (torch.randn(n, d, generator=gen, dtype=torch.float64) * scale + 7.0).to(dtype)


@pytest.mark.parametrize("mode", ["min_max", "mean_std"])
def test_normalisation_is_invertible(mode: str) -> None:
    x = _actions()
    t = ActionTransform.fit("lab/arm", 0, 8, x, mode=mode)
    y = t.normalize(x)
    torch.testing.assert_close(t.unnormalize(y), x, rtol=1e-13, atol=0)
    if mode == "min_max":
        torch.testing.assert_close(y.amin(0), torch.full((6,), -1.0, dtype=torch.float64))
        torch.testing.assert_close(y.amax(0), torch.full((6,), 1.0, dtype=torch.float64))
    else:
        torch.testing.assert_close(y.mean(0), torch.zeros(6, dtype=torch.float64), atol=1e-12, rtol=0)
        torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(6, dtype=torch.float64))
    x32 = x.float()  # float32 actions keep their dtype; the round trip is exact to float32 rounding
    y32 = t.normalize(x32)
    assert y32.dtype == torch.float32
    stats = t.normalizer.stats["action"]
    scale = torch.as_tensor((stats.max - stats.min) / 2 if mode == "min_max" else stats.std)
    bound = (scale + x32.abs()) * 2.0**-23 * 1.01  # one float32 ulp of y (times scale) and of x
    assert ((t.unnormalize(y32) - x32).abs() <= bound).all()


def test_state_dict_json_roundtrip_is_bit_exact() -> None:
    x = _actions()
    t = ActionTransform.fit("lab/arm", 2, 8, x, mode="mean_std")
    again = ActionTransform.from_state_dict(json.loads(json.dumps(t.state_dict())))
    assert again.state_dict() == t.state_dict()
    enc, _ = t.encode(x)
    assert torch.equal(again.encode(x)[0], enc)
    assert torch.equal(again.decode(enc), t.decode(enc))


def test_constant_dimension_stays_finite() -> None:
    x = _actions()
    x[:, 2] = 4.0
    for mode in ("min_max", "mean_std"):
        t = ActionTransform.fit("x", 0, 6, x, mode=mode)
        y = t.normalize(x)
        assert torch.isfinite(y).all() and (y[:, 2] == 0).all()
        torch.testing.assert_close(t.unnormalize(y), x, rtol=1e-13, atol=0)


def test_from_lerobot_stats() -> None:
    stats = {
        "action": {
            "min": np.array([-1.0, 0.0]),
            "max": np.array([1.0, 4.0]),
            "mean": np.zeros(2),
            "std": np.ones(2),
        }
    }
    t = ActionTransform("lab/x", 0, 4, Normalizer.from_lerobot_stats(stats, {"action": "min_max"}))
    enc, mask = t.encode(torch.tensor([[1.0, 0.0], [-1.0, 4.0]]))
    torch.testing.assert_close(enc, torch.tensor([[1.0, -1.0, 0.0, 0.0], [-1.0, 1.0, 0.0, 0.0]]))
    assert mask.tolist() == [True, True, False, False]


def test_padding_and_mask() -> None:
    x = torch.randn(4, 10, 3)
    padded, mask = pad_actions(x, 8)
    assert padded.shape == (4, 10, 8) and mask.tolist() == [True] * 3 + [False] * 5
    assert torch.equal(padded[..., :3], x) and (padded[..., 3:] == 0).all()
    assert torch.equal(unpad_actions(padded, 3), x)
    with pytest.raises(ValueError, match="raise the model's action width to at least 9"):
        pad_actions(torch.zeros(2, 9), 8)


def test_transform_roundtrip_two_embodiments() -> None:
    registry = EmbodimentRegistry()
    arm, mobile = _actions(d=6), _actions(d=2) * 0.1
    t_arm = ActionTransform.fit("lab/arm", registry.id_for("lab/arm"), 8, arm)
    t_mob = ActionTransform.fit("lab/mobile", registry.id_for("lab/mobile"), 8, mobile)
    assert (t_arm.embodiment_id, t_mob.embodiment_id, registry.id_for("lab/arm")) == (0, 1, 0)
    for t, a in ((t_arm, arm), (t_mob, mobile)):
        enc, mask = t.encode(a)
        assert enc.shape == (a.shape[0], 8) and int(mask.sum()) == a.shape[1]
        assert enc.abs().max() <= 1 + 1e-12  # min_max default: real entries in [-1, 1], padding 0
        torch.testing.assert_close(t.decode(enc), a, rtol=1e-13, atol=0)
    assert EmbodimentRegistry.from_state_dict(json.loads(registry.to_json())) == registry
    registry.check_fits(2)
    with pytest.raises(ValueError, match="raise the model's num_embodiments"):
        registry.check_fits(1)


def test_bad_configuration_raises() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        action_normalizer(_actions(), mode="quantile")
    with pytest.raises(ValueError, match="raise the width to at least 6"):
        ActionTransform.fit("x", 0, 4, _actions())
    with pytest.raises(ValueError, match="'x' has 6"):
        ActionTransform.fit("x", 0, 8, _actions()).encode(torch.zeros(3, 2))
    with pytest.raises(ValueError, match="0..N-1 without gaps"):
        EmbodimentRegistry.from_state_dict({"a": 0, "b": 2})
