"""Checks of notebook 12 (attention at scale): the online softmax, FlashAttention's forward pass in three graded steps
and one tile of its backward pass, the sliding-window mask, and linear attention's recurrent form.

Each check runs the learner's function on fresh random float64 inputs of small distinct sizes, compares it with
PyTorch (``torch.softmax``, ``torch.logsumexp``, ``F.scaled_dot_product_attention``, autograd) or with the course's
reference (``helpers.scale.flash``, ``helpers.scale.linear_attention``), and names the typical mistakes by rebuilding
each one and comparing: a running sum or accumulator not rescaled, each block measured against its own maximum, a
tile normalised on its own, FlashAttention-1's update without the old sum, a scale of 1/d, the log of the sum
forgotten, tiles that overlap or drop the ragged end, causal tiles skipped from the wrong end or masked with their own
``tril()``, a window that excludes the query, a recurrence run backwards. Shared across the checks:

- one dtype rule (``helpers.checks._core.expect_close``): a float32 result is judged at float32's precision, and a
  float64 result that is only float32-accurate is named as a precision problem;
- an answer right on ``(n, d)`` inputs but not with leading batch and head axes (``k[j0:j1]``, ``k_tile.T``) is told
  so, with the fix;
- partial work (a bare ``raise NotImplementedError`` left in one branch, while other inputs run) is a named failure,
  never "not attempted";
- the learner's code runs with its warnings captured, so a check cell writes nothing to stderr but its verdict; a
  function that creates a tensor on the CPU for inputs on another device is named (checked with ``meta`` tensors).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call,
    dtype_tolerance,
    exercise,
    expect_close,
    expect_finite,
    expect_shape,
    expect_tensor,
    more_than_the_stub,
)
from helpers.scale.flash import (
    attention_with_lse,
    causal_tile_mask,
    flash_backward,
    flash_forward,
    tile_backward,
)
from helpers.scale.linear_attention import elu_feature_map, linear_attention_parallel

__all__ = [
    "check_online_softmax_stats",
    "check_flash_block",
    "check_flash_forward",
    "check_causal_tile_mask",
    "check_tile_backward",
    "check_sliding_window_mask",
    "check_linear_attention_recurrent",
]

_SKIP = object()  # a call that raised the stub: skip that case, decide at the end (``_Runner.finish``)
_BATCH_AXES = (
    "index the sequence axis from the end, k[..., j0:j1, :] (k[j0:j1] slices the first axis, the batch), and swap the "
    "last two axes with .transpose(-2, -1) (on a tensor of 3 or 4 axes, .T reverses every axis)"
)


def _dtype(t: Tensor) -> str:
    return str(t.dtype).replace("torch.", "")


class _Runner:
    """Calls the learner's function through ``call``: its warnings captured (no stderr in the check cell), a stub
    raised on some inputs while others ran named as partial work, ``.T`` on a batched tensor named."""

    def __init__(self, fn: Callable[..., Any], name: str) -> None:
        self.fn, self.name = fn, name
        self.done = 0
        self.stub_at: str | None = None

    def _partial(self, what: str) -> str:
        return (
            f"your `{self.name}` runs for some inputs but raises NotImplementedError for {what}: that is partial work, "
            "not the untouched exercise. A branch is still unfinished (a bare `raise NotImplementedError`, in an "
            "`if` perhaps): write it"
        )

    def __call__(self, *args: Any, what: str) -> Any:
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = call(self.fn, *args, what=what)
        except NotAttempted:
            if self.done:
                raise ExerciseFailed(self._partial(what)) from None
            self.stub_at = self.stub_at or what
            return _SKIP
        except ExerciseFailed as err:
            if any("x.T" in str(w.message) for w in caught):
                raise ExerciseFailed(
                    f"{err}. Your code used `.T` on a tensor with more than two axes, which reverses every axis: swap "
                    "the last two with .transpose(-2, -1)"
                ) from None
            raise
        self.done += 1
        if self.stub_at is not None:
            raise ExerciseFailed(self._partial(self.stub_at))
        return result

    def finish(self) -> None:
        """After every case: a function that raised the stub on every input was not attempted, unless its body holds
        more than the stub (then one unfinished branch caught every input: partial work all the same)."""
        if self.stub_at is not None and not self.done:
            if more_than_the_stub(self.fn):
                raise ExerciseFailed(self._partial(self.stub_at))
            raise NotAttempted(f"`{self.name}` still raises NotImplementedError: fill in its body")


def _pair(result: object, names: tuple[str, str], what: str) -> tuple[Tensor, Tensor]:
    """The learner's result must be a pair of tensors (a tuple or a list of two)."""
    if type(result).__module__ == "torch.return_types":  # x.max(dim): (values, indices)
        raise ExerciseFailed(
            f"{what} returned the {type(result).__name__} of x.max(dim) (values and indices), not the pair "
            f"({names[0]}, {names[1]}): take `.values`, or use x.amax(dim, keepdim=True)"
        )
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        kind = type(result).__name__ + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
        raise ExerciseFailed(f"{what} returned a {kind}; return the pair ({names[0]}, {names[1]})")
    return expect_tensor(result[0], names[0]), expect_tensor(result[1], names[1])


def _tolerance(*tensors: Tensor) -> tuple[float, float]:
    """The comparison's (atol, rtol): tight for float64, float32's precision when any result is float32."""
    atol, rtol = 1e-10, 1e-9
    for t in tensors:
        floor = dtype_tolerance(t.dtype)
        atol, rtol = max(atol, floor[0]), max(rtol, floor[1])
    return atol, rtol


def _same(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=True))


def _slices(*tensors: Tensor) -> list[tuple[Tensor, ...]]:
    """The ``(n, d)`` slices of batched tensors, one tuple per index of the leading axes."""
    lead = tensors[0].shape[:-2]
    indices = torch.cartesian_prod(*(torch.arange(size) for size in lead)).reshape(-1, len(lead)).tolist()
    return [tuple(t[tuple(index)] for t in tensors) for index in indices]


def _right_per_slice(fn: Callable[..., Any], tensors: tuple[Tensor, ...], extra: tuple, reference: Callable[..., Any]) -> bool:
    """Whether ``fn`` gives the reference's result on every 2-D slice of batched inputs (so only batching fails)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for parts in _slices(*tensors):
                got, want = fn(*parts, *extra), reference(*parts, *extra)
                got = got if isinstance(got, (tuple, list)) else (got,)
                want = want if isinstance(want, (tuple, list)) else (want,)
                if len(got) != len(want) or not all(
                    isinstance(g, Tensor) and _same(g, w, *_tolerance(g)) for g, w in zip(got, want, strict=True)
                ):
                    return False
    except Exception:  # noqa: BLE001 (any failure on a 2-D slice: the cause is not the batch axes)
        return False
    return True


def _batched(
    check_case: Callable[[], None], fn: Callable[..., Any], tensors: tuple[Tensor, ...], extra: tuple, reference, what: str
) -> None:
    """Run one batched case; if it fails although every 2-D slice is right, say that the batch axes are the cause."""
    try:
        check_case()
    except ExerciseFailed as err:
        if "partial work" not in str(err) and _right_per_slice(fn, tensors, extra, reference):
            raise ExerciseFailed(
                f"your function is right on inputs of shape (n, d) but not with leading batch and head axes ({what}): "
                f"{_BATCH_AXES}"
            ) from None
        raise


def _quietly(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with its warnings kept out of the cell (for a measurement: no copies of the inputs, unlike ``call``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


_FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.full,
    torch.empty,
    torch.tensor,
    torch.arange,
    torch.eye,
    torch.linspace,
    torch.randn,
    torch.rand,
}


class _FactoriesWithoutDevice(torch.overrides.TorchFunctionMode):
    """Records the tensors (not scalars) a function creates with a factory and no ``device=``: they land on the CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        result = func(*args, **(kwargs or {}))
        if func in _FACTORIES and "device" not in (kwargs or {}) and isinstance(result, Tensor) and result.dim() > 0:
            self.found.append(f"torch.{func.__name__}")
        return result


