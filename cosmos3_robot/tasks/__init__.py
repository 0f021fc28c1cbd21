"""Task heads (action modes) over the MoT, and cached sampling. Registry by name."""

from __future__ import annotations

import importlib

from cosmos3_robot.tasks.base import ClipBatch, TaskHead
from cosmos3_robot.tasks.sampling import Prompt, ReasonedPrompt, sample

# name -> "module:Class", imported lazily
TASKS: dict[str, str] = {
    "forward_dynamics": "cosmos3_robot.tasks.heads:ForwardDynamics",
    "inverse_dynamics": "cosmos3_robot.tasks.heads:InverseDynamics",
    "policy": "cosmos3_robot.tasks.heads:Policy",
    "action_policy": "cosmos3_robot.tasks.heads:ActionPolicy",
    "video": "cosmos3_robot.tasks.heads:VideoPrediction",
}


def make_task(name: str, **kwargs) -> TaskHead:
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {sorted(TASKS)}")
    module, cls = TASKS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)


__all__ = ["TASKS", "ClipBatch", "Prompt", "ReasonedPrompt", "TaskHead", "make_task", "sample"]
