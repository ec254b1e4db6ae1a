"""Seeded inputs and host references for the PyTorch tests, computed with torch on the CPU.

Every rank builds every rank's input from the same seed, so each rank knows the expected result
without asking its peers. Inputs are never zero, and their ranges keep every integer result free
of overflow, so the integer references are exact whatever a library does on overflow.

Two references for floating-point reductions:
- `fold`: our documented arithmetic, exact to the bit: the ranks' values folded in rank order
  0..n-1 in fp32 (fp16 and bf16 widened exactly), one IEEE operation per step, rounded to the
  element type once; avg divides the sum by n. (Torch's CPU fp32 add, mul and div are single
  IEEE operations, so the host computes the same bits as any correct GPU kernel.)
- `exact64` with `tolerance`: the real-number result in float64 and the error a reduction with
  fp32 accumulation may have (n accumulation roundings, one rounding to the element type).

With 2 ranks there is one addition, which every order and every accumulator round alike: the gloo
self-check (PURLIN_TORCH_BACKEND=gloo PURLIN_TORCH_WORLDS=2) then matches both references.
"""
from __future__ import annotations

import ctypes
import zlib

import torch

from checks import CheckFailed

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}
OPS = ("sum", "avg", "min", "max", "prod")

# Unit roundoff of each floating type, and of the fp32 accumulator.
_UNIT = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
_ACC_UNIT = 2.0 ** -24


def seed_of(name: str) -> int:
    """A stable seed per check name (the same in every process)."""
    return zlib.crc32(name.encode())


def _generator(seed: int, rank: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + rank)


def _int_root(limit: int, k: int) -> int:
    """The largest r with r**k <= limit."""
    r = int(round(limit ** (1.0 / k)))
    while r > 0 and r ** k > limit:
        r -= 1
    while (r + 1) ** k <= limit:
        r += 1
    return r