def _expect_device_follows(fn: Callable[..., Any], args: tuple, name: str) -> None:
    """A tensor the learner's function creates must follow the inputs' device: a factory without ``device=`` is named.

    On the CPU such code runs; on a GPU it mixes devices ("expected all tensors to be on the same device"). A 0-dim
    tensor (a scalar) mixes with any device, so it is allowed.
    """
    try:
        with _FactoriesWithoutDevice() as mode:
            _quietly(fn, *args)
    except Exception:  # noqa: BLE001 (the earlier cases ran it: a failure here gives no verdict)
        return
    if mode.found:
        raise ExerciseFailed(
            f"your `{name}` is right, but it creates a tensor with {', '.join(sorted(set(mode.found)))}(...) and no "
            "device=, so the tensor is on the CPU whatever the inputs' device: on a GPU it mixes devices and fails. "
            "Create new tensors on the inputs' device and in their dtype: torch.zeros(..., dtype=x.dtype, "
            "device=x.device), or x.new_zeros(...), x.new_full(...)"
        )


def _named(
    actual: tuple[Tensor, ...], right: tuple[Tensor, ...], variants: Mapping[str, Callable[[], tuple]], where: str
) -> None:
    """Raise the message of the first typical mistake whose outputs the learner's match (and the right answer's don't).

    A variant gives one output per result, or None for an output the mistake leaves open (it is not compared).
    """
    atol, rtol = _tolerance(*actual)
    for message, make in variants.items():
        try:
            wrong = make()
        except Exception:  # noqa: BLE001 (a mistake that cannot even run on these shapes is not this answer)
            continue
        pairs = [(a, w, r) for a, w, r in zip(actual, wrong, right, strict=True) if w is not None]
        if all(_same(a, w, atol, rtol) for a, w, _ in pairs) and not all(_same(w, r, atol, rtol) for _, w, r in pairs):
            raise ExerciseFailed(f"{where}: {message}")


# ---------------------------------------------------------------- 12.1 the online softmax


def _stats(x: Tensor, block: int, mistake: str = "") -> tuple[Tensor, Tensor]:
    """Online softmax statistics ``(m, s)`` ``(..., 1)``, right or with one typical mistake."""
    init = 0.0 if mistake == "zero_init" else -math.inf
    m = torch.full((*x.shape[:-1], 1), init, dtype=x.dtype)
    s = torch.zeros((*x.shape[:-1], 1), dtype=x.dtype)
    n = x.shape[-1]
    stop = n - block + 1 if mistake == "dropped_ragged" else n
    width = block + 1 if mistake == "overlapping" else block - 1 if mistake == "short" else block
    for start in range(0, max(stop, 0), block):
        xb = x[..., start : start + width]
        block_max = xb.amax() if mistake == "max_no_dim" else xb.amax(-1, keepdim=True)
        m_new = block_max if mistake == "block_max" else torch.maximum(m, block_max)
        if mistake == "no_rescale":
            s = s + torch.exp(xb - m_new).sum(-1, keepdim=True)
        elif mistake == "own_max":
            s = s + torch.exp(xb - xb.amax(-1, keepdim=True)).sum(-1, keepdim=True)
        elif mistake == "flipped":
            s = s * torch.exp(m_new - m) + torch.exp(xb - m_new).sum(-1, keepdim=True)
        elif mistake == "raw_exp":
            s = s + torch.exp(xb).sum(-1, keepdim=True)
        elif mistake == "sum_no_dim":
            s = s * torch.exp(m - m_new) + torch.exp(xb - m_new).sum()
        else:
            s = s * torch.exp(m - m_new) + torch.exp(xb - m_new).sum(-1, keepdim=True)
        m = m_new
    if mistake == "log_sum":
        s = torch.log(s)
    if mistake == "lse":
        s = m + torch.log(s)
    return m.expand(*x.shape[:-1], 1), s.expand(*x.shape[:-1], 1)


_STATS_MISTAKES = {
    "no_rescale": "the running sum is not rescaled when the maximum grows: before adding a block, multiply the sum so "
    "far by exp(m_old - m_new), since its terms were exp(x - m_old)",
    "own_max": "each block's terms are measured against that block's own maximum, exp(x - max(block)), and simply "
    "added: the sum must hold every term against one maximum, the running one. Subtract m_new (the running maximum "
    "after this block) and rescale the sum so far by exp(m_old - m_new)",
    "flipped": "the running sum is rescaled by exp(m_new - m_old), upside down: the old terms exp(x - m_old) become "
    "exp(x - m_new) when multiplied by exp(m_old - m_new), a number at most 1",
    "zero_init": "the running maximum starts at 0 instead of -inf: for a row of scores all far below 0 (here near -1000) "
    "the maximum stays 0 and every exp(x - 0) underflows to 0, so s = 0 and the softmax is 0/0; start with "
    "m = torch.full(..., -inf)",
    "block_max": "m is the maximum of the last block only, not the running maximum of every block so far: "
    "m_new = torch.maximum(m, block.amax(-1, keepdim=True))",
    "dropped_ragged": "the last, shorter block is dropped: when n is not a multiple of the block, the last block holds "
    "n % block entries; loop with range(0, n, block) and slice x[..., start:start + block]",
    "overlapping": "the blocks overlap by one entry (x[..., start:start + block + 1]), so entries on the seams are "
    "counted twice: a block is x[..., start:start + block], and the next starts at start + block",
    "short": "each block is one entry short (x[..., start:start + block - 1]), so an entry between blocks is never "
    "counted: a block is x[..., start:start + block]",
    "max_no_dim": "the block's maximum is taken without dim, over every row at once, so each row is measured against "
    "the largest score of the whole batch: take it along the last axis, xb.amax(dim=-1, keepdim=True)",
    "sum_no_dim": "the block's sum is taken without dim, over every row at once, so the rows' sums are mixed: sum along "
    "the last axis, .sum(dim=-1, keepdim=True)",
    "raw_exp": "the sum adds exp(x) without subtracting the running maximum: s is the sum of exp(x - m)",
    "log_sum": "s is the log of the sum; return the sum itself, s = sum(exp(x - m))",
    "lse": "s is the log-sum-exp m + log(sum); return the sum itself, s = sum(exp(x - m)) (the notebook adds the log later)",
}

#: Reductions that would read a whole row at once.
_REDUCTIONS = {
    torch.amax,
    torch.Tensor.amax,
    torch.max,
    torch.Tensor.max,
    torch.sum,
    torch.Tensor.sum,
    torch.logsumexp,
    torch.Tensor.logsumexp,
    torch.softmax,
    torch.Tensor.softmax,
    F.softmax,
    torch.log_softmax,
    F.log_softmax,
    torch.Tensor.log_softmax,
}


