"""The contract every check shares (helpers.checks._core): what counts as "not attempted", shortcuts, messages."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

import helpers.checks as checks
from helpers.blocks import EncoderBlock
from helpers.checks._core import (
    ExerciseFailed,
    ShortcutUsed,
    _digits_to_show,
    call,
    expect_close,
    expect_tensor,
    forbid_forward,
    is_stub_error,
)
from tests.conftest import assert_caught, assert_not_attempted

# every check that takes one function or class (the value checks take shapes and numbers)
FUNCTION_CHECKS = [
    "check_softmax",
    "check_scaled_dot_product_attention",
    "check_causal_mask",
    "check_multi_head_attention",
    "check_split_heads",
    "check_merge_heads",
    "check_positional_encoding",
    "check_layer_norm",
    "check_encoder_block_forward",
    "check_decoder_block_forward",
    "check_pre_ln_encoder_block_forward",
    "check_patch_embedding",
    "check_classifier_forward",
    "check_train_step",
    "check_patchify",
    "check_image_patch_embedding",
    "check_vit_forward",
    "check_projections",
    "check_scores",
    "check_attention_column_layout",
    "check_hard_attention_beta",
    "check_permutation_projections",
    "check_conv_head_weights",
]


def _generator_stub(*args, **kwargs):
    raise NotImplementedError("Exercise: replace this line with your code")


def _bare_stub(*args, **kwargs):
    raise NotImplementedError


def _calls_a_module_list(*args, **kwargs):
    return nn.ModuleList([nn.Identity()])(args[0])  # PyTorch's own NotImplementedError: a real attempt


def _own_not_implemented(*args, **kwargs):
    raise NotImplementedError("dim=None is not supported")  # the student's own message: a real attempt


@pytest.mark.parametrize("name", FUNCTION_CHECKS)
def test_only_the_stub_is_not_attempted(name, capsys):
    check = getattr(checks, name)
    assert_not_attempted(check, ..., capsys)
    assert_not_attempted(check, _generator_stub, capsys)
    assert_not_attempted(check, _bare_stub, capsys)
    message = assert_caught(check, _calls_a_module_list, "NotImplementedError", "not the exercise's stub", "loop over it")
    assert "not attempted" not in message
    assert_caught(check, _own_not_implemented, "not the exercise's stub", "dim=None is not supported")


def test_is_stub_error():
    assert is_stub_error(NotImplementedError("Exercise: replace this line with your code"))
    assert is_stub_error(NotImplementedError())
    assert not is_stub_error(NotImplementedError('Module [ModuleList] is missing the required "forward" function'))
    try:
        nn.ModuleList()(torch.zeros(1))
    except NotImplementedError as err:
        assert not is_stub_error(err)
    assert not is_stub_error(ValueError("Exercise"))


def test_forbid_forward_catches_only_that_instance_and_restores_the_class():
    block, other = EncoderBlock(8, 2, 16).eval(), EncoderBlock(8, 2, 16).eval()
    x = torch.randn(1, 3, 8)
    original = EncoderBlock.forward
    with pytest.raises(ShortcutUsed):
        with forbid_forward(block, "write the steps"):
            block(x)
    with forbid_forward(block, "write the steps"):
        other(x)  # another block of the same class is fine
        block.self_attn(x, x, x)  # and so are the block's parts
        block.norm1(x)
    with pytest.raises(ShortcutUsed):  # swallowed inside the student's code: still caught afterwards
        with forbid_forward(block, "write the steps"):
            try:
                EncoderBlock.forward(block, x)
            except Exception:
                pass
    assert EncoderBlock.forward is original
    assert block(x).shape == (1, 3, 8)


def test_forbid_forward_on_a_class_that_inherits_forward():
    class Child(nn.Linear):
        pass

    child = Child(2, 2)
    with pytest.raises(ShortcutUsed):
        with forbid_forward(child, "no"):
            child(torch.zeros(1, 2))
    assert "forward" not in Child.__dict__
    assert child(torch.zeros(1, 2)).shape == (1, 2)


def test_messages_print_enough_digits_to_differ():
    assert _digits_to_show(-0.8207271, -0.8207274) >= 8
    assert _digits_to_show(1.0, 2.0) == 6
    with pytest.raises(ExerciseFailed) as info:
        expect_close(
            torch.tensor([-0.82072712], dtype=torch.float64),
            torch.tensor([-0.82072745], dtype=torch.float64),
            "x",
            atol=1e-9,
            rtol=1e-8,
        )
    got, expected = str(info.value).split("you gave ")[1].split(", expected ")
    assert got != expected.split()[0]


def test_tolerance_follows_the_dtype():
    expected = torch.tensor([-0.820727123456], dtype=torch.float64)
    # a float32 answer is judged at float32's precision ...
    assert expect_close(expected.float(), expected, "x", atol=1e-10, rtol=1e-10) is not None
    # ... a float64 one at the tolerance asked
    with pytest.raises(ExerciseFailed, match="allowed: 1e-10"):
        expect_close(expected + 1e-8, expected, "x", atol=1e-10, rtol=1e-10)


def test_every_check_is_exported():
    assert "check_pre_ln_encoder_block_forward" in checks.__all__


# In a notebook (not the tests, which call raise_failures(True) in tests/conftest.py) a wrong answer never stops Run All.


@pytest.fixture
def notebook_mode(monkeypatch):
    """A learner's session: wrong answers are shown, not raised; nbgrader is not running."""
    monkeypatch.delenv("COURSE_CHECKS_RAISE", raising=False)
    monkeypatch.delenv("COURSE_GRADING", raising=False)
    checks.raise_failures(False)
    yield
    checks.raise_failures(True)


