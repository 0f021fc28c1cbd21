"""`suite_table`: one table over a suite from several `benchmark policies` runs, and the runs it refuses."""

from __future__ import annotations

import pytest

from cosmos3_robot.envs.metaworld import env_id
from cosmos3_robot.eval.metrics import wilson_interval
from cosmos3_robot.scripts.bench_table import suite_table

SUITE = {env_id(t): t for t in ["a-v3", "b-v3", "c-v3"]}


def run(cells: dict[tuple[str, str], int], execute: int = 2, ensemble=None, episodes: int = 50) -> dict:
    rows = [
        {"task": env_id(t), "arm": arm, "episodes": episodes, "successes": k,
         "success_rate": k / episodes, "wilson95": list(wilson_interval(k, episodes)), "eval_seeds": [10000, 10049]}
        for (t, arm), k in cells.items()
    ]  # fmt: skip
    return {"rows": rows, "variant": {"execute": execute, "ensemble": ensemble}}


def test_two_runs_make_one_table_with_each_arms_mean_over_the_tasks_run():
    text, figures = suite_table(
        [("r1", run({("a-v3", "ours"): 40, ("a-v3", "act"): 50})),
         ("r2", run({("b-v3", "ours"): 10, ("b-v3", "act"): 30}))], SUITE,
    )  # fmt: skip
    assert figures["tasks_run"] == ["a-v3", "b-v3"] and figures["tasks_missing"] == ["c-v3"]
    assert figures["means"]["ours"]["mean_success_rate"] == pytest.approx((0.8 + 0.2) / 2)
    assert figures["means"]["act"]["successes"] == 80 and figures["means"]["act"]["episodes"] == 100
    assert figures["means"]["act"]["pooled_wilson95"] == pytest.approx(list(wilson_interval(80, 100)))
    assert figures["cells"]["b-v3/ours"]["run"] == "r2"
    assert (
        "| a-v3 | 40/50 (" in text
        and "| mean over the tasks run (2 of 3) | 50.0% over 2 tasks (50/100 pooled" in text
    )
    assert "Not run yet: c-v3." in text


def test_an_arm_missing_on_a_task_is_shown_not_run_and_left_out_of_its_mean():
    text, figures = suite_table(
        [("r1", run({("a-v3", "ours"): 25, ("a-v3", "act"): 50, ("b-v3", "act"): 0}))], SUITE
    )
    assert "| b-v3 | not run | 0/50 (" in text
    assert "| 50.0% over 1 task (25/50 pooled" in text and "| 50.0% over 2 tasks (50/100 pooled" in text
    assert figures["means"]["ours"]["tasks"] == 1 and figures["means"]["ours"]["mean_success_rate"] == 0.5
    assert figures["means"]["act"]["mean_success_rate"] == 0.5


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (run({("b-v3", "ours"): 1}, ensemble=0.01), "differ in rollout setting or seeds"),
        (run({("b-v3", "ours"): 1}, execute=5), "differ in rollout setting or seeds"),
        (run({("a-v3", "ours"): 1}), "a-v3 / ours is in both r1 and r2: list only one of them"),
    ],
)
def test_runs_that_cannot_share_a_table_are_refused(second, message):
    with pytest.raises(ValueError, match=message):
        suite_table([("r1", run({("a-v3", "ours"): 40})), ("r2", second)], SUITE)


def test_no_runs_is_refused():
    with pytest.raises(ValueError, match="at least one results file"):
        suite_table([], SUITE)


def test_a_task_outside_the_suite_is_named_and_left_out_of_the_means():
    text, figures = suite_table([("r1", run({("a-v3", "ours"): 50, ("reach-v3", "ours"): 0}))], SUITE)
    assert figures["means"]["ours"]["mean_success_rate"] == 1.0 and figures["tasks_run"] == ["a-v3"]
    assert figures["tasks_outside"] == ["cosmos3_robot/MetaWorld-reach-v3"]
    assert "Outside the suite, left out of this table: cosmos3_robot/MetaWorld-reach-v3." in text
