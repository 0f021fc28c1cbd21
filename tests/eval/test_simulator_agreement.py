"""Pearson, Spearman and SIMPLER's MMRV of success rates in a real and a stand-in simulator."""

from __future__ import annotations

import numpy as np
import pytest

from cosmos3_robot.eval.metrics import simulator_agreement


def test_a_perfect_ranking_and_a_reversed_one():
    real = [0.9, 0.5, 0.2, 0.0]
    same = simulator_agreement(real, [0.8, 0.6, 0.3, 0.1])
    assert same["mmrv"] == 0.0 and same["spearman"] == pytest.approx(1.0)
    assert same["pearson"] == pytest.approx(np.corrcoef(real, [0.8, 0.6, 0.3, 0.1])[0, 1])
    rev = simulator_agreement(real, [0.0, 0.2, 0.5, 0.9])
    # By hand: every pair is violated, so each policy's worst violation is its largest real gap.
    assert rev["mmrv"] == pytest.approx((0.9 + 0.5 + 0.7 + 0.9) / 4)
    assert rev["spearman"] == pytest.approx(-1.0)


def test_mmrv_by_hand_with_ties_and_constant_sides():
    # imagined all equal: i is violated against every j with real_i < real_j (the tie says "not less").
    out = simulator_agreement([1.0, 1 / 3, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0])
    assert out["mmrv"] == pytest.approx((0 + 2 / 3 + 1 + 1) / 4)
    assert out["pearson"] is None and out["spearman"] is None
    assert any("imagined success rates are all equal" in n for n in out["notes"])
    # One swapped pair among three: policies 1 and 2 (real 0.5 vs 0.4) are ranked the other way.
    out = simulator_agreement([0.9, 0.5, 0.4], [0.9, 0.3, 0.35])
    assert out["mmrv"] == pytest.approx((0 + 0.1 + 0.1) / 3)
    assert out["spearman"] == pytest.approx(0.5)  # ranks (3,2,1) vs (3,1,2): 1 - 6*2/(3*8)


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match=">= 3 policies"):
        simulator_agreement([0.1, 0.2], [0.1, 0.2])
    with pytest.raises(ValueError, match=">= 3 policies"):
        simulator_agreement([0.1, 0.2, 0.3], [0.1, 0.2])