def _wrong_softmax(x, dim=-1):
    return torch.softmax(x, dim=0)


def test_in_a_notebook_a_wrong_answer_is_shown_and_the_check_returns_false(notebook_mode, capsys):
    assert checks.check_softmax(_wrong_softmax) is False
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "❌ ExerciseFailed" in captured.err and "softmax" in captured.err and "axis" in captured.err  # the named mistake
    assert checks.check_softmax.outcome.startswith("wrong: ")


def test_the_fallback_says_which_implementation_runs(capsys):
    reference = checks.choose(False, _wrong_softmax, torch.softmax, name="torch.softmax")
    assert reference is torch.softmax
    assert "use the reference `torch.softmax` until your answer passes" in capsys.readouterr().out
    mine = checks.choose(True, _wrong_softmax, torch.softmax)
    assert mine is _wrong_softmax
    assert "use your `_wrong_softmax` (it passed its check)" in capsys.readouterr().out


def test_summary_lists_every_exercise_with_what_it_said_last(notebook_mode, capsys):
    from helpers.checks import _core

    saved = dict(_core._OUTCOMES)
    _core._OUTCOMES.clear()
    try:
        checks.check_softmax(_wrong_softmax)
        checks.check_causal_mask(...)
        checks.check_scaled_dot_product_attention(lambda q, k, v, mask=None: 1 / 0)
        checks.check_softmax(lambda x, dim=-1: torch.softmax(x, dim=dim))  # fixed later: the last verdict counts
        capsys.readouterr()
        with checks.unrecorded():  # a demonstration leaves the verdicts as they were
            checks.check_causal_mask(lambda n: torch.ones(n, n, dtype=torch.bool))
        capsys.readouterr()
        checks.summary()
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == "Exercises: 1 of 3 correct, 1 wrong, 1 not attempted."
        assert lines[1].startswith("  ❌ scaled dot-product attention: wrong: ") and "ZeroDivisionError" in lines[1]
        assert lines[2].startswith("  ⏳ causal mask") and "not attempted" in lines[2]
        assert len(lines) == 3  # the correct one is counted, not listed
        _core._OUTCOMES.clear()
        checks.check_softmax(lambda x, dim=-1: torch.softmax(x, dim=dim))
        capsys.readouterr()
        checks.summary()
        assert capsys.readouterr().out == "✅ The exercise is correct.\n"
    finally:
        _core._OUTCOMES.clear()
        _core._OUTCOMES.update(saved)


def test_under_nbgrader_blank_and_wrong_answers_raise(monkeypatch):
    monkeypatch.setenv("COURSE_GRADING", "1")  # nbgrader_config.py sets it; `nbgrader validate` then fails a blank
    checks.raise_failures(False)
    try:
        with pytest.raises(ExerciseFailed, match="not attempted yet"):
            checks.check_softmax(...)
        with pytest.raises(ExerciseFailed, match="axis"):
            checks.check_softmax(_wrong_softmax)
        assert checks.check_softmax(lambda x, dim=-1: torch.softmax(x, dim=dim)) is True
    finally:
        checks.raise_failures(True)


# ---------------------------------------------------------------- issue 25: general hints every check benefits from


def _raises(exc):
    def fn(x):
        raise exc

    return fn