class _WholeRowReductions(torch.overrides.TorchFunctionMode):
    """Records reductions along the last axis of a tensor as long as the whole row (``n`` entries, ``n > block``)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n
        self.found: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _REDUCTIONS and args and isinstance(args[0], Tensor) and args[0].dim() >= 1:
            x = args[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], (int, tuple, list)) else None)
            dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
            along_last = not dims or any(d % x.dim() == x.dim() - 1 for d in dims)
            if x.shape[-1] == self.n and along_last:
                self.found.append(getattr(func, "__name__", str(func)))
        return func(*args, **kwargs)


@exercise("online softmax")
def check_online_softmax_stats(online_softmax_stats) -> None:
    """Check ``online_softmax_stats(x, block) -> (m, s)`` against ``x.amax`` and ``torch.logsumexp``."""
    run = _Runner(online_softmax_stats, "online_softmax_stats")
    x = torch.randn(4, 10, dtype=torch.float64) * 3.0  # (4, 10): blocks of 4, 4 and 2
    x[0] = torch.linspace(-2.0, 6.0, 10, dtype=torch.float64)  # the maximum grows with every block
    x[1] = torch.linspace(6.0, -2.0, 10, dtype=torch.float64)  # the maximum sits in the first block
    x[2] = -1000.0 + torch.randn(10, dtype=torch.float64)  # every exp(x - 0) underflows to 0
    x[3, -1] = 9.0  # the maximum in the short last block
    cases = [
        (x, 4),
        (torch.randn(2, 3, 7, dtype=torch.float64) * 2.0, 3),
        (torch.randn(2, 8, dtype=torch.float64) * 2.0, 4),  # blocks that divide the row
        (torch.randn(5, dtype=torch.float64), 8),
        (torch.randn(3, 9, dtype=torch.float32) * 4.0, 4),  # float32 inputs, judged at float32's precision
    ]
    for xs, block in cases:
        shape = tuple(xs.shape)
        what = f"{_dtype(xs)} x of shape {shape} and block={block}"
        result = run(xs.clone(), block, what=what)
        if result is _SKIP:
            continue
        m, s = _pair(result, ("m", "s"), "online_softmax_stats")
        lead = shape[:-1]
        for name, t in (("m", m), ("s", s)):
            if tuple(t.shape) not in (lead + (1,), lead):
                raise ExerciseFailed(
                    f"{name} has shape {tuple(t.shape)} for x of shape {shape}; it holds one number per row: "
                    f"{lead + (1,)} (keepdim=True) or {lead}"
                    + (" (a max or sum without dim= reduces over every row at once)" if t.dim() == 0 else "")
                )
        m, s = m.reshape(*lead, 1), s.reshape(*lead, 1)
        right = (xs.amax(-1, keepdim=True), torch.exp(xs - xs.amax(-1, keepdim=True)).sum(-1, keepdim=True))
        atol, rtol = _tolerance(m, s)
        if not (_same(m, right[0], atol, rtol) and _same(s, right[1], atol, rtol)):
            variants = {
                message: (lambda kind=kind, xs=xs, block=block: _stats(xs, block, kind))
                for kind, message in _STATS_MISTAKES.items()
            }
            _named((m, s), right, variants, f"with x of shape {shape} and block={block}")
            # s first: its values tell a float32 computation apart (a row's maximum is often a float32 number)
            expect_close(s, right[1], f"s (the sum of exp(x - m)) for {what}", atol=1e-10, rtol=1e-9)
            expect_close(m, right[0], f"m (the maximum of each row) for {what}", atol=1e-10, rtol=1e-9)
    run.finish()
    # one pass: the row is read block by block, never reduced whole (a two-pass answer gives the same numbers)
    row = torch.randn(3, 12, dtype=torch.float64)
    with _WholeRowReductions(12) as mode:
        run(row, 5, what="x of shape (3, 12) and block=5")
    if mode.found:
        raise ExerciseFailed(
            f"the numbers are right, but your function reduces whole rows of 12 entries at once ({', '.join(sorted(set(mode.found)))} "
            "over the last axis, with block=5): that is the two-pass softmax of notebook 02. The exercise is the one pass: "
            "walk along the row in blocks, x[..., start:start + block], keeping the running maximum and sum"
        )
    _expect_device_follows(online_softmax_stats, (row, 5), "online_softmax_stats")


# ---------------------------------------------------------------- 12.2 one block of queries, tile by tile


def _block(qi: Tensor, k: Tensor, v: Tensor, bk: int, mistake: str = "") -> tuple[Tensor, Tensor]:
    """One query block against every key in key blocks, ``(out, lse)``, right or with one typical mistake."""
    d, m = qi.shape[-1], k.shape[-2]
    scale = 1.0 / d if mistake == "d_scale" else 1.0 if mistake == "no_scale" else 1.0 / math.sqrt(d)
    lead = qi.shape[:-1]
    m_i = torch.full((*lead, 1), 0.0 if mistake == "zero_init" else -math.inf, dtype=qi.dtype)
    l_i = torch.zeros((*lead, 1), dtype=qi.dtype)
    acc = torch.zeros((*lead, v.shape[-1]), dtype=qi.dtype)
    stop = m - bk + 1 if mistake == "dropped_ragged_k" else m
    extra = 1 if mistake == "overlapping_k" else 0
    for j0 in range(0, max(stop, 0), bk):
        j1 = min(j0 + bk, m)
        kj, vj = k[..., j0 : j1 + extra, :], v[..., j0 : j1 + extra, :]
        s = qi @ kj.transpose(-2, -1) * scale
        tile_max = (
            (qi @ kj.transpose(-2, -1)).amax(-1, keepdim=True) if mistake == "max_before_scale" else s.amax(-1, keepdim=True)
        )
        if mistake == "tile_softmax_added":
            acc = acc + torch.softmax(s, -1) @ vj
            continue
        m_new = tile_max if mistake == "block_max" else torch.maximum(m_i, tile_max)
        p = torch.exp(s - m_new)
        alpha = torch.exp(m_new - m_i) if mistake == "flipped_alpha" else torch.exp(m_i - m_new)
        if mistake in ("fa1", "fa1_no_old_sum"):  # FlashAttention-1: the output kept normalised after every tile
            l_new = alpha * l_i + p.sum(-1, keepdim=True)
            old = alpha * acc if mistake == "fa1_no_old_sum" else l_i * alpha * acc
            acc, l_i, m_i = (old + p @ vj) / l_new, l_new, m_new
            continue
        pv = p @ vj
        if mistake == "per_block":
            pv = pv / p.sum(-1, keepdim=True)
        l_i = (l_i if mistake in ("no_rescale_l", "no_rescale_both") else l_i * alpha) + p.sum(-1, keepdim=True)
        acc = (acc if mistake in ("no_rescale_acc", "no_rescale_both") else acc * alpha) + pv
        m_i = m_new
    out = acc if mistake in ("tile_softmax_added", "fa1", "fa1_no_old_sum") else acc / l_i
    if mistake == "tile_softmax_added":
        return out, torch.logsumexp(qi @ k.transpose(-2, -1) * scale, -1)
    lse = m_i + l_i if mistake == "lse_plus_l" else torch.log(l_i) if mistake == "lse_no_max" else m_i + torch.log(l_i)
    return out, lse.squeeze(-1)


_BLOCK_MISTAKES = {
    "no_rescale_both": "neither the running sum nor the accumulator is rescaled when the running maximum grows: both "
    "hold terms weighted by exp(s - m_old), so multiply both by alpha = exp(m_old - m_new) before adding the new "
    "tile's p.sum(-1) and p @ v",
    "no_rescale_acc": "the accumulator is not rescaled when the running maximum grows: its terms were weighted by "
    "exp(s - m_old), so multiply it by exp(m_old - m_new) before adding p @ v (as you do for the running sum)",
    "no_rescale_l": "the running sum is not rescaled when the running maximum grows: multiply it by exp(m_old - m_new) "
    "before adding p.sum(-1), as you do for the accumulator",
    "zero_init": "the running maximum starts at 0 instead of -inf: when every score of a query is far below 0 (here "
    "near -2000) the maximum stays 0, every exp(s - 0) underflows to 0 and the output is 0/0; start with "
    "m = torch.full(..., -inf) (or qi.new_full(..., -math.inf))",
    "flipped_alpha": "the rescaling factor is upside down (on the first key block exp(m_new - m_old) = exp(+inf) = inf, "
    "and 0 * inf = NaN): the old terms exp(s - m_old) become exp(s - m_new) when multiplied by exp(m_old - m_new), a "
    "number at most 1",
    "per_block": "each key block's probabilities are divided by that block's own sum: the sum over all keys is known "
    "only after the last key block, so accumulate the unnormalised p @ v and divide by the running sum once, at the end",
    "tile_softmax_added": "each tile's softmax is normalised on its own and the tiles' outputs are added: the weights of "
    "a query must sum to 1 over all keys, not over each tile. Keep the unnormalised exp(s - m) @ v with a running "
    "maximum and sum, and divide by the sum once, after the last tile",
    "fa1_no_old_sum": "the output is kept normalised after each tile (FlashAttention-1's update), but the old output is "
    "not weighted by the old sum: o_new = (l_old * alpha * o_old + p @ v) / l_new. Simpler (FlashAttention-2): keep "
    "the unnormalised accumulator and divide once at the end",
    "dropped_ragged_k": "the last, shorter key block is dropped: when m is not a multiple of block_k, the last key "
    "block holds m % block_k keys; loop with range(0, m, block_k) and slice k[..., j0:j0 + block_k, :]",
    "overlapping_k": "the key tiles overlap by one key (k[..., j0:j0 + block_k + 1, :]), so the keys on the seams count "
    "twice: a tile is k[..., j0:j0 + block_k, :] (and the same rows of v)",
    "no_scale": "the scores are not scaled: multiply q (or each tile's scores) by 1/sqrt(d)",
    "d_scale": "the scores are divided by d instead of sqrt(d): the scale is 1/sqrt(d), math.sqrt(qi.shape[-1])",
    "max_before_scale": "the running maximum is taken of the unscaled scores q·k while the exponentials use the scaled "
    "ones: with scores far below 0, exp(s - m) overflows to inf. Scale first, then take the maximum of the very "
    "scores you exponentiate",
    "lse_plus_l": "the log-sum-exp is m + l, the log forgotten: the running sum holds exp(s - m), so lse = m + log(l)",
    "lse_no_max": "the log-sum-exp is log(l) without the running maximum: the running sum holds exp(s - m), so lse = m + log(l)",
}


def _block_ref(qi: Tensor, k: Tensor, v: Tensor, bk: int) -> tuple[Tensor, Tensor]:
    return attention_with_lse(qi, k, v)


def _expect_block_result(result: object, qi: Tensor, k: Tensor, v: Tensor, what: str, name: str, variants) -> None:
    """Compare an ``(out, lse)`` result with attention over every key; name the typical mistakes."""
    if (
        isinstance(result, (tuple, list))
        and len(result) == 2
        and all(isinstance(t, Tensor) for t in result)
        and result[0].shape == qi.shape[:-1]
        and result[1].shape[:-1] == qi.shape[:-1]
        and result[0].shape != result[1].shape
    ):
        raise ExerciseFailed(f"{name} returned (lse, out), in the wrong order: return out first, then lse, `return out, lse`")
    out, lse = _pair(result, ("out", "lse"), name)
    right_out, right_lse = attention_with_lse(qi, k, v)
    if out.dtype not in (qi.dtype, torch.float32):
        raise ExerciseFailed(f"out is {_dtype(out)} for {_dtype(qi)} inputs: keep the inputs' dtype (qi.new_zeros(...))")
    n = qi.shape[-2]
    if tuple(lse.shape) == tuple(qi.shape[:-2]) + (n, 1):
        lse = lse.squeeze(-1)  # (..., n, 1) is the same answer with keepdim
    expect_shape(out, right_out.shape, f"out ({what})")
    expect_shape(lse, right_lse.shape, f"lse ({what}): one number per query")
    atol, rtol = _tolerance(out, lse)
    if _same(out, right_out, atol, rtol) and _same(lse, right_lse, atol, rtol):
        return
    _named((out, lse), (right_out, right_lse), variants, f"with {what}")
    if not torch.isfinite(out).all():
        expect_finite(out, f"out ({what})", "a 0/0 or an overflow: exp of a large positive number is inf")
    expect_close(out, right_out, f"out ({what})", atol=1e-10, rtol=1e-9)
    if _same(lse, right_lse * math.sqrt(qi.shape[-1]), atol, rtol):
        raise ExerciseFailed(f"with {what}: the log-sum-exp is of the unscaled scores; use the scores times 1/sqrt(d)")
    expect_close(lse, right_lse, f"lse ({what}): logsumexp of each query's scaled scores", atol=1e-10, rtol=1e-9)


#: Mistakes that leave the log-sum-exp open: only the output is compared.
_OUT_ONLY = ("tile_softmax_added",)


def _block_variants(qi: Tensor, k: Tensor, v: Tensor, bk: int) -> dict[str, Callable[[], tuple]]:
    def make(kind: str) -> Callable[[], tuple]:
        if kind in _OUT_ONLY:
            return lambda: (_block(qi, k, v, bk, kind)[0], None)
        return lambda: _block(qi, k, v, bk, kind)

    return {message: make(kind) for kind, message in _BLOCK_MISTAKES.items()}


def _expect_tiles_not_strip(run: _Runner, name: str) -> None:
    """One query block against 1,024 keys in tiles of 16 never holds the block's whole row of scores."""
    from helpers.scale.measure import peak_extra_bytes

    qi, k, v = (
        torch.randn(8, 4, dtype=torch.float64),
        torch.randn(1024, 4, dtype=torch.float64),
        torch.randn(1024, 3, dtype=torch.float64),
    )
    try:
        peak = peak_extra_bytes(_quietly, run.fn, qi, k, v, 16).peak
    except Exception:  # noqa: BLE001 (a profiler that reports no memory, or an answer that fails here: no verdict)
        return
    strip = 8 * 1024 * 8
    if peak >= strip:
        raise ExerciseFailed(
            f"the output is right, but with 8 queries against 1,024 keys and block_k = 16 your `{name}` held {peak:,} "
            f"bytes at its peak, at least the block's whole (8, 1024) row of scores ({strip:,} bytes): compute the "
            "scores one (block, block_k) tile at a time, inside the loop over key blocks"
        )


