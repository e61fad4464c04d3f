"""The checks of notebook 05: check_positional_encoding and check_layer_norm against typical wrong answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import helpers.blocks
from helpers.checks import check_batch_norm, check_layer_norm, check_positional_encoding, check_shift_matrix
from tests.conftest import assert_caught, assert_not_attempted

# ------------------------------------------------------------------ positional encoding


def pe_variant(
    max_len,
    d_model,
    *,
    sin_even=True,
    halves=False,
    first=0,
    exponent=None,
    base=10000.0,
    sign=-1.0,
    angle_scale=1.0,
    dtype=torch.float32,
):
    pos = torch.arange(first, first + max_len, dtype=torch.float64)[:, None]
    j = torch.arange(d_model, dtype=torch.float64)
    pair = j % (d_model // 2) if halves else j // 2
    e = 2 * pair / d_model if exponent is None else exponent(pair, j, d_model)
    angle = pos * base ** (sign * e) * angle_scale
    is_sin = (j < d_model // 2) if halves else (j % 2 == 0)
    if not sin_even:
        is_sin = ~is_sin
    return torch.where(is_sin, torch.sin(angle), torch.cos(angle)).to(dtype)


def pe_harvard(max_len, d_model):  # the Annotated Transformer's float32 version
    pe = torch.zeros(max_len, d_model)
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_log_base(log):
    def fn(max_len, d_model):
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(log(10000.0) / d_model))
        pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
        return pe

    return fn


def pe_integer_division(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            angle = pos / 10000 ** (i // d_model)
            pe[pos, i], pe[pos, i + 1] = math.sin(angle), math.cos(angle)
    return pe


PE_WRONG = {
    "swapped": (lambda n, d: pe_variant(n, d, sin_even=False), ["swapped"]),
    "halves": (lambda n, d: pe_variant(n, d, halves=True), ["halves are concatenated"]),
    "halves_cos_first": (lambda n, d: pe_variant(n, d, halves=True, sin_even=False), ["cosines come first"]),
    "own_index_odd": (lambda n, d: pe_variant(n, d, exponent=lambda p, j, d: j / d), ["own index"]),
    "feature_index": (lambda n, d: pe_variant(n, d, exponent=lambda p, j, d: 2 * j / d), ["feature index"]),
    "no_factor_2": (lambda n, d: pe_variant(n, d, exponent=lambda p, j, d: p / d), ["factor 2"]),
    "pair_from_1": (lambda n, d: pe_variant(n, d, exponent=lambda p, j, d: 2 * (p + 1) / d), ["pair index is counted from 1"]),
    "positions_from_1": (lambda n, d: pe_variant(n, d, first=1), ["positions are counted from 1"]),
    "multiplied": (lambda n, d: pe_variant(n, d, sign=1.0), ["multiplied"]),
    "integer_division": (pe_integer_division, ["integer division"]),
    "log10": (pe_log_base(math.log10), ["log10"]),
    "log2": (pe_log_base(math.log2), ["log2"]),
    "base_e": (lambda n, d: pe_variant(n, d, base=math.e), ["base is e"]),
    "base_1000": (lambda n, d: pe_variant(n, d, base=1000.0), ["1000"]),
    "degrees": (lambda n, d: pe_variant(n, d, angle_scale=math.pi / 180), ["degrees"]),
    "transposed": (lambda n, d: pe_variant(n, d).T, ["rows are positions"]),
    "batch_axis": (lambda n, d: pe_variant(n, d)[None], ["extra axis"]),
    "only_sines": (lambda n, d: pe_variant(n, d)[:, 0::2], ["only d_model/2"]),
    "numpy": (lambda n, d: pe_variant(n, d).numpy(), ["torch.Tensor", "ndarray"]),
    "integer_dtype": (lambda n, d: pe_variant(n, d).long(), ["dtype"]),
    "odd_features_wrong_phase": (
        lambda n, d: torch.where(torch.arange(d) % 2 == 1, -pe_variant(n, d), pe_variant(n, d)),
        ["odd features"],
    ),
    "last_row_wrong": (lambda n, d: torch.cat([pe_variant(n, d)[:-1], torch.zeros(1, d)]), ["positions", "largest difference"]),
}


def test_pe_reference_passes():
    assert check_positional_encoding(helpers.blocks.sinusoidal_positional_encoding) is True
    assert check_positional_encoding(pe_harvard) is True
    assert check_positional_encoding(lambda n, d: pe_variant(n, d, dtype=torch.float64)) is True


def test_pe_not_attempted(capsys):
    def stub(max_len, d_model):
        raise NotImplementedError

    assert_not_attempted(check_positional_encoding, stub, capsys)
    assert_not_attempted(check_positional_encoding, ..., capsys)


@pytest.mark.parametrize("name", PE_WRONG)
def test_pe_wrong_answers_caught(name):
    fn, phrases = PE_WRONG[name]
    assert_caught(check_positional_encoding, fn, *phrases)


# ------------------------------------------------------------------ layer norm


def ln_ok(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def ln_over(axes):
    def fn(x, gamma, beta, eps=1e-5):
        mean = x.mean(axes, keepdim=True)
        var = x.var(axes, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + eps) * gamma + beta

    return fn


def ln_no_keepdim(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1)
    return (x - mean) / torch.sqrt(x.var(-1, unbiased=False) + eps) * gamma + beta


LN_WRONG = {
    "unbiased": (
        lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * g + b,
        ["unbiased"],
    ),
    "torch_std": (
        lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) * g + b,
        ["torch.std", "outside"],
    ),
    "eps_outside": (
        lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) * g + b,
        ["outside the square root"],
    ),
    "no_eps": (
        lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / x.var(-1, keepdim=True, unbiased=False).sqrt() * g + b,
        ["eps is missing"],
    ),
    "no_mean": (
        lambda x, g, b, eps=1e-5: x / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * g + b,
        ["mean is not subtracted"],
    ),
    "axis0": (ln_over(0), ["normalised over axis 0", "batch norm"]),
    "axis1": (ln_over(1), ["normalised over axis 1"]),
    "axes01": (ln_over((0, 1)), ["axes 0 and 1"]),
    "whole_tensor": (
        lambda x, g, b, eps=1e-5: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * g + b,
        ["whole tensor"],
    ),
    "no_gamma_beta": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], eps=eps), ["gamma and beta are forgotten"]),
    "swapped": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], eps=eps) * b + g, ["swapped"]),
    "no_beta": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], eps=eps) * g, ["beta is forgotten"]),
    "no_gamma": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], eps=eps) + b, ["gamma is forgotten"]),
    "rms_stat": (
        lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * g + b,
        ["mean of x**2"],
    ),
    "rmsnorm": (lambda x, g, b, eps=1e-5: x / torch.sqrt((x**2).mean(-1, keepdim=True) + eps) * g, ["RMSNorm"]),
    "eps_ignored": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, 1e-5), ["eps` argument is ignored"]),
    "default_eps_1e-6": (lambda x, g, b, eps=1e-6: F.layer_norm(x, x.shape[-1:], g, b, eps), ["the default eps should be 1e-5"]),
    "eps_squared": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps**2), ["eps is missing"]),
    "eps_squared_explicit": (
        lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps**2 if eps != 1e-5 else eps),
        ["eps is squared"],
    ),
    "std_no_eps": (
        lambda x, g, b, eps=1e-5: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True) * g + b,
        ["torch.std", "eps is missing"],
    ),
    "other": (
        lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps) * 1.1,
        ["after undoing gamma and beta", "variance"],
    ),
    "no_keepdim": (ln_no_keepdim, ["keepdim=True"]),
    "returns_mean": (lambda x, g, b, eps=1e-5: x.mean(-1), ["one number per token"]),
    "numpy": (lambda x, g, b, eps=1e-5: np.asarray(ln_ok(x, g, b, eps)), ["torch.Tensor"]),
    "nan": (lambda x, g, b, eps=1e-5: ln_ok(x, g, b, eps) * float("nan"), ["NaN"]),
}


def test_layer_norm_reference_passes():
    assert check_layer_norm(helpers.blocks.layer_norm) is True
    assert check_layer_norm(ln_ok) is True
    assert check_layer_norm(lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps)) is True


def test_layer_norm_not_attempted(capsys):
    def stub(x, gamma, beta, eps=1e-5):
        raise NotImplementedError

    assert_not_attempted(check_layer_norm, stub, capsys)
    assert_not_attempted(check_layer_norm, ..., capsys)


@pytest.mark.parametrize("name", LN_WRONG)
def test_layer_norm_wrong_answers_caught(name):
    fn, phrases = LN_WRONG[name]
    assert_caught(check_layer_norm, fn, *phrases)


def ln_in_float32(x, gamma, beta, eps=1e-5):
    """Right, but computed in float32 whatever the input (a model's dtype): judged at float32's precision."""
    x = x.float()
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * gamma.float() + beta.float()


def test_layer_norm_in_float32_passes():
    assert check_layer_norm(ln_in_float32) is True


def test_layer_norm_message_shows_the_difference():
    # off by a relative 1e-7 in float64: the message must print enough digits for the two numbers to differ
    message = assert_caught(
        check_layer_norm, lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps) * (1 + 1e-5), "differs"
    )
    got, expected = message.split("you gave ")[1].split(", expected ")
    assert got.split()[0] != expected.split()[0], message
    assert "allowed:" in message and "float64" in message


def test_layer_norm_generator_stub_and_real_not_implemented(capsys):
    def stub(x, gamma, beta, eps=1e-5):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_layer_norm, stub, capsys)
    assert_caught(check_layer_norm, lambda x, g, b, eps=1e-5: torch.nn.ModuleList()(x), "not the exercise's stub")


# ------------------------------------------------------------------ issue 25: the likeliest mistakes the catalogues lacked


def pe_table(frequency=None, even=torch.sin, odd=torch.cos, rows=False, dtype=torch.float32):
    """The vectorised answer of the notebook, with one step replaceable."""

    def fn(max_len, d_model):
        pos = torch.arange(max_len, dtype=dtype)[:, None]
        two_i = torch.arange(0, d_model, 2, dtype=dtype)
        angle = pos * (frequency(two_i, d_model, max_len) if frequency else 10000 ** (-two_i / d_model))
        pe = torch.zeros(max_len, d_model, dtype=dtype)
        if rows:
            pe[0::2], pe[1::2] = even(angle), odd(angle)
        else:
            pe[:, 0::2], pe[:, 1::2] = even(angle), odd(angle)
        return pe

    return fn


def pe_loop_stepping_by_2(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):  # i is already 2i ...
            angle = pos / 10000 ** (2 * i / d_model)  # ... and doubled again
            pe[pos, i], pe[pos, i + 1] = math.sin(angle), math.cos(angle)
    return pe


PE_MORE_WRONG = {
    "exponent_without_parentheses": (pe_table(lambda t, d, n: 1 / 10000**t / d), ["lacks its parentheses"]),
    "loop_doubles_2i": (pe_loop_stepping_by_2, ["doubled twice", "i / d_model"]),
    "max_len_for_d_model": (pe_table(lambda t, d, n: 10000 ** (-t / n)), ["divided by max_len"]),
    "sines_on_odd_features": (pe_table(odd=torch.sin), ["odd features hold sines too"]),
    "cosines_on_even_features": (pe_table(even=torch.cos), ["even features hold cosines too"]),
    "rows_instead_of_columns": (pe_table(rows=True), ["pe[:, 0::2]", "pe[0::2] would select the even positions"]),
}


@pytest.mark.parametrize("name", PE_MORE_WRONG)
def test_pe_likeliest_wrong_answers_caught(name):
    fn, phrases = PE_MORE_WRONG[name]
    assert_caught(check_positional_encoding, fn, *phrases)


def pe_loop(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe


def pe_stacked(max_len, d_model):
    angle = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(d_model // 2) / (d_model // 2))
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (max_len, d_model/2, 2) -> interleaved


PE_RIGHT = {
    "loop": pe_loop,
    "stack_and_flatten": pe_stacked,
    "cos_as_shifted_sin": pe_table(odd=lambda a: torch.sin(a + math.pi / 2)),
    "torch_pow": pe_table(lambda t, d, n: torch.pow(10000.0, -t / d)),
    "float64": pe_table(dtype=torch.float64),
}


@pytest.mark.parametrize("name", PE_RIGHT)
def test_pe_other_right_answers_pass(name):
    assert check_positional_encoding(PE_RIGHT[name]) is True


def _mean(x):
    return x.mean(-1, keepdim=True)


def _var(x):
    return x.var(-1, keepdim=True, unbiased=False)


LN_MORE_WRONG = {
    "divided_by_variance": (lambda x, g, b, eps=1e-5: (x - _mean(x)) / (_var(x) + eps) * g + b, ["divided by the variance"]),
    "eps_after_division": (
        lambda x, g, b, eps=1e-5: ((x - _mean(x)) / torch.sqrt(_var(x)) + eps) * g + b,
        ["eps is added after the division"],
    ),
    "gamma_beta_first": (
        lambda x, g, b, eps=1e-5: F.layer_norm(x * g + b, x.shape[-1:], eps=eps),
        ["applied before normalising"],
    ),
    "l2_normalize": (lambda x, g, b, eps=1e-5: F.normalize(x - _mean(x), dim=-1) * g + b, ["L2 norm", "F.normalize"]),
    "eps_in_numerator": (
        lambda x, g, b, eps=1e-5: (x - _mean(x) + eps) / torch.sqrt(_var(x) + eps) * g + b,
        ["numerator too"],
    ),
    "last_two_axes": (lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[1:], eps=eps) * g + b, ["last two axes"]),
    "float32_and_back": (
        lambda x, g, b, eps=1e-5: F.layer_norm(x.float(), x.shape[-1:], g.float(), b.float(), eps).to(x.dtype),
        ["precision problem", "float32"],
    ),
}


@pytest.mark.parametrize("name", LN_MORE_WRONG)
def test_layer_norm_likeliest_wrong_answers_caught(name):
    fn, phrases = LN_MORE_WRONG[name]
    message = assert_caught(check_layer_norm, fn, *phrases)
    assert "differs from the reference in" not in message


LN_RIGHT = {
    "rsqrt": lambda x, g, b, eps=1e-5: (x - _mean(x)) * torch.rsqrt(_var(x) + eps) * g + b,
    "correction_0": lambda x, g, b, eps=1e-5: (x - _mean(x)) / torch.sqrt(x.var(-1, keepdim=True, correction=0) + eps) * g + b,
    "E[x^2] - E[x]^2": lambda x, g, b, eps=1e-5: (
        (x - _mean(x)) / torch.sqrt((x**2).mean(-1, keepdim=True) - _mean(x) ** 2 + eps) * g + b
    ),
    "var_mean": lambda x, g, b, eps=1e-5: (lambda vm: (x - vm[1]) / torch.sqrt(vm[0] + eps) * g + b)(
        torch.var_mean(x, -1, keepdim=True, unbiased=False)
    ),
    "fresh_module_then_affine": lambda x, g, b, eps=1e-5: torch.nn.LayerNorm(x.shape[-1], eps=eps, dtype=x.dtype)(x) * g + b,
}


@pytest.mark.parametrize("name", LN_RIGHT)
def test_layer_norm_other_right_answers_pass(name):
    assert check_layer_norm(LN_RIGHT[name]) is True


# ------------------------------------------------------------------ exercise 5.3: the shift matrix M_k


def omegas(d_model, dtype=torch.float64):
    return 10000 ** (-torch.arange(0, d_model, 2, dtype=dtype) / d_model)  # (d_model/2,)


def shift_blocks(pattern=lambda c, s: [[c, s], [-s, c]], angle=lambda k, w: k * w, freq=omegas, dtype=torch.float64):
    """The block_diag answer, with one step replaceable."""

    def fn(k, d_model):
        w = freq(d_model)
        blocks = [torch.tensor(pattern(math.cos(a), math.sin(a)), dtype=dtype) for a in angle(k, w).tolist()]
        return torch.block_diag(*blocks)

    return fn


def shift_indexed(k, d_model):  # the notebook's answer: fill the four diagonals of the blocks by index
    w = omegas(d_model)
    idx = torch.arange(0, d_model, 2)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[idx, idx], M[idx, idx + 1] = torch.cos(k * w), torch.sin(k * w)
    M[idx + 1, idx], M[idx + 1, idx + 1] = -torch.sin(k * w), torch.cos(k * w)
    return M


def shift_halves(k, d_model):
    w, h = omegas(d_model), d_model // 2
    i = torch.arange(h)
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    M[i, i], M[i, i + h], M[i + h, i], M[i + h, i + h] = torch.cos(k * w), torch.sin(k * w), -torch.sin(k * w), torch.cos(k * w)
    return M


SHIFT_WRONG = {
    "transposed": (shift_blocks(lambda c, s: [[c, -s], [s, c]]), ["transpose", "PE(p + k) to PE(p)"]),
    "row_vector_form": (lambda k, d: shift_indexed(k, d).T, ["transpose", "row-vector form"]),
    "cos_sin_swapped": (shift_blocks(lambda c, s: [[s, c], [-c, s]]), ["cos and sin are swapped"]),
    "no_off_diagonal": (shift_blocks(lambda c, s: [[c, 0.0], [0.0, c]]), ["off-diagonal entries are missing"]),
    "same_sign": (shift_blocks(lambda c, s: [[c, s], [s, c]]), ["same sign"]),
    "k_ignored": (shift_blocks(angle=lambda k, w: w), ["shift k is not used"]),
    "no_frequencies": (shift_blocks(angle=lambda k, w: k * torch.ones_like(w)), ["turns by k radians"]),
    "exponent_without_2": (
        shift_blocks(freq=lambda d: 10000 ** (-torch.arange(d // 2, dtype=torch.float64) / d)),
        ["factor 2"],
    ),
    "feature_index_doubled": (
        shift_blocks(freq=lambda d: 10000 ** (-2 * torch.arange(0, d, 2, dtype=torch.float64) / d)),
        ["doubled twice"],
    ),
    "halves_layout": (shift_halves, ["i + d_model/2", "interleaved"]),
    "degrees": (shift_blocks(angle=lambda k, w: k * w * math.pi / 180), ["degrees"]),
    "identity": (lambda k, d: torch.eye(d, dtype=torch.float64), ["identity"]),
    "blocks_stacked": (lambda k, d: torch.stack([torch.tensor([[1.0, 0.0], [0.0, 1.0]])] * (d // 2)), ["stacked", "block_diag"]),
    "one_block": (lambda k, d: torch.eye(2), ["one 2 x 2 block"]),
    "shifted_table": (
        lambda k, d: helpers.blocks.sinusoidal_positional_encoding(10 + k, d)[k:],
        ["table of encodings", "M_k @ PE(p)"],
    ),
    "integer_matrix": (lambda k, d: torch.eye(d, dtype=torch.long), ["dtype"]),
    "float32_and_back": (lambda k, d: shift_indexed(k, d).float().double(), ["precision problem"]),
    "float32_frequencies_in_float64": (  # the frequencies from a float32 arange, the matrix in float64
        shift_blocks(freq=lambda d: (10000 ** (-torch.arange(0, d, 2) / d)).double()),
        ["precision problem", "dtype=x.dtype"],
    ),
    "one_pair_wrong": (
        lambda k, d: shift_indexed(k, d).index_put_(
            (torch.tensor([2]), torch.tensor([3])), torch.tensor(0.0, dtype=torch.float64)
        ),
        ["blocks of pairs [1]", "misses PE(p + k)"],
    ),
    "not_a_tensor": (lambda k, d: shift_indexed(k, d).tolist(), ["tensor"]),
}


def test_shift_reference_passes():
    assert check_shift_matrix(helpers.blocks.shift_matrix) is True


def test_shift_not_attempted(capsys):
    def stub(k, d_model):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_shift_matrix, stub, capsys)
    assert_not_attempted(check_shift_matrix, ..., capsys)


@pytest.mark.parametrize("name", SHIFT_WRONG)
def test_shift_wrong_answers_caught(name):
    fn, phrases = SHIFT_WRONG[name]
    message = assert_caught(check_shift_matrix, fn, *phrases)
    if name not in ("one_pair_wrong",):
        assert "differs from the reference in" not in message, message


def shift_power(k, d_model):  # M_1 multiplied k times: M_k = M_1^k
    return torch.linalg.matrix_power(shift_indexed(1, d_model), k)


def shift_loops(k, d_model):
    M = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        a = k / 10000 ** (2 * i / d_model)
        M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = math.cos(a), math.sin(a)
        M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -math.sin(a), math.cos(a)
    return M


SHIFT_RIGHT = {
    "indexed": shift_indexed,
    "block_diag": shift_blocks(),
    "loops": shift_loops,
    "matrix_power_of_M_1": shift_power,
    "float32": shift_blocks(dtype=torch.float32),
    "exp_log": shift_blocks(freq=lambda d: torch.exp(-torch.arange(0, d, 2, dtype=torch.float64) * math.log(10000.0) / d)),
}


@pytest.mark.parametrize("name", SHIFT_RIGHT)
def test_shift_other_right_answers_pass(name):
    assert check_shift_matrix(SHIFT_RIGHT[name]) is True


# ------------------------------------------------------------------ exercise 5.4: batch norm over (batch, tokens, features)


def bn_axes(axes, unbiased=False):
    def fn(x, eps=1e-5):
        return (x - x.mean(axes, keepdim=True)) / torch.sqrt(x.var(axes, keepdim=True, unbiased=unbiased) + eps)

    return fn


def bn_module(train=True, transpose=True):
    def fn(x, eps=1e-5):
        module = torch.nn.BatchNorm1d(x.shape[-1], affine=False, eps=eps, dtype=x.dtype).train(train)
        return module(x.transpose(1, 2)).transpose(1, 2) if transpose else module(x.transpose(1, 2))

    return fn


def _m01(x):
    return x.mean((0, 1), keepdim=True)


def _v01(x):
    return x.var((0, 1), keepdim=True, unbiased=False)


BN_WRONG = {
    "layer_norm": (bn_axes(-1), ["that is layer norm"]),
    "batch_only": (bn_axes(0), ["batch only"]),
    "tokens_only": (bn_axes(1), ["tokens only"]),
    "no_transpose": (bn_axes((0, 2)), ["axes 0 and 2", "transpose"]),
    "whole_tensor": (bn_axes((0, 1, 2)), ["whole tensor"]),
    "unbiased": (bn_axes((0, 1), unbiased=True), ["unbiased"]),
    "eps_outside": (lambda x, eps=1e-5: (x - _m01(x)) / (_v01(x).sqrt() + eps), ["outside the square root"]),
    "no_eps": (lambda x, eps=1e-5: (x - _m01(x)) / _v01(x).sqrt(), ["eps is missing"]),
    "divided_by_variance": (lambda x, eps=1e-5: (x - _m01(x)) / (_v01(x) + eps), ["divided by the variance"]),
    "no_mean": (lambda x, eps=1e-5: x / torch.sqrt(_v01(x) + eps), ["mean is not subtracted"]),
    "eval_mode": (bn_module(train=False), ["eval mode", "training mode"]),
    "left_in_module_layout": (bn_module(transpose=False), ["(batch, features, tokens)", "transpose the result back"]),
    "returns_the_mean": (lambda x, eps=1e-5: x.mean((0, 1)), ["one number per feature"]),
    "eps_ignored": (lambda x, eps=1e-5: helpers.blocks.batch_norm(x), ["`eps` argument is ignored"]),
    "module_without_transpose": (
        lambda x, eps=1e-5: torch.nn.BatchNorm1d(x.shape[-1], affine=False, dtype=x.dtype)(x),
        ["nn.BatchNorm1d(C) wants the features on axis 1"],
    ),
    "float32_and_back": (lambda x, eps=1e-5: helpers.blocks.batch_norm(x.float(), eps).to(x.dtype), ["precision problem"]),
    "in_place": (lambda x, eps=1e-5: x.sub_(_m01(x)).div_(torch.sqrt(_v01(x) + eps)), ["in place"]),
}


def test_batch_norm_reference_passes():
    assert check_batch_norm(helpers.blocks.batch_norm) is True


def test_batch_norm_not_attempted(capsys):
    def stub(x, eps=1e-5):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_batch_norm, stub, capsys)
    assert_not_attempted(check_batch_norm, ..., capsys)


@pytest.mark.parametrize("name", BN_WRONG)
def test_batch_norm_wrong_answers_caught(name):
    fn, phrases = BN_WRONG[name]
    message = assert_caught(check_batch_norm, fn, *phrases)
    assert "differs from the reference in" not in message, message


BN_RIGHT = {
    "module_in_training_mode": bn_module(),
    "functional": lambda x, eps=1e-5: F.batch_norm(x.transpose(1, 2), None, None, training=True, eps=eps).transpose(1, 2),
    "flattened_tokens": lambda x, eps=1e-5: (
        lambda f: ((f - f.mean(0)) / torch.sqrt(f.var(0, unbiased=False) + eps)).reshape(x.shape)
    )(x.flatten(0, 1)),
    "var_mean": lambda x, eps=1e-5: (lambda vm: (x - vm[1]) * torch.rsqrt(vm[0] + eps))(
        torch.var_mean(x, dim=(0, 1), keepdim=True, correction=0)
    ),
    "E[x^2] - E[x]^2": lambda x, eps=1e-5: (x - _m01(x)) / torch.sqrt((x**2).mean((0, 1), keepdim=True) - _m01(x) ** 2 + eps),
}


@pytest.mark.parametrize("name", BN_RIGHT)
def test_batch_norm_other_right_answers_pass(name):
    assert check_batch_norm(BN_RIGHT[name]) is True


# ------------------------------------------------------------------ issue 36: partial work is an attempt, not "not attempted"


def pe_partial(max_len, d_model):
    if d_model % 4:
        raise NotImplementedError  # an unfinished branch; the rest is written
    return helpers.blocks.sinusoidal_positional_encoding(max_len, d_model)


def shift_partial(k, d_model):
    if k > 3:
        raise NotImplementedError
    return helpers.blocks.shift_matrix(k, d_model)


def ln_partial(x, gamma, beta, eps=1e-5):
    if x.dim() != 3:
        raise NotImplementedError
    return F.layer_norm(x, x.shape[-1:], gamma, beta, eps)


def bn_partial(x, eps=1e-5):
    if eps != 1e-5:
        raise NotImplementedError
    return helpers.blocks.batch_norm(x, eps)


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_positional_encoding, pe_partial),
        (check_shift_matrix, shift_partial),
        (check_layer_norm, ln_partial),
        (check_batch_norm, bn_partial),
    ],
    ids=["pe", "shift", "layer_norm", "batch_norm"],
)
def test_an_unfinished_branch_is_named_not_called_unattempted(check, answer):
    assert_caught(check, answer, "unfinished branch")


# ------------------------------------------------------------------ catalogue of 2026-11-27: more slips, more right answers


def pe_one_frequency(max_len, d_model):  # the exponent does not grow with the pair index
    angle = torch.arange(max_len, dtype=torch.float64)[:, None] / 10000 ** (2 / d_model) * torch.ones(d_model // 2)
    return torch.stack([angle.sin(), angle.cos()], -1).flatten(1)


def pe_work_above_the_stub(max_len, d_model):
    position = torch.arange(max_len)[:, None]  # noqa: F841 - real work above the stub's raise
    raise NotImplementedError("Exercise: replace this line with your code")


def shift_work_above_the_stub(k, d_model):
    omegas = 10000 ** (-torch.arange(0, d_model, 2) / d_model)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def ln_work_above_the_stub(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def ln_e_x2_minus_mean2_eps_outside(x, gamma, beta, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    return (x - m) / (((x * x).mean(-1, keepdim=True) - m * m).sqrt() + eps) * gamma + beta


def bn_running_statistics(x, eps=1e-5):  # one training pass, then eval: the running statistics
    bn = torch.nn.BatchNorm1d(x.shape[-1], affine=False, eps=eps, dtype=x.dtype)
    bn(x.transpose(1, 2))
    return bn.eval()(x.transpose(1, 2)).transpose(1, 2)


def bn_work_above_the_stub(x, eps=1e-5):
    mean = x.mean(dim=(0, 1), keepdim=True)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


@pytest.mark.parametrize(
    "check, answer, phrase",
    [
        (check_positional_encoding, pe_one_frequency, "every sin/cos pair has the same frequency"),
        (check_positional_encoding, pe_work_above_the_stub, "partial work"),
        (check_shift_matrix, shift_work_above_the_stub, "partial work"),
        (check_layer_norm, ln_work_above_the_stub, "partial work"),
        (check_layer_norm, ln_e_x2_minus_mean2_eps_outside, "eps is added outside the square root"),
        (check_batch_norm, bn_running_statistics, "the running statistics were used"),
        (check_batch_norm, bn_work_above_the_stub, "partial work"),
    ],
)
def test_catalogue_more_wrong_answers_named(check, answer, phrase):
    assert_caught(check, answer, phrase)


def pe_exp_log_float32(max_len, d_model):
    pos = torch.arange(max_len).float().unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


def pe_python_loops(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for p in range(max_len):
        for i in range(d_model // 2):
            pe[p, 2 * i], pe[p, 2 * i + 1] = math.sin(p / 10000 ** (2 * i / d_model)), math.cos(p / 10000 ** (2 * i / d_model))
    return pe


def shift_block_diag(k, d_model):
    w = 10000 ** (-2 * torch.arange(d_model // 2, dtype=torch.float64) / d_model)
    c, s = torch.cos(k * w), torch.sin(k * w)
    return torch.block_diag(*[torch.stack([torch.stack([ci, si]), torch.stack([-si, ci])]) for ci, si in zip(c, s, strict=True)])


def ln_var_mean_rsqrt(x, gamma, beta, eps=1e-5):
    v, m = torch.var_mean(x, -1, keepdim=True, correction=0)
    return (x - m) * torch.rsqrt(v + eps) * gamma + beta


def bn_functional_training(x, eps=1e-5):
    return F.batch_norm(x.transpose(1, 2), None, None, training=True, eps=eps).transpose(1, 2)


def bn_flattened(x, eps=1e-5):
    f = x.reshape(-1, x.shape[-1])
    m = f.mean(0)
    return (x - m) / (((f - m) ** 2).mean(0) + eps).sqrt()


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_positional_encoding, pe_exp_log_float32),
        (check_positional_encoding, pe_python_loops),
        (check_shift_matrix, shift_block_diag),
        (check_shift_matrix, lambda k, d: shift_block_diag(k, d).float()),
        (check_layer_norm, ln_var_mean_rsqrt),
        (check_layer_norm, lambda x, g, b, eps=1e-5: F.layer_norm(x, x.shape[-1:], g, b, eps)),
        (check_batch_norm, bn_functional_training),
        (check_batch_norm, bn_flattened),
    ],
)
def test_catalogue_more_right_answers_pass(check, answer):
    assert check(answer) is True
