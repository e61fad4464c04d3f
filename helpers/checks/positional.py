"""Checks of notebook 05: sinusoidal positional encoding and layer norm.

- ``check_positional_encoding(fn)``: ``fn(max_len, d_model) -> (max_len, d_model)``,
  PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same angle);
- ``check_layer_norm(fn)``: ``fn(x, gamma, beta, eps=1e-5)`` over the last axis,
  compared with ``torch.nn.functional.layer_norm``;
- ``check_shift_matrix(fn)``: ``fn(k, d_model) -> (d_model, d_model)``, the block-diagonal rotation
  ``M_k`` with ``PE(p + k) = M_k @ PE(p)``;
- ``check_batch_norm(fn)``: ``fn(x, eps=1e-5)`` for ``(batch, tokens, features)``, each feature normalised over
  the batch and the tokens, compared with ``nn.BatchNorm1d(affine=False)`` in training mode.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.blocks import batch_norm as _batch_norm_reference
from helpers.blocks import shift_matrix as _shift_reference
from helpers.checks._core import (
    ExerciseFailed,
    call_attempt,
    exercise,
    expect_close,
    expect_shape,
    expect_tensor,
)

__all__ = ["check_positional_encoding", "check_layer_norm", "check_shift_matrix", "check_batch_norm"]


# ------------------------------------------------------------------ positional encoding


def _pe(
    max_len: int,
    d_model: int,
    *,
    exponent=None,
    first: int = 0,
    order: str = "interleaved",
    sin_even: bool = True,
    divide: bool = True,
) -> Tensor:
    """Sinusoidal encodings, correct by default; the keyword arguments reproduce typical slips.

    ``exponent(pair, feature)`` gives the exponent e of 10000^e for each feature
    (pair index i = feature // 2); ``first`` is the first position; ``order`` is
    ``"interleaved"`` (sin, cos, sin, cos...) or ``"halves"`` (all sines, then all cosines).
    """
    pos = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    feature = torch.arange(d_model, dtype=torch.float64)  # (d_model,)
    pair = torch.div(feature, 2, rounding_mode="floor")
    if order == "halves":
        pair = feature % (d_model // 2)
    e = (2 * pair / d_model) if exponent is None else exponent(pair, feature)
    freq = 10000.0 ** (-e) if divide else 10000.0**e  # (d_model,)
    angle = pos * freq  # (max_len, d_model)
    is_sin = (feature % 2 == 0) if order == "interleaved" else (feature < d_model // 2)
    if not sin_even:
        is_sin = ~is_sin
    return torch.where(is_sin, torch.sin(angle), torch.cos(angle))


def _pe_from_freq(max_len: int, d_model: int, freq: Tensor) -> Tensor:
    """Interleaved encodings with one frequency per pair ``freq`` (d_model/2,)."""
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * freq  # (max_len, d_model/2)
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe


def _pe_mistakes(max_len: int, d_model: int) -> dict[str, Tensor]:
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (d_model/2,)
    return {
        "sines and cosines are swapped: sin goes on the even features (0, 2, 4, ...), cos on the odd ones": _pe(
            max_len, d_model, sin_even=False
        ),
        "the halves are concatenated (all sines, then all cosines) instead of interleaved: "
        "PE[:, 0::2] = sin, PE[:, 1::2] = cos": _pe(max_len, d_model, order="halves"),
        "the cosines come first in the concatenated halves, and the features should be interleaved (sin on even, cos on odd)": _pe(
            max_len, d_model, order="halves", sin_even=False
        ),
        "the odd features use their own index in the exponent, 10000^((2i+1)/d_model); "
        "a sin/cos pair shares one frequency, 10000^(2i/d_model) with i the pair index": _pe(
            max_len, d_model, exponent=lambda pair, feature: feature / d_model
        ),
        "the feature index j was used where the pair index i belongs: the exponent is 2i/d_model with i = j // 2, "
        "so features 2i and 2i+1 share 10000^(2i/d_model)": _pe(
            max_len, d_model, exponent=lambda pair, feature: 2 * feature / d_model
        ),
        "the exponent is missing its factor 2: it is 2i/d_model, not i/d_model": _pe(
            max_len, d_model, exponent=lambda pair, feature: pair / d_model
        ),
        "the pair index is counted from 1: the first pair (i = 0) has frequency 1 (exponent 0)": _pe(
            max_len, d_model, exponent=lambda pair, feature: 2 * (pair + 1) / d_model
        ),
        "positions are counted from 1: the first row is position 0, with PE[0] = [0, 1, 0, 1, ...]": _pe(
            max_len, d_model, first=1
        ),
        "pos is multiplied by 10000^(2i/d_model) instead of divided by it (the exponent's sign is flipped)": _pe(
            max_len, d_model, divide=False
        ),
        "the exponent 2i/d_model was computed with integer division (//), so it is 0 for every pair: use float division": _pe(
            max_len, d_model, exponent=lambda pair, feature: torch.zeros_like(feature)
        ),
        "log base slip: 10000^(-2i/d) is exp(-2i * ln(10000) / d) with the natural log; you used log10(10000) = 4": _pe_from_freq(
            max_len, d_model, torch.exp(-two_i * 4.0 / d_model)
        ),
        "log base slip: 10000^(-2i/d) is exp(-2i * ln(10000) / d) with the natural log; you used log2(10000)": _pe_from_freq(
            max_len, d_model, torch.exp(-two_i * math.log2(10000.0) / d_model)
        ),
        "the base is e instead of 10000: the frequencies are 1 / 10000^(2i/d_model) = exp(-2i ln(10000) / d_model)": _pe_from_freq(
            max_len, d_model, torch.exp(-two_i / d_model)
        ),
        "the base is 1000 instead of 10000": _pe_from_freq(max_len, d_model, 1000.0 ** (-two_i / d_model)),
        "the angles are in degrees: torch.sin and torch.cos take radians, do not convert": _pe_from_freq(
            max_len, d_model, 10000.0 ** (-two_i / d_model) * math.pi / 180
        ),
        "the exponent lacks its parentheses: pos / 10000 ** 2i / d_model divides by 10000^(2i) and then by d_model; "
        "write pos / 10000 ** (2 * i / d_model)": _pe_from_freq(max_len, d_model, 10000.0 ** (-two_i) / d_model),
        "the pair index is doubled twice: when i already steps by 2 (range(0, d_model, 2), the 2i of the formula), "
        "the exponent is i / d_model, not 2 * i / d_model": _pe_from_freq(max_len, d_model, 10000.0 ** (-2 * two_i / d_model)),
        "the exponent is divided by max_len; the formula divides by d_model: 10000^(2i / d_model)": _pe_from_freq(
            max_len, d_model, 10000.0 ** (-two_i / max_len)
        ),
        "the odd features hold sines too: PE[pos, 2i + 1] is the cosine of the same angle (pe[:, 1::2] = torch.cos(angle))": (
            _pe_sines_only(max_len, d_model, torch.sin)
        ),
        "the even features hold cosines too: PE[pos, 2i] is the sine of the angle (pe[:, 0::2] = torch.sin(angle))": (
            _pe_sines_only(max_len, d_model, torch.cos)
        ),
    }


def _pe_sines_only(max_len: int, d_model: int, fn) -> Tensor:
    """Both features of each pair hold ``fn`` (sin or cos) of the pair's angle."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] * 10000.0 ** (-two_i / d_model)  # (max_len, d_model/2)
    return fn(angle).repeat_interleave(2, dim=1)


def _pe_generic(out: Tensor, expected: Tensor, name: str) -> str:
    """Say which rows (positions) and columns (features) differ, and whether even or odd features."""
    got = out.detach().double().cpu()
    if got.shape[1] >= 4 and torch.allclose(got[:, 0::2], got[:, :1].expand_as(got[:, 0::2]), atol=_PE_ATOL):
        return (
            f"{name}: every sin/cos pair has the same frequency (all the even features are equal, and all the odd ones): "
            "the exponent must grow with the pair index i, angle = pos / 10000^(2i / d_model), so that pair 0 turns "
            "fastest and the last pair slowest"
        )
    diff = (out.detach().double() - expected).abs() > _PE_ATOL
    cols = torch.nonzero(diff.any(0)).flatten().tolist()
    rows = torch.nonzero(diff.any(1)).flatten().tolist()
    parity = ""
    if cols and all(c % 2 == 1 for c in cols):
        parity = " (only odd features, the cosines, are wrong)"
    elif cols and all(c % 2 == 0 for c in cols):
        parity = " (only even features, the sines, are wrong)"
    row0 = ""
    if 0 in rows:
        row0 = f"; row 0 (position 0) should be [0, 1, 0, 1, ...], you gave {[round(v, 4) for v in out[0, :6].tolist()]}"
    d = (out.detach().double() - expected).abs()
    idx = tuple(int(i) for i in torch.nonzero(d == d.max())[0])
    return (
        f"{name} differs in features {cols[:8]}{'...' if len(cols) > 8 else ''}{parity} at positions "
        f"{rows[:8]}{'...' if len(rows) > 8 else ''}; the largest difference is {d.max().item():.4g} at (pos, feature) = {idx}: "
        f"you gave {out[idx].item():.6g}, expected {expected[idx].item():.6g}{row0}"
    )


_PE_ATOL = 1e-4


@exercise("sinusoidal positional encoding")
def check_positional_encoding(sinusoidal_positional_encoding) -> None:
    """Check ``sinusoidal_positional_encoding(max_len, d_model)`` against the formula of "Attention Is All You Need"."""
    for max_len, d_model in ((7, 6), (50, 16), (3, 10)):
        label = f"max_len={max_len}, d_model={d_model}"
        name = f"sinusoidal_positional_encoding({max_len}, {d_model})"
        try:
            out = expect_tensor(call_attempt(sinusoidal_positional_encoding, max_len, d_model, what=label), name)
        except ExerciseFailed as err:
            message = str(err)
            if "cannot be broadcast to indexing result" in message or "expanded size of the tensor" in message:
                raise ExerciseFailed(
                    f"{message.rstrip('. ')}. The (max_len, d_model / 2) table of angles fills pe[:, 0::2] (sin) and "
                    "pe[:, 1::2] (cos): the even and odd *features* (columns); pe[0::2] would select the even positions (rows)"
                ) from None
            raise
        if not out.is_floating_point():
            raise ExerciseFailed(f"{name} has dtype {out.dtype}; return a floating-point tensor (float32 or float64)")
        expected = _pe(max_len, d_model)  # (max_len, d_model), float64
        got = tuple(out.shape)
        if got != (max_len, d_model):
            if got == (d_model, max_len):
                raise ExerciseFailed(
                    f"{name} has shape {got}: rows are positions and columns features, (max_len, d_model) = {(max_len, d_model)}"
                )
            if got in ((1, max_len, d_model), (max_len, 1, d_model)):
                raise ExerciseFailed(
                    f"{name} has an extra axis of size 1, shape {got}; return (max_len, d_model) = {(max_len, d_model)}"
                )
            if got == (max_len, d_model // 2):
                raise ExerciseFailed(
                    f"{name} has shape {got}: only d_model/2 features; each pair i fills two features, 2i (sin) and 2i+1 (cos)"
                )
            expect_shape(out, (max_len, d_model), name)
        try:  # float32 answers are fine: sin of angles up to ~50 is accurate to a few 1e-6 in float32
            expect_close(out, expected, name, atol=_PE_ATOL, rtol=0, mistakes=_pe_mistakes(max_len, d_model))
        except ExerciseFailed as err:
            if "differs from the reference" in str(err):  # say which positions and features instead
                raise ExerciseFailed(_pe_generic(out, expected, name)) from None
            raise


# ------------------------------------------------------------------ layer norm


def _ln_mistakes(x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> dict[str, Tensor]:
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    x_hat = (x - mean) / torch.sqrt(var + eps)
    mistakes = {
        "the variance is unbiased (divides by d - 1); layer norm uses the biased variance "
        "(divide by d: x.var(-1, unbiased=False) or ((x - mean)**2).mean(-1))": (x - mean)
        / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps)
        * gamma
        + beta,
        "eps is added outside the square root; it belongs inside: (x - mean) / sqrt(var + eps)": (x - mean)
        / (torch.sqrt(var) + eps)
        * gamma
        + beta,
        "eps is missing: divide by sqrt(var + eps), not by the standard deviation alone": (x - mean) / torch.sqrt(var) * gamma
        + beta,
        "the mean is not subtracted: x_hat = (x - mean) / sqrt(var + eps)": x / torch.sqrt(var + eps) * gamma + beta,
        "gamma and beta are forgotten: finish with x_hat * gamma + beta": x_hat,
        "gamma and beta are swapped: the gain gamma multiplies, the bias beta is added": x_hat * beta + gamma,
        "beta is forgotten: finish with x_hat * gamma + beta": x_hat * gamma,
        "gamma is forgotten: finish with x_hat * gamma + beta": x_hat + beta,
        "the 'variance' is the mean of x**2 without subtracting the mean (that is RMSNorm's statistic)": (x - mean)
        / torch.sqrt((x**2).mean(-1, keepdim=True) + eps)
        * gamma
        + beta,
        "that is RMSNorm (x / sqrt(mean(x**2) + eps) * gamma); layer norm subtracts the mean and divides by the standard deviation": x
        / torch.sqrt((x**2).mean(-1, keepdim=True) + eps)
        * gamma,
        "the standard deviation is unbiased (torch.std divides by d - 1) and eps is added outside the square root; "
        "use the biased variance and sqrt(var + eps)": (x - mean) / (x.std(-1, keepdim=True) + eps) * gamma + beta,
        "the standard deviation is unbiased (torch.std divides by d - 1) and eps is missing; use sqrt(biased var + eps)": (
            x - mean
        )
        / x.std(-1, keepdim=True)
        * gamma
        + beta,
        "eps is squared: use sqrt(var + eps)": (x - mean) / torch.sqrt(var + eps**2) * gamma + beta,
        "the whole tensor is normalised at once; layer norm normalises each token over its features (the last axis)": (
            x - x.mean()
        )
        / torch.sqrt(x.var(unbiased=False) + eps)
        * gamma
        + beta,
    }
    d = x.shape[-1]
    mistakes.update(
        {
            "the centred x is divided by the variance; divide by the standard deviation, its square root: "
            "(x - mean) / sqrt(var + eps)": (x - mean) / (var + eps) * gamma + beta,
            "eps is added after the division (an operator-precedence slip: (x - mean) / sqrt(var) + eps); it belongs "
            "inside the square root: (x - mean) / sqrt(var + eps)": ((x - mean) / torch.sqrt(var) + eps) * gamma + beta,
            "gamma and beta are applied before normalising, so the normalisation undoes them; normalise first, then "
            "x_hat * gamma + beta": _normalise(x * gamma + beta, eps),
            "the centred x is divided by its L2 norm (F.normalize), which is sqrt(d) times the standard deviation; "
            "divide by sqrt(var + eps), the root of the *mean* square": (x - mean) / (x - mean).norm(dim=-1, keepdim=True) * gamma
            + beta,
            "eps is added to the numerator too ((x - mean + eps) / ...); only the variance gets eps": (x - mean + eps)
            / torch.sqrt(var + eps)
            * gamma
            + beta,
        }
    )
    if x.dim() == 3:
        m12 = x.mean((1, 2), keepdim=True)
        v12 = x.var((1, 2), keepdim=True, unbiased=False)
        mistakes[
            "normalised over the last two axes (tokens and features, as F.layer_norm(x, x.shape[1:]) does); layer norm "
            f"normalises each token over its own features, the last axis only: normalized_shape = ({d},)"
        ] = (x - m12) / torch.sqrt(v12 + eps) * gamma + beta
    for axes, what in (
        ((0,), "axis 0 (the batch): that is batch norm"),
        ((1,), "axis 1 (the tokens)"),
        ((0, 1), "axes 0 and 1 (batch and tokens): that is batch norm over a sequence"),
    ):
        if x.dim() == 3:
            m = x.mean(axes, keepdim=True)
            v = x.var(axes, keepdim=True, unbiased=False)
            mistakes[f"normalised over {what}; layer norm normalises over the last axis, the features of each token"] = (
                x - m
            ) / torch.sqrt(v + eps) * gamma + beta
    return mistakes


def _normalise(x: Tensor, eps: float) -> Tensor:
    """Layer norm without gamma and beta, over the last axis."""
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)


def _ln_diagnosis(out: Tensor, x: Tensor, gamma: Tensor, beta: Tensor, eps: float) -> str:
    """Undo gamma and beta and say what mean and variance the student's rows have over the last axis."""
    x_hat = (out.detach().double() - beta) / gamma  # what the normalised x would be
    mean = x_hat.mean(-1).flatten()[0].item()
    var = x_hat.var(-1, unbiased=False).flatten()[0].item()
    var_x = x.var(-1, unbiased=False).flatten()[0].item()
    want_var = var_x / (var_x + eps)
    return (
        f"After undoing gamma and beta, the first token's features have mean {mean:.4g} and biased variance {var:.8g}; "
        f"layer norm gives mean 0 and variance var / (var + eps) = {want_var:.8g} over the last axis of each token"
    )


def _ln_call(fn, *args, what: str, **kwargs) -> Tensor:
    try:
        return call_attempt(fn, *args, what=what, **kwargs)
    except ExerciseFailed as err:
        message = str(err)
        if "must match the size" in message or "expanded size" in message:
            raise ExerciseFailed(
                message + ". Did you forget keepdim=True in mean or var, so that (x - mean) broadcasts per token?"
            ) from None
        raise


@exercise("layer norm")
def check_layer_norm(layer_norm) -> None:
    """Check ``layer_norm(x, gamma, beta, eps=1e-5)`` against ``F.layer_norm`` over the last axis."""
    d = 5
    gamma = 1.0 + 0.5 * torch.randn(d, dtype=torch.float64)  # (5,)
    beta = 0.5 * torch.randn(d, dtype=torch.float64)  # (5,)
    x = 2.0 * torch.randn(2, 3, d, dtype=torch.float64) + torch.randn(2, 3, 1, dtype=torch.float64)  # (2, 3, 5)
    x_tiny = 0.003 * torch.randn(2, 3, d, dtype=torch.float64)  # variance ~1e-5, comparable to eps
    cases = [
        ("x (2, 3, 5) with the default eps", x, None),
        ("x (2, 3, 5) with eps=0.5", x, 0.5),
        ("x (2, 3, 5) of tiny variance (~1e-5, as large as eps)", x_tiny, None),
        ("x (4, 5), one row per token", torch.randn(4, d, dtype=torch.float64) * 3 + 1, None),
        # float32, the dtype of a real model: judged at float32's precision
        ("a float32 x (2, 3, 5)", x.float(), None),
        ("a float32 x (2, 3, 5) of tiny variance (~1e-5, as large as eps)", x_tiny.float(), None),
    ]
    for label, xi, eps in cases:
        kwargs = {} if eps is None else {"eps": eps}
        what = f"{label}, gamma and beta of shape (5,)"
        # clones: an answer that works in place must not change the inputs the reference uses
        g, b = gamma.to(xi.dtype), beta.to(xi.dtype)
        out = expect_tensor(_ln_call(layer_norm, xi.clone(), g.clone(), b.clone(), what=what, **kwargs), f"layer_norm on {label}")
        e = 1e-5 if eps is None else eps
        # the reference in float64 from the same (float32-rounded) inputs: the student's float32 result is compared with the exact answer
        expected = F.layer_norm(xi.double(), (d,), g.double(), b.double(), e)
        mistakes = _ln_mistakes(xi.double(), g.double(), b.double(), e)
        if eps is not None:
            mistakes["the `eps` argument is ignored (the default 1e-5 was used): use the eps you are given"] = F.layer_norm(
                xi.double(), (d,), g.double(), b.double(), 1e-5
            )
        else:
            for wrong_eps in (1e-6, 1e-8, 0.0, 1e-3):
                mistakes[f"the default eps should be 1e-5 (as nn.LayerNorm), you used {wrong_eps:g}"] = F.layer_norm(
                    xi.double(), (d,), g.double(), b.double(), wrong_eps
                )
        if tuple(out.shape) == tuple(xi.shape[:-1]) or tuple(out.shape) == tuple(xi.shape[:-1]) + (1,):
            raise ExerciseFailed(
                f"layer_norm on {label} returned shape {tuple(out.shape)}: that is one number per token (a statistic?); "
                f"return the normalised x, same shape as x {tuple(xi.shape)}"
            )
        try:
            expect_close(out, expected, f"layer_norm on {label}", atol=1e-8, rtol=1e-6, mistakes=mistakes)
        except ExerciseFailed as err:
            if "differs from the reference" not in str(err):
                raise
            raise ExerciseFailed(f"{err}. {_ln_diagnosis(out, xi.double(), g.double(), b.double(), e)}") from None


# ------------------------------------------------------------------ the shift matrix M_k


def _shift(
    k: int,
    d_model: int,
    *,
    freq=None,
    layout: str = "interleaved",
    block: str = "rotation",
    angle_scale: float = 1.0,
) -> Tensor:
    """``M_k``, correct by default; the keyword arguments reproduce typical slips.

    ``freq(i)`` gives pair i's frequency (default 10000^(-2i/d)); ``layout`` "halves" couples feature i with
    i + d/2; ``block`` is the 2 x 2 block's pattern: "rotation" [[c, s], [-s, c]], "transposed" [[c, -s], [s, c]],
    "swapped" [[s, c], [-c, s]], "diagonal" [[c, 0], [0, c]], "same_sign" [[c, s], [s, c]].
    """
    i = torch.arange(d_model // 2, dtype=torch.float64)  # (d/2,)
    w = 10000.0 ** (-2 * i / d_model) if freq is None else freq(i)
    c, s = torch.cos(k * w * angle_scale), torch.sin(k * w * angle_scale)  # (d/2,) each
    z = torch.zeros_like(c)
    entries = {
        "rotation": (c, s, -s, c),
        "transposed": (c, -s, s, c),
        "swapped": (s, c, -c, s),
        "diagonal": (c, z, z, c),
        "same_sign": (c, s, s, c),
    }[block]
    first = torch.arange(0, d_model, 2) if layout == "interleaved" else torch.arange(d_model // 2)
    second = first + 1 if layout == "interleaved" else first + d_model // 2
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[first, first], M[first, second], M[second, first], M[second, second] = entries
    return M


def _shift_mistakes(k: int, d_model: int) -> dict[str, Tensor]:
    return {
        "your M_k is the transpose of the right one: it turns each pair backwards and maps PE(p + k) to PE(p) "
        "(M_k^T = M_{-k}). In the block of pair i the sine row is [cos(k w_i), sin(k w_i)] and the cosine row "
        "[-sin(k w_i), cos(k w_i)]; if you derived the row-vector form PE(p) @ M, transpose it, since the exercise asks "
        "for M_k @ PE(p)": _shift(k, d_model, block="transposed"),
        "cos and sin are swapped in the blocks: the diagonal of each 2 x 2 block holds cos(k w_i) (a shift by 0 must give "
        "the identity), the off-diagonal entries +sin(k w_i) above and -sin(k w_i) below": _shift(k, d_model, block="swapped"),
        "the off-diagonal entries are missing: each 2 x 2 block is a rotation, [[cos(k w_i), sin(k w_i)], "
        "[-sin(k w_i), cos(k w_i)]], not cos(k w_i) alone": _shift(k, d_model, block="diagonal"),
        "both off-diagonal entries have the same sign: a rotation has +sin(k w_i) above the diagonal (sine row) and "
        "-sin(k w_i) below it (cosine row), from sin(a + b) = sin a cos b + cos a sin b and "
        "cos(a + b) = cos a cos b - sin a sin b": _shift(k, d_model, block="same_sign"),
        "the shift k is not used: every block turns by w_i, the angle of a single step; a shift by k turns pair i by "
        "k w_i": _shift(1, d_model),
        "every pair turns by k radians: pair i turns at its own frequency, by k w_i with w_i = 10000^(-2i / d_model)": _shift(
            k, d_model, freq=lambda i: torch.ones_like(i)
        ),
        "the frequencies miss the factor 2 in the exponent: w_i = 10000^(-2i / d_model) with i the pair index": _shift(
            k, d_model, freq=lambda i: 10000.0 ** (-i / d_model)
        ),
        "the pair index is doubled twice: when i already steps by 2 (range(0, d_model, 2), the 2i of the formula), "
        "the frequency is 10000^(-i / d_model), not 10000^(-2 * i / d_model)": _shift(
            k, d_model, freq=lambda i: 10000.0 ** (-4 * i / d_model)
        ),
        "the blocks couple feature i with feature i + d_model/2 (the 'all sines, then all cosines' layout); in the "
        "interleaved encoding pair i is features 2i (sin) and 2i + 1 (cos)": _shift(k, d_model, layout="halves"),
        "the angles are in degrees: torch.sin and torch.cos take radians, so use k * w_i as it is": _shift(
            k, d_model, angle_scale=torch.pi / 180
        ),
    }


def _shift_blocks_wrong(out: Tensor, expected: Tensor) -> str:
    """Which 2 x 2 blocks (pairs) differ, and whether anything lies off the block diagonal."""
    d = expected.shape[0]
    diff = (out.detach().double().cpu() - expected).abs() > 1e-4
    pairs = sorted({int(r) // 2 for r, c in torch.nonzero(diff).tolist() if int(r) // 2 == int(c) // 2})
    off = int(sum(1 for r, c in torch.nonzero(diff).tolist() if int(r) // 2 != int(c) // 2))
    parts = []
    if pairs:
        parts.append(f"the 2 x 2 blocks of pairs {pairs[:8]}{'...' if len(pairs) > 8 else ''} are wrong")
    if off:
        parts.append(f"{off} entries off the block diagonal are not 0 (M_k only couples features 2i and 2i + 1 of the same pair)")
    return "; ".join(parts) + f" (d_model = {d})"


@exercise("the shift matrix M_k")
def check_shift_matrix(shift_matrix) -> None:
    """Check ``shift_matrix(k, d_model)`` -> ``(d_model, d_model)`` with ``PE(p + k) = M_k @ PE(p)`` for every p."""
    for k, d_model in ((5, 16), (2, 6), (1, 4), (7, 12)):
        label = f"k={k}, d_model={d_model}"
        name = f"shift_matrix({k}, {d_model})"
        out = expect_tensor(call_attempt(shift_matrix, k, d_model, what=label), name)
        if not out.is_floating_point():
            raise ExerciseFailed(f"{name} has dtype {out.dtype}; return a floating-point matrix (float64 is best)")
        expected = _shift_reference(k, d_model)  # (d_model, d_model), float64
        got = tuple(out.shape)
        if got != (d_model, d_model):
            hints = {
                (d_model // 2, 2, 2): "you returned the d_model/2 blocks stacked; put them on the diagonal of one "
                "(d_model, d_model) matrix, e.g. torch.block_diag(*blocks)",
                (2, 2): "that is one 2 x 2 block; M_k holds one block per pair, d_model/2 of them on its diagonal",
                (d_model // 2, d_model // 2): "that has one row per pair; M_k acts on all d_model features, one 2 x 2 "
                "block per pair on its diagonal",
            }
            if got in hints:
                raise ExerciseFailed(f"{name} has shape {got}, expected {(d_model, d_model)}: {hints[got]}")
            if len(got) == 2 and got[1] == d_model:
                raise ExerciseFailed(
                    f"{name} has shape {got}: a table of encodings? Return the matrix M_k, (d_model, d_model), "
                    "such that M_k @ PE(p) = PE(p + k)"
                )
            expect_shape(out, (d_model, d_model), name)
        out_d = out.detach().double().cpu()
        if torch.allclose(out_d, torch.eye(d_model, dtype=torch.float64), atol=1e-6):
            raise ExerciseFailed(
                f"{name} is the identity matrix, which shifts by 0: pair i must turn by k w_i, with the block "
                "[[cos(k w_i), sin(k w_i)], [-sin(k w_i), cos(k w_i)]]"
            )
        try:
            expect_close(out, expected, name, atol=1e-9, rtol=1e-9, mistakes=_shift_mistakes(k, d_model), float32_path=True)
        except ExerciseFailed as err:
            if "differs from the reference" not in str(err):
                raise
            pe = _pe(12 + k, d_model)  # (12 + k, d_model)
            moved = (pe[:12] @ out_d.T - pe[k:]).abs().max().item()  # row p: M_k @ PE(p) - PE(p + k)
            where = _shift_blocks_wrong(out, expected)
            raise ExerciseFailed(
                f"{err}. {where[0].upper()}{where[1:]}; M_k @ PE(p) misses PE(p + k) by up to {moved:.3g}"
            ) from None


# ------------------------------------------------------------------ batch norm over (batch, tokens, features)


def _bn_over(x: Tensor, axes, eps: float, *, unbiased: bool = False, where: str = "inside", centre: bool = True) -> Tensor:
    mean = x.mean(axes, keepdim=True)
    var = x.var(axes, keepdim=True, unbiased=unbiased)
    num = x - mean if centre else x
    if where == "inside":
        return num / torch.sqrt(var + eps)
    if where == "outside":
        return num / (torch.sqrt(var) + eps)
    if where == "none":
        return num / torch.sqrt(var)
    return num / (var + eps)  # "variance": divided by the variance itself


def _bn_mistakes(x: Tensor, eps: float) -> dict[str, Tensor]:
    return {
        "each token was normalised over its own features (the last axis): that is layer norm. Batch norm gives each "
        "*feature* one mean and variance, over the batch and the tokens: x.mean(dim=(0, 1), keepdim=True)": _bn_over(x, -1, eps),
        "normalised over the batch only (axis 0), so each (token, feature) has its own statistics; batch norm pools the "
        "batch and the tokens, axes (0, 1), as nn.BatchNorm1d does on (batch, features, tokens)": _bn_over(x, 0, eps),
        "normalised over the tokens only (axis 1), so each sequence has its own statistics; batch norm pools the batch "
        "and the tokens, axes (0, 1)": _bn_over(x, 1, eps),
        "statistics per token over the batch and the features (axes 0 and 2): nn.BatchNorm1d reads axis 1 as the "
        "features (channels), so transpose x to (batch, features, tokens) first, and back afterwards": _bn_over(x, (0, 2), eps),
        "the whole tensor was normalised with one mean and one variance; batch norm has one per feature, over axes (0, 1)": (
            _bn_over(x, (0, 1, 2), eps)
        ),
        "the variance is unbiased (divides by N - 1); batch norm normalises with the biased variance, "
        "x.var(dim=(0, 1), unbiased=False)": _bn_over(x, (0, 1), eps, unbiased=True),
        "eps is added outside the square root; it belongs inside: (x - mean) / sqrt(var + eps)": _bn_over(
            x, (0, 1), eps, where="outside"
        ),
        "eps is missing: divide by sqrt(var + eps)": _bn_over(x, (0, 1), eps, where="none"),
        "the centred x is divided by the variance; divide by the standard deviation, sqrt(var + eps)": _bn_over(
            x, (0, 1), eps, where="variance"
        ),
        "the mean is not subtracted: (x - mean) / sqrt(var + eps)": _bn_over(x, (0, 1), eps, centre=False),
        "that is nn.BatchNorm1d in eval mode with fresh running statistics (mean 0, variance 1), so x comes back almost "
        "unchanged; in training mode batch norm uses the statistics of the batch it is given (call .train(), or compute "
        "the mean and variance over axes (0, 1))": x / math.sqrt(1 + eps),
        "the running statistics were used (nn.BatchNorm1d in eval mode after one training pass: running mean = 0.1 x the "
        "batch mean, running variance = 0.9 + 0.1 x its unbiased variance, momentum 0.1); normalise with the statistics "
        "of the batch itself, over axes (0, 1), as in training mode": (x - 0.1 * x.mean((0, 1), keepdim=True))
        / torch.sqrt(0.9 + 0.1 * x.var((0, 1), keepdim=True, unbiased=True) + eps),
    }


@exercise("batch norm over the batch and the tokens")
def check_batch_norm(batch_norm) -> None:
    """Check ``batch_norm(x, eps=1e-5)`` on ``(batch, tokens, features)`` against ``nn.BatchNorm1d(affine=False)``."""
    x = 2.0 * torch.randn(2, 3, 5, dtype=torch.float64) + torch.randn(5, dtype=torch.float64)  # (2, 3, 5)
    x_tiny = 0.003 * torch.randn(3, 2, 4, dtype=torch.float64)  # variance ~1e-5, as large as eps
    cases = [
        ("x (2, 3, 5) with the default eps", x, None),
        ("x (2, 3, 5) with eps=0.5", x, 0.5),
        ("x (4, 6, 3)", torch.randn(4, 6, 3, dtype=torch.float64) * 3 - 1, None),
        ("x (3, 2, 4) of tiny variance (~1e-5, as large as eps)", x_tiny, None),
        ("a float32 x (2, 3, 5)", x.float(), None),
    ]
    for label, xi, eps in cases:
        kwargs = {} if eps is None else {"eps": eps}
        e = 1e-5 if eps is None else eps
        name = f"batch_norm on {label}"
        try:
            out = expect_tensor(call_attempt(batch_norm, xi.clone(), what=label, **kwargs), name)
        except ExerciseFailed as err:
            message = str(err)
            if "running_mean should contain" in message or "expected input" in message.lower() and "channels" in message:
                raise ExerciseFailed(
                    f"{message.rstrip('.')}. nn.BatchNorm1d(C) wants the features on axis 1, (batch, features, tokens): "
                    "transpose x with x.transpose(1, 2), normalise, and transpose back"
                ) from None
            raise
        batch, n, d = xi.shape
        bn = nn.BatchNorm1d(d, affine=False, eps=e, dtype=torch.float64).train()
        with torch.no_grad():
            expected = bn(xi.double().transpose(1, 2)).transpose(1, 2)  # (batch, n, d)
        got = tuple(out.shape)
        if got != (batch, n, d):
            hints = {
                (batch, d, n): "that is nn.BatchNorm1d's layout (batch, features, tokens): transpose the result back to "
                "(batch, tokens, features)",
                (d,): "that is one number per feature (a statistic?); return the normalised x, same shape as x",
                (1, 1, d): "that is one number per feature (a statistic?); return the normalised x, same shape as x",
                (batch * n, d): "the batch and token axes were flattened into one; reshape the result back to x's shape",
            }
            if got in hints:
                raise ExerciseFailed(f"{name} has shape {got}, expected {(batch, n, d)}: {hints[got]}")
            expect_shape(out, (batch, n, d), name)
        mistakes = _bn_mistakes(xi.double(), e)
        if eps is not None:
            mistakes["the `eps` argument is ignored (the default 1e-5 was used): use the eps you are given"] = (
                _batch_norm_reference(xi.double(), 1e-5)
            )
        expect_close(out, expected, name, atol=1e-8, rtol=1e-6, mistakes=mistakes)