@exercise("FlashAttention step 1: one query block, tile by tile")
def check_flash_block(flash_block) -> None:
    """Check ``flash_block(qi, k, v, block_k) -> (out, lse)`` against attention over every key."""
    run = _Runner(flash_block, "flash_block")
    cases = [
        ((6, 5), (13, 5), (13, 6), 4),  # 13 keys: blocks of 4, 4, 4 and 1
        ((4, 4), (7, 4), (7, 3), 3),  # every score near -2000 (see below)
        ((5, 3), (9, 3), (9, 2), 16),  # one key block longer than the keys
        ((3, 4), (8, 4), (8, 5), 4),  # key blocks that divide the keys
        ((2, 3, 5, 4), (2, 3, 11, 4), (2, 3, 11, 3), 3),  # batch and heads
    ]
    for q_shape, k_shape, v_shape, bk in cases:
        qi = torch.randn(*q_shape, dtype=torch.float64) * 1.5
        k = torch.randn(*k_shape, dtype=torch.float64) * 1.5
        v = torch.randn(*v_shape, dtype=torch.float64)
        k[..., -1, :] = qi.sum(-2) * 2.0  # a late key that raises every query's maximum
        if q_shape == (4, 4):  # scores all far below 0: a maximum that starts at 0, or an unscaled one, breaks
            qi, k = 10.0 + qi.abs(), -100.0 + k
        what = f"qi {q_shape}, k {k_shape}, v {v_shape}, block_k={bk}"

        def case(qi=qi, k=k, v=v, bk=bk, what=what) -> None:
            result = run(qi.clone(), k.clone(), v.clone(), bk, what=what)
            if result is not _SKIP:
                _expect_block_result(result, qi, k, v, what, "flash_block", _block_variants(qi, k, v, bk))

        if len(q_shape) > 2:
            _batched(case, flash_block, (qi, k, v), (bk,), _block_ref, what)
        else:
            case()
    q32, k32, v32 = torch.randn(5, 8), torch.randn(11, 8), torch.randn(11, 4)
    result = run(q32.clone(), k32.clone(), v32.clone(), 4, what="float32 qi (5, 8), k (11, 8), v (11, 4), block_k=4")
    if result is not _SKIP:
        _expect_block_result(result, q32, k32, v32, "float32 inputs", "flash_block", _block_variants(q32, k32, v32, 4))
    run.finish()
    _expect_tiles_not_strip(run, "flash_block")
    _expect_device_follows(flash_block, (q32, k32, v32, 4), "flash_block")


# ---------------------------------------------------------------- 12.3 every query block, ragged ends


def _forward(
    q: Tensor, k: Tensor, v: Tensor, bq: int, bk: int, mistake: str = "", block_mistake: str = ""
) -> tuple[Tensor, Tensor]:
    """Every query block through ``_block``: right, with a mistake of the outer loop, or one of ``_block``'s."""
    n = q.shape[-2]
    stop = n - bq + 1 if mistake == "dropped_ragged_q" else n
    outs, lses = [], []
    for i0 in range(0, max(stop, 0), bq):
        out, lse = _block(q[..., i0 : i0 + bq, :], k, v, bk, block_mistake)
        outs.append(out)
        lses.append(lse)
    out, lse = torch.cat(outs, -2), torch.cat(lses, -1)
    if mistake == "dropped_ragged_q":  # the rows of the short last block left as they were allocated: zeros
        out = torch.cat([out, out.new_zeros(*out.shape[:-2], n - out.shape[-2], out.shape[-1])], -2)
        lse = torch.cat([lse, lse.new_zeros(*lse.shape[:-1], n - lse.shape[-1])], -1)
    return out, lse


def _forward_ref(q: Tensor, k: Tensor, v: Tensor, bq: int, bk: int) -> tuple[Tensor, Tensor]:
    return attention_with_lse(q, k, v)


