"""The contract every check shares (helpers.checks._core): what counts as "not attempted", shortcuts, messages."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import helpers.checks as checks
from helpers.blocks import EncoderBlock
from helpers.checks._core import ExerciseFailed, ShortcutUsed, _digits_to_show, expect_close, forbid_forward, is_stub_error
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
