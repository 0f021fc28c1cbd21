"""Faster CPU inference: every Linear's weight laid out for oneDNN once, not on every call.

A CPU matrix product first copies its weight into the blocked layout the vector units read. For the
thin activations of inference — tens to a few hundred tokens, as in a denoising step or a policy
query — that copy is 15–25 % of the product (`benchmarks/speed.py` measures it). `pack_for_cpu` keeps
a packed copy per weight, the way PyTorch's own compiler does when it freezes a model, and the model
code stays plain `nn.Linear` (applied from outside, after construction).

Linears that read the same input (a layer's query, key and value projections) are also packed as one
concatenated weight, `PackedConcat`: one product instead of three. A product has a fixed cost that is
paid per call, and at the 64 rows of a denoising step it is a large share of the product's time.

The packed copy follows its weights: when a weight changes in place (an optimiser step,
`load_state_dict`), its version counter moves and the next call repacks. Anything the packed kernel
does not cover goes through `F.linear` unchanged: autograd, other devices, other dtypes, and weights
created under `torch.inference_mode` (they have no version counter, so a stale copy could not be told).

With `linear_dtype=torch.bfloat16` the packed weights are kept in bf16 and every packed product
casts its float32 input to bf16 and its output back (bias added in float32): on a CPU with AMX or
AVX512-BF16 the thin products of a denoising step run 2-3x faster, at bf16's precision (about three
significant digits). The rest of the model stays float32. Off by default; `rollout --linear-dtype`.
oneDNN's bf16 kernels need AVX512 (BW, VL, DQ) or AVX-NE-CONVERT: on a CPU without them (an AVX2-only
one) bf16 weights are not packed, and a bf16 product runs as `F.linear` on the bf16-rounded operands,
the same arithmetic at PyTorch's slower reference speed (`bf16_available()` tells which).

`pack_for_cpu` also turns on the fused RMSNorm and QK-norm + rotation kernels of `cpu_kernels`, the
other per-call cost that weighs on a thin denoising step.

All of it is applied by swapping modules for subclasses that keep the same parameters (the model code
in `model/` has no flag for it, as diffusers' attention processors are set from outside):

    nn.Linear      -> PackedLinear     one packed weight
    GatedMLP       -> CPUGatedMLP      gate and up as one packed product (`gate_up`)
    TowerAttention -> CPUTowerAttention q, k and v as one packed product (`project`); QK-norm and the
                                       rotation as one fused kernel call (`norm_and_rotate`)
    RMSNorm        -> FusedRMSNorm     one fused kernel call
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from cosmos3_robot.infra import cpu_kernels
from cosmos3_robot.model.attention import TowerAttention
from cosmos3_robot.model.layers import GatedMLP, RMSNorm

_PACKABLE = (torch.float32, torch.bfloat16)


def available() -> bool:
    return torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled


def bf16_available() -> bool:
    """Whether oneDNN can pack and run bf16 products on this CPU (AVX512 BW/VL/DQ or AVX-NE-CONVERT)."""
    return available() and _cpu_has_onednn_bf16()


@functools.cache
def _cpu_has_onednn_bf16() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


TRAINING_DTYPES = ("auto", "bf16", "fp32")


def training_dtype(name: str) -> str:
    """The autocast dtype a CPU training run uses for `name` in TRAINING_DTYPES: "auto" is bf16 where
    oneDNN has bf16 kernels (about 4x faster than fp32 for the small conv trainers there) and fp32
    elsewhere (on an AVX2-only CPU bf16 autocast fell to ~1/40 of fp32's speed: 58 estimator steps
    in 5 minutes)."""
    if name not in TRAINING_DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(TRAINING_DTYPES)}, got {name!r}")
    if name == "auto":
        return "bf16" if bf16_available() else "fp32"
    return name


def _packable(x: Tensor, tensors: list[Tensor]) -> bool:
    """Whether oneDNN's packed product may run x against these weights (and biases)."""
    if x.device.type != "cpu" or x.dtype not in _PACKABLE:
        return False
    if x.dtype == torch.bfloat16 and not bf16_available():
        return False
    for t in tensors:
        if t.device.type != "cpu" or t.dtype != x.dtype or t.is_inference():
            return False
    return not (torch.is_grad_enabled() and (x.requires_grad or any(t.requires_grad for t in tensors)))