def _forward_variants(q: Tensor, k: Tensor, v: Tensor, bq: int, bk: int) -> dict[str, Callable[[], tuple[Tensor, Tensor]]]:
    variants = {
        "the rows of the last, shorter query block are wrong or missing: when n is not a multiple of block_q, the last "
        "query block holds n % block_q queries; loop with range(0, n, block_q) and slice q[..., i0:i0 + block_q, :]": (
            lambda: _forward(q, k, v, bq, bk, "dropped_ragged_q")
        )
    }
    for kind, message in _BLOCK_MISTAKES.items():  # the same mistakes, made inside the loop over key blocks
        if kind in _OUT_ONLY:
            variants[message] = lambda kind=kind: (_forward(q, k, v, bq, bk, block_mistake=kind)[0], None)
        else:
            variants[message] = lambda kind=kind: _forward(q, k, v, bq, bk, block_mistake=kind)
    return variants


def _expect_no_whole_matrix(run: _Runner, name: str) -> None:
    """A tiled forward never holds an (n, m) matrix: measure the learner's peak memory (helpers.scale.measure)."""
    from helpers.scale.measure import peak_extra_bytes

    n, d = 256, 8
    q, k, v = (torch.randn(n, d, dtype=torch.float64) for _ in range(3))
    try:
        peak = peak_extra_bytes(_quietly, run.fn, q, k, v, 32, 32).peak
    except Exception:  # noqa: BLE001 (a profiler that reports no memory, or an answer that fails here: no verdict)
        return
    full = n * n * q.element_size()
    if peak >= full:
        raise ExerciseFailed(
            f"the output is right, but with n = m = {n} and blocks of 32 your `{name}` held {peak:,} bytes at its peak, "
            f"at least one whole ({n}, {n}) score matrix ({full:,} bytes): compute the scores one (block_q, block_k) "
            "tile at a time (flash_block for each query block), and keep only the running statistics and the "
            "accumulator between tiles"
        )


@exercise("FlashAttention step 2: every query block")
def check_flash_forward(flash_forward) -> None:
    """Check ``flash_forward(q, k, v, block_q, block_k) -> (out, lse)`` against F.scaled_dot_product_attention."""
    run = _Runner(flash_forward, "flash_forward")
    cases = [
        ((11, 5), (13, 5), (13, 6), 4, 5),  # both sides ragged
        ((6, 4), (7, 4), (7, 3), 4, 3),  # every score near -2000 (see below)
        ((9, 5), (9, 5), (9, 6), 16, 16),  # one block longer than the sequence
        ((2, 3, 10, 4), (2, 3, 12, 4), (2, 3, 12, 3), 4, 5),  # batch and heads, ragged
    ]
    for q_shape, k_shape, v_shape, bq, bk in cases:
        q = torch.randn(*q_shape, dtype=torch.float64) * 1.5
        k = torch.randn(*k_shape, dtype=torch.float64) * 1.5
        v = torch.randn(*v_shape, dtype=torch.float64)
        k[..., -1, :] = q[..., :1, :].sum(-2) * 2.0  # a late key that raises the first queries' maximum
        if q_shape == (6, 4):
            q, k = 10.0 + q.abs(), -100.0 + k
        what = f"q {q_shape}, k {k_shape}, v {v_shape}, block_q={bq}, block_k={bk}"

        def case(q=q, k=k, v=v, bq=bq, bk=bk, what=what) -> None:
            result = run(q.clone(), k.clone(), v.clone(), bq, bk, what=what)
            if result is _SKIP:
                return
            if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], Tensor):
                rows = result[0].shape[-2] if result[0].dim() >= 2 else -1
                if rows > q.shape[-2] and rows - q.shape[-2] == math.ceil(q.shape[-2] / bq) - 1:
                    raise ExerciseFailed(
                        f"with {what}: out has {rows} rows for {q.shape[-2]} queries: the query blocks overlap by one "
                        "(q[..., i0:i0 + block_q + 1, :]); a block is q[..., i0:i0 + block_q, :]"
                    )
            _expect_block_result(result, q, k, v, what, "flash_forward", _forward_variants(q, k, v, bq, bk))

        if len(q_shape) > 2:
            _batched(case, flash_forward, (q, k, v), (bq, bk), _forward_ref, what)
        else:
            case()
    q32, k32, v32 = (torch.randn(2, 12, 8, dtype=torch.float32) for _ in range(3))
    result = run(q32.clone(), k32.clone(), v32.clone(), 5, 4, what="float32 q, k, v (2, 12, 8), block_q=5, block_k=4")
    if result is not _SKIP:
        _expect_block_result(result, q32, k32, v32, "float32 inputs", "flash_forward", _forward_variants(q32, k32, v32, 5, 4))
    run.finish()
    _expect_no_whole_matrix(run, "flash_forward")
    _expect_device_follows(flash_forward, (q32, k32, v32, 5, 4), "flash_forward")


# ---------------------------------------------------------------- 12.4 the causal mask, tile by tile


def _tile(i0: int, i1: int, j0: int, j1: int, mistake: str = "") -> Tensor | None:
    """``causal_tile_mask``, right or with one typical mistake."""
    if mistake == "skip_from_block_start" and j0 > i0:
        return None
    if mistake == "skip_by_end" and j1 > i1:
        return None
    if mistake not in ("no_skip", "all_true") and j0 >= i1:
        return None
    if mistake == "none_below" and j1 - 1 <= i0:
        return None
    if mistake == "all_true":
        return torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)
    rows, cols = torch.arange(i0, i1)[:, None], torch.arange(j0, j1)[None, :]
    if mistake == "own_tril" or (mistake == "own_tril_crossing" and j1 - 1 > i0):
        rows, cols = torch.arange(i1 - i0)[:, None], torch.arange(j1 - j0)[None, :]
    if mistake == "diagonal_tiles_only" and i0 != j0:
        return torch.ones(i1 - i0, j1 - j0, dtype=torch.bool)
    return {
        "hides_diagonal": rows > cols,
        "wrong_way": rows <= cols,
        "inverted": rows < cols,
    }.get(mistake, rows >= cols)


_TILE_MISTAKES = {
    "skip_from_block_start": "the skip drops tiles that are needed: a key block must be skipped only when it starts "
    "at or after the query block's END (j0 >= i1), since its first key may still come before the block's last query; "
    "comparing with the block's first query (j0 > i0) skips keys that later queries see",
    "skip_by_end": "the skip drops tiles that end after the query block but start inside it: such a tile holds keys "
    "that some of its queries may see; compute it, with the mask, and skip only key blocks with j0 >= i1",
    "no_skip": "a tile wholly above the diagonal (every key after every query, j0 >= i1) gets a mask instead of None: "
    "it is then computed and thrown away. Return None for it, so the loop skips it and every key block after it",
    "none_below": "a tile wholly below the diagonal gets None, but None tells the loop to skip the tile (and every key "
    "block after it): a tile every query sees whole needs its mask, all True (the same comparison gives it)",
    "all_true": "every tile is all True: nothing is skipped and nothing is masked, which is attention without the "
    "causal mask. Return None for a tile wholly above the diagonal (j0 >= i1) and mask the ones that cross it",
    "own_tril": "the mask compares positions inside the tile (0, 1, 2...), like torch.ones(...).tril(), ignoring where "
    "the tile sits: query i0 + r may see key j0 + c when i0 + r >= j0 + c; build the mask from the absolute positions, "
    "torch.arange(i0, i1)[:, None] >= torch.arange(j0, j1)[None, :]",
    "own_tril_crossing": "the tiles that cross the diagonal are masked with their own tril(), comparing positions "
    "inside the tile (0, 1, 2...) and ignoring where the tile sits: query i0 + r may see key j0 + c when "
    "i0 + r >= j0 + c; build the mask from the absolute positions, "
    "torch.arange(i0, i1)[:, None] >= torch.arange(j0, j1)[None, :]",
    "diagonal_tiles_only": "only the tiles that start on the diagonal (i0 == j0) are masked: when block_q and block_k "
    "differ, other tiles cross the diagonal too. Build every tile's mask from the absolute positions",
    "hides_diagonal": "the mask also hides the diagonal: a query sees itself (key j = i), so the condition is i >= j, "
    "not i > j (with i > j, the first query sees no key at all and its softmax is 0/0 = NaN)",
    "wrong_way": "the mask runs the wrong way: query i may see the keys j <= i (the past), not j >= i; rows are "
    "queries, columns keys",
    "inverted": "the mask is inverted: True must mean 'may attend' (the convention of F.scaled_dot_product_attention), "
    "for keys at or before the query",
}

