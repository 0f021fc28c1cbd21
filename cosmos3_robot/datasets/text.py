"""Text for the Reasoner: questions/answers and captions from simulator state (tokenizers are in
`processors/tokenizers.py`).

Questions from simulator state. Our envs record `observation.environment_state` as named 2-D
points (`goal_x, goal_y, fingertip_x, ...`, see envs/reach.py and envs/push.py), in metres on the
table plane seen from the top camera: +x is right and +y is up in the image. From those points:

    relative  "where is the target relative to the fingertip?" -> "up and to the left, 0.12 m"
    distance  "how far is the puck from the goal?"             -> "0.07 m"
    caption   "what is the task?"                              -> the episode's instruction

Directions are the 8 compass sectors of the offset (each 45° wide, centred on right, up-right, up,
...); distances are Euclidean, rounded to centimetres. A sample's question is a pure function of
(seed, episode, frame), so a dataset's text never changes between runs or epochs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from torch import Tensor

# ------------------------------------------------------------------------------------------------
# Questions and answers from simulator state
# ------------------------------------------------------------------------------------------------

# How the env-state point names read in English.
DISPLAY_NAMES = {
    "goal": "target",
    "fingertip": "fingertip",
    "distractor": "distractor",
    "puck": "puck",
    "pusher": "pusher",
}
# Sector k covers angles (k·45° ± 22.5°), counter-clockwise from +x (right); +y is up in the image.
DIRECTIONS = (
    "to the right",
    "up and to the right",
    "up",
    "up and to the left",
    "to the left",
    "down and to the left",
    "down",
    "down and to the right",
)
SAME_PLACE_M = 0.005  # closer than this: "at the same place"
QA_KINDS = ("relative", "distance", "caption")


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    kind: str

    def prompt(self) -> str:
        """The text before the answer; the model is trained on the answer only."""
        return f"Q: {self.question} A: "


def scene_points(names: list[str], values: np.ndarray | Tensor) -> dict[str, np.ndarray]:
    """Named 2-D points from env-state feature names `<point>_x, <point>_y` and one row of values."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if len(names) != len(values):
        raise ValueError(f"environment_state has {len(values)} values but {len(names)} names {names}")
    index = {n: i for i, n in enumerate(names)}
    points = {}
    for n in names:
        if n.endswith("_x") and n[:-2] + "_y" in index:
            p = n[:-2]
            points[p] = np.array([values[index[n]], values[index[p + "_y"]]])
    return points


def direction(offset: np.ndarray) -> str:
    """Compass word of a 2-D offset (x right, y up)."""
    angle = math.degrees(math.atan2(float(offset[1]), float(offset[0])))
    return DIRECTIONS[int(round(angle / 45.0)) % 8]


def relative_answer(a: np.ndarray, b: np.ndarray) -> str:
    """Where a is, seen from b: "up and to the left, 0.12 m"."""
    offset = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    dist = float(np.hypot(*offset))
    if dist < SAME_PLACE_M:
        return f"at the same place, {dist:.2f} m"
    return f"{direction(offset)}, {dist:.2f} m"


def display(point: str) -> str:
    return DISPLAY_NAMES.get(point, point.replace("_", " "))


def qa_rng(seed: int, episode: int, frame: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(episode), int(frame)])


def make_qa(
    names: list[str],
    env_state: np.ndarray | Tensor,
    task: str,
    *,
    seed: int,
    episode: int,
    frame: int,
    kinds: tuple[str, ...] = QA_KINDS,
) -> QA:
    """One question about the scene, chosen by (seed, episode, frame); the answer is exact geometry."""
    bad = [k for k in kinds if k not in QA_KINDS]
    if bad or not kinds:
        raise ValueError(f"question kinds {list(kinds)}: choose a non-empty subset of {QA_KINDS}")
    rng = qa_rng(seed, episode, frame)
    points = scene_points(names, env_state)
    usable = [k for k in kinds if k == "caption" or len(points) >= 2]
    if not usable:
        raise ValueError(f"environment_state names {names} hold fewer than two <name>_x/<name>_y points")
    kind = usable[int(rng.integers(len(usable)))]
    if kind == "caption":
        return QA("what is the task?", task.strip() or "nothing", kind)
    keys = sorted(points)
    i, j = rng.choice(len(keys), size=2, replace=False)
    a, b = keys[int(i)], keys[int(j)]
    if kind == "relative":
        return QA(
            f"where is the {display(a)} relative to the {display(b)}?",
            relative_answer(points[a], points[b]),
            kind,
        )
    dist = float(np.hypot(*(points[a] - points[b])))
    return QA(f"how far is the {display(a)} from the {display(b)}?", f"{dist:.2f} m", kind)


def caption(task: str) -> QA:
    """A caption sample: the instruction as the description of the episode."""
    return QA("what is the robot doing?", task.strip() or "nothing", "caption")