@pytest.mark.parametrize(
    "fn, phrase",
    [
        (lambda x: math.exp(x), "torch.exp"),
        (lambda x: torch.sqrt(5), "math.sqrt(d_k) or d_k ** 0.5"),
        (lambda x: x.transpose(0, 1).view(-1), ".contiguous().view"),
        (lambda x: x.view(2, 64), "instead of hard-coding"),
        (lambda x: x.unflatten(-1, (3, 64)), "instead of hard-coding"),
        (lambda x: x.view(x.shape[0], x.shape[1] / 2, 2), "integer division"),
        (lambda x: x[:, 1.0:2.0], "integer division"),
        (lambda x: x + (x, None), "One operand is a tuple"),
        (lambda x: x @ torch.ones(4, 2), "float32 and float64 tensors are mixed"),
        (lambda x: x.dot(x), "Tensor.dot is the dot product of two 1-D"),
        (lambda x: torch.mm(x[None], x.T[None]), "torch.mm takes 2-D matrices only"),
        (lambda x: torch.from_numpy(x), "torch.from_numpy takes numpy arrays only"),
        (lambda x: None + x, "A value is None"),
        (_raises(RuntimeError("Trying to backward through the graph a second time")), "ran twice"),
        (_raises(RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")), "torch.no_grad()"),
        (_raises(AttributeError("'float' object has no attribute 'backward'")), ".item() was taken first"),
    ],
)
def test_a_failed_call_names_the_cause_its_error_message_hides(fn, phrase):
    x = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(ExerciseFailed) as info:
        call(fn, x, what="x")
    message = str(info.value)
    assert phrase in message, message
    assert ".." not in message.replace("...", ""), message  # the hint follows the error's own full stop once


def test_the_values_hint_also_comes_from_the_failing_codes_variables():
    def holds_a_pair(x):
        top = x.max(-1, keepdim=True)  # noqa: F841 (the pair sits in a variable when the error comes)
        raise TypeError("bad operand")  # a type error whose text does not show the pair

    def uses_the_pair_right_but_forgets_keepdim(x):
        top = x.max(-1)
        return x - top.values  # a shape error: the pair is not to blame

    x = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(ExerciseFailed, match=r"\.values"):
        call(holds_a_pair, x)
    with pytest.raises(ExerciseFailed) as info:
        call(uses_the_pair_right_but_forgets_keepdim, x)
    assert ".values" not in str(info.value)


@pytest.mark.parametrize(
    "value, phrase",
    [
        (torch.randn(3).max(0), "take `.values`, or use x.amax(dim)"),
        (torch.randn(3).topk(2), "x.topk(...) returns a pair (values, indices)"),
        (None, "without a `return` gives None"),
        ((torch.zeros(2), torch.zeros(2)), "of 2 tensors (Tensor, Tensor): return one tensor"),
        ([1.0, 2.0], "(float, float): return one tensor"),
        (np.zeros(3), "torch.from_numpy"),
    ],
)
def test_a_value_that_is_not_a_tensor_says_how_to_make_it_one(value, phrase):
    with pytest.raises(ExerciseFailed) as info:
        expect_tensor(value, "the answer")
    assert phrase in str(info.value)


def test_float32_rounding_in_a_float64_answer_is_named_as_a_precision_problem():
    expected = torch.randn(4, 5, dtype=torch.float64)
    computed_in_float32 = expected.float().double() * (1 + 1e-7)  # float32 work, converted back
    with pytest.raises(ExerciseFailed, match="precision problem, not a wrong formula"):
        expect_close(computed_in_float32.float().double(), expected, "x", atol=1e-10, rtol=1e-10)
    # a genuine float64 answer off by as much is a plain difference, not a precision problem
    with pytest.raises(ExerciseFailed) as info:
        expect_close(expected * (1 + 1e-7), expected, "x", atol=1e-10, rtol=1e-10)
    assert "precision problem" not in str(info.value)
    # float32 rounding and a real mistake: the difference is reported, with a note on the rounding
    with pytest.raises(ExerciseFailed) as info:
        expect_close((2 * expected).float().double(), expected, "x", atol=1e-10, rtol=1e-10)
    assert "differs from the reference" in str(info.value) and "rounded to float32" in str(info.value)
    # a float32 answer is judged at float32's precision, as before
    assert expect_close(expected.float(), expected, "x", atol=1e-10, rtol=1e-10) is not None


def test_a_check_cell_run_again_after_the_fallback_does_not_check_the_reference(notebook_mode, capsys):
    """`if not check(x): x = use_reference(ref)`, run twice: the second run must not call the reference "correct"."""
    import helpers.attention

    softmax = _wrong_softmax
    for _ in range(2):  # the learner runs the check cell, then runs it again without re-running the exercise cell
        if not checks.check_softmax(softmax):
            softmax = checks.use_reference(helpers.attention.softmax)
    out = capsys.readouterr().out
    assert "✅" not in out and "this is still the course's reference" in out and "Run your exercise cell again" in out
    assert checks.check_softmax.outcome.startswith("wrong: ")  # the learner's last verdict stands
    shift = checks.choose(False, ..., helpers.attention.split_heads, name="split_heads")  # choose's fallback alike
    assert checks.check_split_heads(shift) is False and "still the course's reference" in capsys.readouterr().out
    assert checks.check_softmax(lambda x, dim=-1: torch.softmax(x, dim=dim)) is True  # a fixed answer is checked again


def test_a_check_with_a_fallback_returns_what_the_cells_below_use_in_one_line(notebook_mode, capsys):
    import helpers.attention

    right = lambda x, dim=-1: torch.softmax(x, dim=dim)  # noqa: E731
    with checks.unrecorded():
        assert checks.check_softmax(right, fallback=helpers.attention.softmax) is right
        assert capsys.readouterr().out == "✅ softmax: correct; the cells below use yours.\n"
        assert checks.check_softmax.passed is True
        assert checks.check_softmax(..., fallback=helpers.attention.softmax) is helpers.attention.softmax
        out = capsys.readouterr().out
        assert out.startswith("⏳ softmax: not attempted yet") and out.count("\n") == 1
        assert out.endswith("; the cells below use the course's `helpers.attention.softmax`.\n")
        assert checks.check_softmax.passed is False
        assert checks.check_softmax(_wrong_softmax, fallback=helpers.attention.softmax) is helpers.attention.softmax
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert captured.err.rstrip().endswith("The cells below use the course's `helpers.attention.softmax` until yours passes.")
