"""Flow matching: noise paths, training σ, samplers, loss. Independent of the model."""

from .loss import flow_loss
from .paths import SigmaSampler, add_noise, shift_sigma, velocity_target
from .samplers import EulerSampler, HeunSampler, Sampler, guided, make_sampler, make_sigmas

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