#: Tilings the check walks: (n, block_q, block_k), the last block of either side ragged in some.
_TILINGS = ((13, 4, 3), (10, 5, 5), (9, 3, 4), (7, 7, 2))


def _tile_cases() -> list[tuple[int, int, int, int]]:
    cases = []
    for n, bq, bk in _TILINGS:
        for i0 in range(0, n, bq):
            for j0 in range(0, n, bk):
                cases.append((i0, min(i0 + bq, n), j0, min(j0 + bk, n)))
    return cases


@exercise("FlashAttention step 3: the causal mask, tile by tile")
def check_causal_tile_mask(causal_tile_mask) -> None:
    """Check ``causal_tile_mask(i0, i1, j0, j1) -> None | BoolTensor (i1 - i0, j1 - j0)``, then causal attention with it."""
    run = _Runner(causal_tile_mask, "causal_tile_mask")
    answers: dict[tuple[int, int, int, int], Tensor | None] = {}
    for i0, i1, j0, j1 in _tile_cases():
        what = f"the tile of queries {i0}..{i1 - 1} and keys {j0}..{j1 - 1}"
        result = run(i0, i1, j0, j1, what=f"i0={i0}, i1={i1}, j0={j0}, j1={j1}")
        if result is _SKIP:
            continue
        if result is not None:
            result = expect_tensor(result, f"the mask of {what}")
            if result.dtype != torch.bool:
                raise ExerciseFailed(
                    f"the mask of {what} has dtype {_dtype(result)}; return a boolean tensor, True where query i may see key j "
                    "(a comparison such as rows >= cols gives one)"
                )
            if tuple(result.shape) == (j1 - j0, i1 - i0) and (i1 - i0) != (j1 - j0):
                raise ExerciseFailed(
                    f"the mask of {what} has shape {tuple(result.shape)}, transposed: rows are the {i1 - i0} queries, "
                    f"columns the {j1 - j0} keys, ({i1 - i0}, {j1 - j0})"
                )
            expect_shape(result, (i1 - i0, j1 - j0), f"the mask of {what} (queries x keys)")
        answers[i0, i1, j0, j1] = result
    run.finish()

    def agrees(fn: Callable[..., Tensor | None]) -> bool:
        for (i0, i1, j0, j1), got in answers.items():
            want = fn(i0, i1, j0, j1)
            if (got is None) != (want is None) or (got is not None and not torch.equal(got, want)):
                return False
        return True

    if not agrees(causal_tile_mask_reference):
        for kind, message in _TILE_MISTAKES.items():
            if agrees(lambda *tile, kind=kind: _tile(*tile, kind)):
                raise ExerciseFailed(message)
        for (i0, i1, j0, j1), got in answers.items():
            want = causal_tile_mask_reference(i0, i1, j0, j1)
            what = f"the tile of queries {i0}..{i1 - 1} and keys {j0}..{j1 - 1}"
            if want is None:
                raise ExerciseFailed(f"{what} lies wholly above the diagonal (j0 >= i1): return None, so the loop skips it")
            if got is None:
                raise ExerciseFailed(f"{what} was skipped (None), but query {i1 - 1} sees key {j0}: return its mask")
            if not torch.equal(got, want):
                r, c = (int(i) for i in torch.nonzero(got != want)[0])
                raise ExerciseFailed(
                    f"in {what}, query {i0 + r} and key {j0 + c}: your mask says {bool(got[r, c])}, but a query sees the "
                    f"keys at or before it, so it should be {bool(want[r, c])}"
                )
    # causal attention with it: the course's tiled loop, the learner's tiles, against F.scaled_dot_product_attention
    q, k, v = (torch.randn(2, 13, 4, dtype=torch.float64) for _ in range(3))
    out, lse = flash_forward(q, k, v, 4, 3, causal=True, tile_mask=causal_tile_mask)
    expect_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), "causal attention with your tile masks")
    expect_close(lse, attention_with_lse(q, k, v, causal=True)[1], "the log-sum-exp with your tile masks")


def causal_tile_mask_reference(i0: int, i1: int, j0: int, j1: int) -> Tensor | None:
    """The course's ``causal_tile_mask`` on the CPU (the check's reference)."""
    return causal_tile_mask(i0, i1, j0, j1)


# ---------------------------------------------------------------- 12.5 one tile of the backward pass


def _tile_grads(qi, kj, vj, doi, lse_i, delta_i, keep=None, mistake: str = "") -> tuple[Tensor, Tensor, Tensor]:
    """``tile_backward``, right or with one typical mistake."""
    scale = 1.0 / math.sqrt(qi.shape[-1])
    s = qi @ kj.transpose(-2, -1) * (1.0 if mistake == "no_scale_s" else scale)
    if keep is not None and mistake != "no_mask":
        s = s.masked_fill(~keep, -math.inf)
    if mistake == "no_lse":
        p = torch.exp(s)
    elif mistake == "tile_softmax":
        p = torch.softmax(s, -1)
    else:
        p = torch.exp(s - lse_i[..., None])
    dp = doi @ vj.transpose(-2, -1)
    ds = (
        p * dp
        if mistake == "no_delta"
        else p * dp - delta_i[..., None]
        if mistake == "delta_outside"
        else p * (dp - delta_i[..., None])
    )
    dq = ds @ kj * (1.0 if mistake == "no_scale_grads" else scale)
    dk = ds.transpose(-2, -1) @ qi * (1.0 if mistake == "no_scale_grads" else scale)
    dv = p.transpose(-2, -1) @ doi
    if mistake == "sign":
        dq, dk = -dq, -dk
    return dq, dk, dv


_GRAD_MISTAKES = {
    "no_lse": "P is exp(S) without subtracting the log-sum-exp: the forward pass's probabilities are exp(S - lse), "
    "normalised over the whole row, which is what lse_i is for",
    "tile_softmax": "P is the softmax of this tile alone, normalised over its own keys: the forward pass normalised "
    "over every key of the row, so recompute P = exp(S - lse_i[..., None]) with the saved log-sum-exp",
    "no_scale_s": "the scores are not scaled when P is recomputed: S = qi @ kj^T / sqrt(d), as in the forward pass",
    "no_delta": "dS = P * dP, without the row term: the softmax's gradient is dS = P * (dP - delta), with "
    "delta_i = rowsum(dO * O) (given), subtracted inside the product",
    "delta_outside": "dS = P * dP - delta: delta is subtracted inside the product, dS = P * (dP - delta_i[..., None])",
    "no_scale_grads": "dq and dk miss the factor 1/sqrt(d): S = Q K^T / sqrt(d), so dQ = dS K / sqrt(d) and "
    "dK = dS^T Q / sqrt(d)",
    "no_mask": "the tile's mask is ignored: where `keep` is given, set the hidden scores to -inf before the exponential, "
    "as in the forward pass (their P must be 0)",
    "sign": "dq and dk have the wrong sign: dS = P * (dP - delta), then dQ = dS K * scale and dK = dS^T Q * scale",
}


