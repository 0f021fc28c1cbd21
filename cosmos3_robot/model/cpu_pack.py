"""Faster CPU inference: every Linear's weight laid out for oneDNN once, not on every call.

A CPU matrix product first copies its weight into the blocked layout the vector units read. For the
thin activations of inference — tens to a few hundred tokens, as in a denoising step or a policy
query — that copy is 15–25 % of the product (`benchmarks/speed.py` measures it). `pack_for_cpu` keeps
a packed copy per weight, the way PyTorch's own compiler does when it freezes a model, and the model
code stays plain `nn.Linear` (applied from outside, after construction).

The packed copy follows its weight: when the weight changes in place (an optimiser step,
`load_state_dict`), its version counter moves and the next call repacks. Anything the packed kernel
does not cover goes through `F.linear` unchanged: autograd, other devices, other dtypes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

_PACKABLE = (torch.float32, torch.bfloat16)


def available() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


class PackedLinear(nn.Linear):
    """An `nn.Linear` (same parameters, same state_dict) whose CPU inference uses a packed weight."""

    _packed: Tensor | None = None
    _packed_key: tuple[int, int] | None = None

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight
        if (
            x.device.type != "cpu"
            or w.device.type != "cpu"
            or x.dtype != w.dtype
            or w.dtype not in _PACKABLE
            or (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))
        ):
            return F.linear(x, w, self.bias)
        key = (w._version, w.data_ptr())
        if self._packed_key != key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
            self._packed_key = key
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")

    def __getstate__(self):  # the packed copy is a cache: never pickled or deep-copied
        state = dict(super().__getstate__())
        state.pop("_packed", None)
        state.pop("_packed_key", None)
        return state


def pack_for_cpu(model: nn.Module) -> nn.Module:
    """Turn every plain `nn.Linear` of `model` into a `PackedLinear`, in place; returns `model`.

    The modules keep their Parameter objects (tied weights stay tied, an optimiser keeps working).
    A no-op where PyTorch has no oneDNN.
    """
    if not available():
        return model
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear  # same attributes, new forward: nothing is copied
    return model


def unpack(model: nn.Module) -> nn.Module:
    """Undo `pack_for_cpu` (drops the packed copies)."""
    for module in model.modules():
        if type(module) is PackedLinear:
            module.__dict__.pop("_packed", None)
            module.__dict__.pop("_packed_key", None)
            module.__class__ = nn.Linear
    return model
