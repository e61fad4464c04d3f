"""The checks of notebook 05: check_positional_encoding and check_layer_norm against typical wrong answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import helpers.blocks
from helpers.checks import check_layer_norm, check_positional_encoding
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
