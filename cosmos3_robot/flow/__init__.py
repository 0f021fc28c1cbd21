"""Flow matching: noise paths, training σ, samplers, loss. Independent of the model."""

from cosmos3_robot.flow.loss import flow_loss
from cosmos3_robot.flow.paths import SigmaSampler, add_noise, shift_sigma, velocity_target
from cosmos3_robot.flow.samplers import EulerSampler, HeunSampler, Sampler, guided, make_sampler, make_sigmas

__all__ = [
    "EulerSampler",
    "HeunSampler",
    "Sampler",
    "SigmaSampler",
    "add_noise",
    "flow_loss",
    "guided",
    "make_sampler",
    "make_sigmas",
    "shift_sigma",
    "velocity_target",
]