def _backward_problem(batched: bool, n: int = 7) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Inputs of one problem, float64: q ``(..., n, 4)``, k ``(..., 9, 4)``, v ``(..., 9, 3)``, dout ``(..., n, 3)``."""
    lead = (2, 3) if batched else ()
    q = torch.randn(*lead, n, 4, dtype=torch.float64) * 1.5
    k = torch.randn(*lead, 9, 4, dtype=torch.float64) * 1.5
    v, dout = torch.randn(*lead, 9, 3, dtype=torch.float64), torch.randn(*lead, n, 3, dtype=torch.float64)
    return q, k, v, dout


@exercise("FlashAttention's backward pass, one tile")
def check_tile_backward(tile_backward) -> None:
    """Check ``tile_backward(qi, kj, vj, doi, lse_i, delta_i, keep=None) -> (dq_i, dk_j, dv_j)``, then the whole backward."""
    run = _Runner(tile_backward, "tile_backward")
    names = ("dq_i", "dk_j", "dv_j")
    for batched, (i0, i1, j0, j1), causal in (
        (False, (0, 7, 0, 9), False),  # one tile holding everything: its share is the whole gradient
        (False, (2, 6, 3, 8), False),  # a tile inside: the row normalisation comes from lse
        (True, (4, 7, 0, 4), False),
        (False, (3, 7, 2, 6), True),  # a tile crossing the diagonal (n = m = 9 below)
    ):
        q, k, v, dout = _backward_problem(batched, n=9 if causal else 7)
        out, lse = attention_with_lse(q, k, v, causal)
        delta = (dout * out).sum(-1)
        keep = causal_tile_mask(i0, i1, j0, j1) if causal else None
        args = (
            q[..., i0:i1, :],
            k[..., j0:j1, :],
            v[..., j0:j1, :],
            dout[..., i0:i1, :],
            lse[..., i0:i1],
            delta[..., i0:i1],
            keep,
        )
        what = (
            f"queries {i0}..{i1 - 1} and keys {j0}..{j1 - 1}"
            + (" (batch 2, heads 3)" if batched else "")
            + (", causal" if causal else "")
        )

        def case(args=args, what=what) -> None:
            result = run(*(a.clone() if isinstance(a, Tensor) else a for a in args), what=f"the tile of {what}")
            if result is _SKIP:
                return
            if not isinstance(result, (tuple, list)) or len(result) != 3:
                kind = type(result).__name__ + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")
                raise ExerciseFailed(f"tile_backward returned a {kind}; return the three (dq_i, dk_j, dv_j)")
            got = tuple(expect_tensor(t, n) for t, n in zip(result, names, strict=True))
            right = tile_backward_reference(*args)
            shapes = [tuple(t.shape) for t in right]
            if [tuple(t.shape) for t in got] != shapes and sorted(map(str, [tuple(t.shape) for t in got])) == sorted(
                map(str, shapes)
            ):
                raise ExerciseFailed(
                    f"the three gradients come back in the wrong order (shapes {[tuple(t.shape) for t in got]}): return "
                    f"(dq_i {shapes[0]}, dk_j {shapes[1]}, dv_j {shapes[2]})"
                )
            for t, r, n in zip(got, right, names, strict=True):
                if t.shape != r.shape and t.shape[-2:] == r.shape[-2:][::-1]:
                    raise ExerciseFailed(
                        f"{n} has shape {tuple(t.shape)}, expected {tuple(r.shape)}: a transpose is missing or extra "
                        "(dV = P^T dO and dK = dS^T Q take the transposed tile, dQ = dS K the tile itself)"
                    )
                expect_shape(t, r.shape, f"{n} for the tile of {what}")
            atol, rtol = _tolerance(*got)
            if all(_same(t, r, atol, rtol) for t, r in zip(got, right, strict=True)):
                return
            variants = {m: (lambda kind=kind: _tile_grads(*args, mistake=kind)) for kind, m in _GRAD_MISTAKES.items()}
            _named(got, right, variants, f"for the tile of {what}")
            for t, r, n in zip(got, right, names, strict=True):
                expect_close(t, r, f"{n} for the tile of {what}", atol=1e-10, rtol=1e-9)

        try:
            if batched:
                _batched(case, tile_backward, args[:6], (None,), tile_backward_reference, what)
            else:
                case()
        except ExerciseFailed as err:
            if "cannot be multiplied" in str(err) or "must match the size" in str(err):
                raise ExerciseFailed(
                    f"{err}. Check which factor of each product is transposed: dV = P^T dO is (block_k, d_v), "
                    "dP = dO V^T and dS = P * (dP - delta) are (block_q, block_k), dQ = dS K and dK = dS^T Q"
                ) from None
            raise
    run.finish()
    # the whole backward pass with it: the course's loop over tiles, the learner's tile, against autograd
    for causal in (False, True):
        q, k, v = (torch.randn(2, 9, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
        dout = torch.randn(2, 9, 4, dtype=torch.float64)
        theirs = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=causal), (q, k, v), dout)
        with torch.no_grad():
            out, lse = flash_forward(q, k, v, 4, 3, causal)
            ours = flash_backward(q, k, v, out, lse, dout, 4, 3, causal, tile_grads=tile_backward)
        for got, want, n in zip(ours, theirs, ("dq", "dk", "dv"), strict=True):
            expect_close(
                got,
                want,
                f"the whole backward pass's {n} with your tiles ({'causal' if causal else 'no mask'})",
                atol=1e-10,
                rtol=1e-9,
            )
    q32 = torch.randn(6, 8)
    args32 = (q32, torch.randn(5, 8), torch.randn(5, 4), torch.randn(6, 4), torch.randn(6) + 3.0, torch.randn(6), None)
    _expect_device_follows(tile_backward, args32, "tile_backward")


def tile_backward_reference(qi, kj, vj, doi, lse_i, delta_i, keep=None) -> tuple[Tensor, Tensor, Tensor]:
    """The course's ``tile_backward`` (the check's reference)."""
    return tile_backward(qi, kj, vj, doi, lse_i, delta_i, keep)


# ---------------------------------------------------------------- the sliding-window mask


def _window(n: int, window: int, kind: str = "") -> Tensor:
    i = torch.arange(n)
    offset = i[:, None] - i[None, :]
    j = i[None, :].expand(n, n)
    return {
        "": (offset >= 0) & (offset < window),
        "one_more": (offset >= 0) & (offset <= window),
        "one_less": (offset >= 0) & (offset < window - 1),
        "excludes_query": (offset > 0) & (offset <= window),
        "excludes_query_short": (offset > 0) & (offset < window),
        "future": (offset <= 0) & (offset > -window),
        "both_sides": offset.abs() < window,
        "not_causal": offset < window,
        "no_window": offset >= 0,
        "anchored": (offset >= 0) & (j < window),
        "chunks": (offset >= 0) & (i[:, None] // window == i[None, :] // window),
        "inverted": ~((offset >= 0) & (offset < window)),
    }[kind]


_WINDOW_MISTAKES = {
    "one_more": "the window holds one key too many: query i sees keys i - window + 1 .. i, so the condition is "
    "0 <= i - j < window (strictly less than the window), not <= window",
    "one_less": "the window holds one key too few: query i sees `window` keys, i - window + 1 .. i, itself included: "
    "0 <= i - j < window",
    "excludes_query": "the window leaves out the query itself: query i sees itself and the window - 1 keys before it, "
    "0 <= i - j < window (i - j = 0 included); without itself the first query sees nothing and its softmax is NaN",
    "excludes_query_short": "the window leaves out the query itself: query i sees itself and the window - 1 keys before "
    "it, 0 <= i - j < window (i - j = 0 included); without itself the first query sees nothing and its softmax is NaN",
    "future": "the window is on the wrong side: query i may see itself and the window - 1 keys BEFORE it (j <= i), not "
    "after it; the rows are the queries, the columns the keys",
    "both_sides": "the window reaches both ways: a causal sliding window sees only the past, 0 <= i - j < window",
    "not_causal": "every key after the query is visible: keep the causal part, i - j >= 0, as well as i - j < window",
    "no_window": "the window is ignored: that is the plain causal mask; also require i - j < window",
    "anchored": "the window is anchored at the start of the sequence (keys 0 .. window - 1) instead of sliding with "
    "the query: it holds the `window` keys just before each query, measured from the query, 0 <= i - j < window",
    "chunks": "the sequence is cut into fixed chunks of `window` positions (block-diagonal), so the first query of a "
    "chunk sees only itself: a sliding window moves with each query, keys i - window + 1 .. i",
    "inverted": "the mask is inverted: True must mean 'may attend' (the convention of F.scaled_dot_product_attention), "
    "for the keys inside the window",
}


@exercise("sliding-window mask")
def check_sliding_window_mask(sliding_window_mask) -> None:
    """Check ``sliding_window_mask(n, window) -> BoolTensor (n, n)``, then attention with it against is_causal=True."""
    run = _Runner(sliding_window_mask, "sliding_window_mask")
    for n, window in ((7, 3), (6, 1), (5, 8), (9, 4)):
        result = run(n, window, what=f"n={n}, window={window}")
        if result is _SKIP:
            continue
        mask = expect_tensor(result, "the mask")
        if mask.dtype != torch.bool:
            hint = (
                " (an additive mask with 0 and -inf? the course's masks are boolean, True = may attend)"
                if mask.is_floating_point()
                else ""
            )
            raise ExerciseFailed(
                f"the mask has dtype {mask.dtype}{hint}; return a boolean tensor, True where query i may see key j"
            )
        expect_shape(mask, (n, n), f"the mask for n={n}, window={window}")
        right = _window(n, window)
        if torch.equal(mask, right):
            continue
        for kind, message in _WINDOW_MISTAKES.items():
            if torch.equal(mask, _window(n, window, kind)):
                raise ExerciseFailed(f"with n={n}, window={window}: {message}")
        rows = [i for i in range(n) if not torch.equal(mask[i], right[i])]
        raise ExerciseFailed(
            f"with n={n}, window={window}: row {rows[0]} (query {rows[0]}) allows keys "
            f"{torch.nonzero(mask[rows[0]]).flatten().tolist()}, expected {torch.nonzero(right[rows[0]]).flatten().tolist()}"
        )
    run.finish()
    # a window that covers the sequence is the causal mask: attention equals is_causal=True
    q, k, v = (torch.randn(2, 6, 4, dtype=torch.float64) for _ in range(3))
    mask = run(6, 6, what="n=6, window=6")
    windowed = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expect_close(windowed, F.scaled_dot_product_attention(q, k, v, is_causal=True), "attention with window = n", atol=1e-12)


# ---------------------------------------------------------------- linear attention, recurrent form


def _linear(q: Tensor, k: Tensor, v: Tensor, mistake: str = "") -> Tensor:
    """The recurrent form, right or with one typical mistake (written as the loop a learner writes)."""
    phi = {"exp": torch.exp, "relu": torch.relu, "elu": F.elu, "identity": lambda x: x}
    fq = (phi.get(mistake) or elu_feature_map)(q) if mistake not in ("phi_k_only",) else q
    fk = (phi.get(mistake) or elu_feature_map)(k) if mistake not in ("phi_q_only",) else k
    if mistake == "phi_k_only":
        fk = elu_feature_map(k)
    if mistake == "phi_q_only":
        fq = elu_feature_map(q)
    state = torch.zeros((*q.shape[:-2], q.shape[-1], v.shape[-1]), dtype=q.dtype)
    z = torch.zeros((*q.shape[:-2], q.shape[-1]), dtype=q.dtype)
    n = q.shape[-2]
    outputs = [None] * n
    for i in range(n - 1, -1, -1) if mistake == "backwards" else range(n):
        if mistake != "read_first":
            state = fk[..., i, :, None] * v[..., i, None, :] + (0 if mistake == "state_not_summed" else state)
            z = fk[..., i, :] + (0 if mistake == "z_not_summed" else z)
        numerator = (fq[..., i, None, :] @ state).squeeze(-2)
        if mistake == "den_no_query":
            denominator = z.sum(-1, keepdim=True)
        elif mistake == "den_raw_q":
            denominator = (q[..., i, :] * z).sum(-1, keepdim=True)
        else:
            denominator = (fq[..., i, :] * z).sum(-1, keepdim=True)
        outputs[i] = numerator if mistake == "no_normaliser" else numerator / denominator
        if mistake == "read_first":
            state = state + fk[..., i, :, None] * v[..., i, None, :]
            z = z + fk[..., i, :]
    return torch.stack(outputs, -2)


_LINEAR_MISTAKES = {
    "no_normaliser": "the normaliser is missing: divide phi(q_i)^T S_i by phi(q_i)^T z_i, where z_i is the running sum "
    "of phi(k_j)",
    "identity": "the feature map is missing: apply phi = elu(x) + 1 to the queries and the keys, so every weight is positive",
    "read_first": "the state is read before it takes in position i: add phi(k_i) v_i^T and phi(k_i) to the state first, "
    "then read it with phi(q_i) (a query sees its own key; at position 0 the empty state gives 0/0)",
    "state_not_summed": "the state S is replaced at every position instead of accumulated: S_i = S_(i-1) + phi(k_i) "
    "v_i^T holds every key and value so far (state = state + ...)",
    "z_not_summed": "the normaliser's state z is replaced at every position instead of accumulated: "
    "z_i = z_(i-1) + phi(k_i), the sum of every feature vector so far (z = z + ...)",
    "den_no_query": "the normaliser is the sum of z alone, without the query: it is phi(q_i) . z_i, the same weights "
    "as the numerator's, summed",
    "den_raw_q": "the normaliser uses q instead of phi(q): the denominator is phi(q_i) . z_i",
    "exp": "the feature map is exp: this course's phi is elu(x) + 1 (Katharopoulos et al.); exp(q) . exp(k) is not "
    "softmax attention either, and it overflows for large scores",
    "relu": "the feature map is relu: this course's phi is elu(x) + 1 (Katharopoulos et al.), positive everywhere; relu "
    "gives zero weights and can divide by 0",
    "elu": "the feature map is elu(x) without the + 1: its values go down to -1, so weights can be negative; use elu(x) + 1",
    "phi_q_only": "the feature map is applied to the queries only: the keys need it too, phi(k_j)",
    "phi_k_only": "the feature map is applied to the keys only: the queries need it too, phi(q_i)",
    "backwards": "the recurrence runs backwards, from the last position to the first, so each query sees the keys "
    "AFTER it: loop i = 0, 1, ..., n - 1, so that the state holds positions 0..i",
}

#: The paper's epsilon (Katharopoulos et al. 2020, in the denominator): accepted up to this size.
_EPS = 1e-5


def _expect_linear(out: object, q: Tensor, k: Tensor, v: Tensor, what: str) -> None:
    out = expect_tensor(out, f"the output for {what}")
    right = linear_attention_parallel(q, k, v)
    expect_shape(out, right.shape, f"the output for {what}")
    atol, rtol = _tolerance(out)
    if _same(out, right, atol, rtol):
        return
    in_float32 = out.dtype == torch.float64 and bool(torch.equal(out.float().double(), out))
    if out.dtype == torch.float64 and not in_float32 and bool(torch.isfinite(out).all()):
        # an eps in the denominator (the paper's 1e-6) moves each output by at most |out| * eps / denominator
        den = (elu_feature_map(q) * torch.cumsum(elu_feature_map(k), -2)).sum(-1, keepdim=True)  # (..., n, 1)
        if bool(((out - right).abs() <= atol + rtol * right.abs() + right.abs() * _EPS / den).all()):
            return
    variants = {message: (lambda kind=kind: (_linear(q, k, v, kind),)) for kind, message in _LINEAR_MISTAKES.items()}
    softmax = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    full = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
    variants["that is softmax attention (exp of the scores): linear attention weighs key j by phi(q_i) . phi(k_j)"] = lambda: (
        softmax,
    )
    variants[
        "the output uses every position, later ones included: the state at position i holds the keys and values of "
        "positions 0..i only (update it inside the loop, read it at once)"
    ] = lambda: ((full @ v) / full.sum(-1, keepdim=True),)
    _named((out,), (right,), variants, f"for {what}")
    expect_close(out, right, f"the output for {what}", atol=1e-10, rtol=1e-9)


@exercise("linear attention, recurrent form")
def check_linear_attention_recurrent(linear_attention_recurrent) -> None:
    """Check ``linear_attention_recurrent(q, k, v) -> (..., n, d_v)`` against the parallel (masked matrix) form."""
    run = _Runner(linear_attention_recurrent, "linear_attention_recurrent")
    for q_shape, v_shape in (((9, 3), (9, 6)), ((2, 7, 5), (2, 7, 4)), ((2, 3, 6, 4), (2, 3, 6, 5))):
        q = torch.randn(*q_shape, dtype=torch.float64)
        k = torch.randn(*q_shape, dtype=torch.float64)
        v = torch.randn(*v_shape, dtype=torch.float64)
        what = f"q, k {q_shape} and v {v_shape}"

        def case(q=q, k=k, v=v, what=what) -> None:
            out = run(q.clone(), k.clone(), v.clone(), what=what)
            if out is not _SKIP:
                _expect_linear(out, q, k, v, what)

        if len(q_shape) > 2:
            _batched(case, linear_attention_recurrent, (q, k, v), (), linear_attention_parallel, what)
        else:
            case()
    q32, k32, v32 = torch.randn(8, 4), torch.randn(8, 4), torch.randn(8, 3)
    out32 = run(q32.clone(), k32.clone(), v32.clone(), what="float32 q, k (8, 4) and v (8, 3)")
    if out32 is not _SKIP:
        _expect_linear(out32, q32, k32, v32, "float32 inputs")
    run.finish()
    _expect_device_follows(linear_attention_recurrent, (q32, k32, v32), "linear_attention_recurrent")