def int_bounds(dtype: torch.dtype, op: str, world: int) -> tuple[int, int]:
    """Inclusive input range for an integer reduction over `world` ranks that cannot overflow."""
    top = torch.iinfo(dtype).max
    if op in ("sum", "avg"):
        if dtype == torch.uint8:
            return 1, top // world
        return -(top // world), top // world
    if op == "prod":
        r = _int_root(top, world)
        return (1, r) if dtype == torch.uint8 else (-r, r)
    if dtype == torch.uint8:
        return 1, top
    if dtype == torch.int32:
        return torch.iinfo(dtype).min, top
    return -(2 ** 62), 2 ** 62  # int64: torch.randint's bounds must fit in int64


def values(seed: int, rank: int, count: int, dtype: torch.dtype, op: str = "sum", world: int = 2) -> torch.Tensor:
    """Rank `rank`'s input: `count` seeded non-zero values of `dtype`, on the CPU.

    Floats have magnitudes in [0.125, 2) ([0.5, 2) for prod) and random signs; integers are drawn
    from int_bounds(dtype, op, world)."""
    g = _generator(seed, rank)
    if dtype.is_floating_point:
        low, span = (0.5, 1.5) if op == "prod" else (0.125, 1.875)
        magnitude = low + span * torch.rand(count, generator=g, dtype=torch.float64)
        sign = torch.where(torch.rand(count, generator=g, dtype=torch.float64) < 0.5, -1.0, 1.0)
        return (sign * magnitude).to(dtype)
    lo, hi = int_bounds(dtype, op, world)
    v = torch.randint(lo, hi + 1, (count,), generator=g, dtype=torch.int64)
    v = torch.where(v == 0, torch.ones_like(v), v)
    return v.to(dtype)


def all_values(seed: int, world: int, count: int, dtype: torch.dtype, op: str = "sum") -> list[torch.Tensor]:
    return [values(seed, r, count, dtype, op, world) for r in range(world)]


def poison(count: int, dtype: torch.dtype) -> torch.Tensor:
    """Output filler no correct result equals (the inputs are never zero... nor this pattern)."""
    if dtype.is_floating_point:
        return torch.full((count,), 1234.5, dtype=dtype)
    return torch.full((count,), 77, dtype=dtype)


def _combine(acc: torch.Tensor, x: torch.Tensor, op: str) -> torch.Tensor:
    if op in ("sum", "avg"):
        return acc + x
    if op == "prod":
        return acc * x
    if op == "max":
        return torch.maximum(acc, x)
    if op == "min":
        return torch.minimum(acc, x)
    raise ValueError(op)


def fold(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    """Our arithmetic: rank-ordered fold in the accumulator type, rounded once (see module doc)."""
    dtype = inputs[0].dtype
    n = len(inputs)
    if dtype.is_floating_point:
        acc_type = torch.float64 if dtype == torch.float64 else torch.float32
    else:
        acc_type = torch.int64  # exact: the inputs cannot overflow (int_bounds)
    acc = inputs[0].to(acc_type)
    for x in inputs[1:]:
        acc = _combine(acc, x.to(acc_type), op)
    if op == "avg":
        if dtype.is_floating_point:
            acc = acc / torch.full_like(acc, float(n))  # a tensor divisor: one IEEE division
        else:
            acc = torch.div(acc, n, rounding_mode="trunc")
    return acc.to(dtype)


def exact64(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    """The result in float64 (exact for these inputs up to float64 rounding)."""
    acc = inputs[0].to(torch.float64)
    for x in inputs[1:]:
        acc = _combine(acc, x.to(torch.float64), op)
    if op == "avg":
        acc = acc / len(inputs)
    return acc


def tolerance(inputs: list[torch.Tensor], op: str) -> torch.Tensor:
    """Per element, twice the error bound of a correct reduction with fp32 accumulation."""
    dtype = inputs[0].dtype
    n = len(inputs)
    ref = exact64(inputs, op).abs()
    if op in ("min", "max"):
        return torch.zeros_like(ref)
    u = _UNIT[dtype]
    if op == "prod":
        return 2 * (u + n * _ACC_UNIT) * ref
    total = sum(x.to(torch.float64).abs() for x in inputs)
    if op == "avg":
        total = total / n
    return 2 * (u * ref + n * _ACC_UNIT * total)


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(_BITS[t.element_size()])


def raw_bytes(t: torch.Tensor) -> bytes:
    """The tensor's bytes (copied to the CPU), for fingerprints."""
    c = t.detach().to("cpu").contiguous()
    return ctypes.string_at(c.data_ptr(), c.numel() * c.element_size())


def expect_equal(got: torch.Tensor, want: torch.Tensor, what: str = "") -> None:
    """Bit-identical (same dtype and shape)."""
    got = got.detach().to("cpu")
    prefix = f"{what}: " if what else ""
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        raise CheckFailed(f"{prefix}got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    differ = (bits(got) != bits(want)).reshape(-1)
    if bool(differ.any()):
        flat_g, flat_w = got.reshape(-1), want.reshape(-1)
        i = int(differ.nonzero()[0])
        raise CheckFailed(f"{prefix}{int(differ.sum())} of {differ.numel()} elements differ; first at [{i}]: "
                          f"got {flat_g[i].item()!r}, want {flat_w[i].item()!r}")


def expect_close(got: torch.Tensor, want64: torch.Tensor, tol: torch.Tensor, what: str = "") -> None:
    got64 = got.detach().to("cpu").to(torch.float64).reshape(-1)
    want64, tol = want64.reshape(-1), tol.reshape(-1)
    bad = ~((got64 - want64).abs() <= tol)  # NaN counts as bad
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        prefix = f"{what}: " if what else ""
        raise CheckFailed(f"{prefix}{int(bad.sum())} of {bad.numel()} elements off by more than the tolerance; "
                          f"first at [{i}]: got {got64[i].item()!r}, want {want64[i].item()!r} "
                          f"+- {tol[i].item():.3g}")


def expect_reduced(got: torch.Tensor, inputs: list[torch.Tensor], op: str, exact_fold: bool) -> str:
    """Integers: exact. Floats: within tolerance of the float64 result, and, when `exact_fold`,
    bit-identical to our rank-ordered fold. Returns the PASS detail."""
    if not inputs[0].dtype.is_floating_point:
        expect_equal(got, fold(inputs, op))
        return "exact"
    expect_close(got, exact64(inputs, op), tolerance(inputs, op), "against float64")
    if exact_fold:
        expect_equal(got, fold(inputs, op), "within tolerance, but not bit-exact with the rank-ordered fp32 fold")
        return "within tolerance of float64; bit-exact with the rank-ordered fold"
    return "within tolerance of float64"