def _key(tensors: list[Tensor]) -> tuple[tuple[int, int, int], ...]:
    """Changes whenever one of the tensors is written in place or replaced by another."""
    return tuple((id(t), t._version, t.data_ptr()) for t in tensors)


def _pack(weight: Tensor) -> Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), None)


def _packed_linear(x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


class PackedConcat:
    """The packed product of Linears that read the same input: x -> [l_1(x) | l_2(x) | ...].

    A cache, not a module: the caller passes its Linears on every call (the ones it holds now), and
    the concatenated packed weight is rebuilt whenever one of them is replaced or written in place.
    The parameters and the state_dict stay the Linears'. Returns None where packing does not apply;
    the caller then runs the Linears one by one.
    """

    def __init__(self, compute_dtype: torch.dtype | None = None) -> None:
        self._packed: Tensor | None = None
        self._bias: Tensor | None = None
        self._key: tuple | None = None
        self.compute_dtype = compute_dtype  # bf16: products in bf16 for float32 inputs

    def __call__(self, x: Tensor, linears: tuple[nn.Linear, ...]) -> Tensor | None:
        tensors = [p for lin in linears for p in (lin.weight, lin.bias) if p is not None]
        if not _packable(x, tensors):
            return None
        low = self.compute_dtype is not None and x.dtype == torch.float32
        key = (_key(tensors), low)
        if key != self._key:
            weight = torch.cat([lin.weight for lin in linears])
            if low:  # kept unpacked where oneDNN has no bf16 kernels for this CPU (module docstring)
                weight = weight.to(self.compute_dtype)
                self._packed = _pack(weight) if bf16_available() else weight.detach().contiguous()
            else:
                self._packed = _pack(weight)
            biases = [lin.bias for lin in linears]
            self._bias = (
                None
                if all(b is None for b in biases)
                else torch.cat(
                    [
                        b.detach() if b is not None else x.new_zeros(lin.out_features)
                        for lin, b in zip(linears, biases, strict=True)
                    ]
                )
            )
            self._key = key
        if low:
            xl = x.to(self.compute_dtype)
            w = self._packed  # a plain bf16 weight where oneDNN has no bf16 kernels
            y = (_packed_linear(xl, w, None) if w.is_mkldnn else F.linear(xl, w)).float()
            return y if self._bias is None else y + self._bias
        return _packed_linear(x, self._packed, self._bias)

    def __getstate__(self):  # a cache: never pickled or deep-copied
        return {"compute_dtype": self.compute_dtype}

    def __setstate__(self, state) -> None:
        self.__init__(state.get("compute_dtype"))


def run_linears(concat: PackedConcat | None, x: Tensor, linears: tuple[nn.Linear, ...]) -> tuple[Tensor, ...]:
    """(l_1(x), l_2(x), ...) for Linears that read the same input: one packed product through the
    module's `concat` where it applies, else the Linears one by one (concat None: not packed)."""
    y = None if concat is None else concat(x, linears)
    if y is None:
        return tuple(lin(x) for lin in linears)
    return y.split([lin.out_features for lin in linears], dim=-1)


class PackedLinear(nn.Linear):
    """An `nn.Linear` (same parameters, same state_dict) whose CPU inference uses a packed weight:
    a `PackedConcat` of itself alone."""

    _cache: PackedConcat | None = None
    linear_dtype: torch.dtype | None = None

    def forward(self, x: Tensor) -> Tensor:
        if self._cache is None:
            self._cache = PackedConcat(self.linear_dtype)
        y = self._cache(x, (self,))
        return F.linear(x, self.weight, self.bias) if y is None else y


class FusedRMSNorm(RMSNorm):
    """An `RMSNorm` whose small float32 inference inputs go through `cpu_kernels.rms_norm`."""

    def forward(self, x: Tensor) -> Tensor:
        y = cpu_kernels.rms_norm(x, self.weight, self.eps)
        return super().forward(x) if y is None else y


class CPUGatedMLP(GatedMLP):
    """A `GatedMLP` whose gate and up projections run as one packed product."""

    concat: PackedConcat | None = None

    def gate_up(self, x: Tensor) -> tuple[Tensor, Tensor]:
        return run_linears(self.concat, x, (self.gate_proj, self.up_proj))


class CPUTowerAttention(TowerAttention):
    """A `TowerAttention` with q, k and v as one packed product and, with `fused` set, QK-norm and
    the rotation as one `cpu_kernels.qk_norm_rope` call per tensor."""

    concat: PackedConcat | None = None
    fused: bool = False

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return run_linears(self.concat, x, (self.q_proj, self.k_proj, self.v_proj))

    def norm_and_rotate(
        self, q: Tensor, k: Tensor, rope: tuple[Tensor, Tensor], extra_key_norm: RMSNorm | None = None
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        if self.fused and extra_key_norm is None and isinstance(self.q_norm, RMSNorm):
            qn, kn = self.q_norm, self.k_norm
            fq = cpu_kernels.qk_norm_rope(q, qn.weight, qn.eps, *rope)
            fk = None if fq is None else cpu_kernels.qk_norm_rope(k, kn.weight, kn.eps, *rope)
            if fk is not None:
                return fq, fk, None
        return super().norm_and_rotate(q, k, rope, extra_key_norm)


_SWAPS = {GatedMLP: CPUGatedMLP, TowerAttention: CPUTowerAttention}


LINEAR_DTYPES = {"fp32": None, "bf16": torch.bfloat16}


def pack_for_cpu(model: nn.Module, linear_dtype: torch.dtype | None = None) -> nn.Module:
    """Swap `model`'s modules for their packed CPU subclasses, in place; returns `model`.

    Every plain `nn.Linear` becomes a `PackedLinear`, every `GatedMLP` / `TowerAttention` its packed
    subclass with an empty `PackedConcat`. The modules keep their Parameter objects (tied weights stay
    tied, an optimiser keeps working), so nothing is copied. Linears stay as they are where PyTorch
    has no oneDNN. The fused kernels are turned on (`set_fused_kernels`). `linear_dtype=torch.bfloat16`
    runs the packed products of float32 inputs in bf16 (module docstring).
    """
    if linear_dtype not in LINEAR_DTYPES.values():
        raise ValueError(
            f"linear_dtype must be one of {list(LINEAR_DTYPES)} (None or torch.bfloat16), got {linear_dtype}"
        )
    set_fused_kernels(model, True)
    if not available():
        return model
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = PackedLinear  # same attributes, new forward: nothing is copied
        elif type(module) in _SWAPS:
            module.__class__ = _SWAPS[type(module)]
        if isinstance(module, PackedLinear):
            module.linear_dtype = linear_dtype
            module.__dict__.pop("_cache", None)
        if isinstance(module, CPUGatedMLP | CPUTowerAttention):
            module.concat = PackedConcat(linear_dtype)
    return model


def set_fused_kernels(model: nn.Module, on: bool) -> nn.Module:
    """Turn the `cpu_kernels` path of every RMSNorm and attention on or off; returns `model`."""
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.__class__ = FusedRMSNorm if on else RMSNorm
        elif isinstance(module, TowerAttention):
            if type(module) is TowerAttention:
                module.__class__ = CPUTowerAttention
            module.fused = on
    return model


def unpack(model: nn.Module) -> nn.Module:
    """Undo `pack_for_cpu`: every module back to its plain class, packed copies dropped."""
    plain = {
        PackedLinear: nn.Linear,
        FusedRMSNorm: RMSNorm,
        CPUGatedMLP: GatedMLP,
        CPUTowerAttention: TowerAttention,
    }
    for module in model.modules():
        if type(module) in plain:
            for attr in ("_cache", "concat", "fused", "linear_dtype"):
                module.__dict__.pop(attr, None)
            module.__class__ = plain[type(module)]
    return model
