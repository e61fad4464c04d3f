"""The checks of notebook 10 pass the reference, spot the stub and name the typical mistakes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.pretrained import _WORDPIECE_MISTAKES, _variant, check_load_encoder_layer, check_mean_pooling, check_wordpiece
from helpers.models.minilm import LAYER_NAMES, load_encoder_layer, mean_pool
from helpers.tokenizer import wordpiece
from tests.conftest import assert_caught, assert_not_attempted

# ---------------------------------------------------------------- WordPiece


def test_wordpiece_reference_passes():
    assert check_wordpiece(wordpiece) is True


def test_wordpiece_other_natural_writing_passes():
    def recursive(word, vocab):
        def split(start):
            if start == len(word):
                return []
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in vocab:
                    rest = split(end)
                    return None if rest is None else [piece, *rest]
            return None

        pieces = split(0)
        return ["[UNK]"] if pieces is None else pieces

    assert check_wordpiece(recursive) is True
    assert check_wordpiece(lambda word, vocab: tuple(wordpiece(word, vocab))) is True


def test_wordpiece_stub_not_attempted(capsys):
    def stub(word, vocab):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_wordpiece, stub, capsys)
    assert_not_attempted(check_wordpiece, ..., capsys)


@pytest.mark.parametrize("kind", list(_WORDPIECE_MISTAKES))
def test_wordpiece_mistakes_are_named(kind):
    phrase = {
        "shortest": "longest-match-first",
        "no_hash": "without their '##' prefix",
        "hash_first": "first piece got a '##'",
        "partial_unk": "pieces found so far",
        "skip_unknown": "was skipped",
        "char_unk": "its own '[UNK]'",
    }[kind]
    assert_caught(check_wordpiece, _variant(kind), phrase)


def test_wordpiece_other_wrong_answers():
    assert_caught(check_wordpiece, lambda word, vocab: " ".join(wordpiece(word, vocab)), "string")
    assert_caught(check_wordpiece, lambda word, vocab: None, "list of strings")
    assert_caught(check_wordpiece, lambda word, vocab: list(word), "expected", "longest piece")
    assert_caught(check_wordpiece, lambda word, vocab: wordpiece(word, vocab)[:1], "do not spell the word")
    assert_caught(check_wordpiece, lambda word, vocab: [vocab[word + "!"]], "raised KeyError")


# ---------------------------------------------------------------- loading one layer


def _loader(mapping=None, transpose=(), layer_shift=0, skip=()):
    """A load_encoder_layer with a chosen mistake."""
    mapping = dict(LAYER_NAMES if mapping is None else mapping)

    def load(block, weights, layer):
        params = dict(block.named_parameters())
        for bert, ours in mapping.items():
            for kind in ("weight", "bias"):
                if f"{ours}.{kind}" in skip:
                    continue
                w = weights[f"encoder.layer.{layer + layer_shift}.{bert}.{kind}"]
                params[f"{ours}.{kind}"].copy_(w.T if f"{ours}.{kind}" in transpose else w)

    return load


def test_load_reference_passes():
    assert check_load_encoder_layer(load_encoder_layer) is True


def test_load_copy_version_passes():
    assert check_load_encoder_layer(_loader()) is True

    def by_assignment(block, weights, layer):  # new Parameters instead of copy_: also right
        p = f"encoder.layer.{layer}."
        for bert, ours in LAYER_NAMES.items():
            module = block.get_submodule(ours)
            module.weight = nn.Parameter(weights[p + bert + ".weight"].clone())
            module.bias = nn.Parameter(weights[p + bert + ".bias"].clone())

    assert check_load_encoder_layer(by_assignment) is True


def test_load_stub_not_attempted(capsys):
    def stub(block, weights, layer):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_load_encoder_layer, stub, capsys)
    assert_not_attempted(check_load_encoder_layer, ..., capsys)


def _swap(a, b):
    m = dict(LAYER_NAMES)
    m[a], m[b] = m[b], m[a]
    return m


LOAD_MISTAKES = [
    (_loader(transpose=("self_attn.w_q.weight",)), ["`self_attn.w_q.weight`", "transposed", "(out_features, in_features)"]),
    (_loader(transpose=("self_attn.w_o.weight",)), ["`self_attn.w_o.weight`", "transposed"]),
    (
        _loader(mapping=_swap("attention.self.query", "attention.self.key")),
        ["`self_attn.w_q.weight` holds", "attention.self.key.weight"],
    ),
    (
        _loader(mapping=_swap("attention.output.LayerNorm", "output.LayerNorm")),
        ["`norm1.weight` holds", "output.LayerNorm.weight"],
    ),
    (
        _loader(mapping=_swap("attention.self.value", "attention.output.dense")),
        ["`self_attn.w_v.weight` holds", "attention.output.dense"],
    ),
    (_loader(layer_shift=-1), ["holds `encoder.layer.0.", "should hold `encoder.layer.1."]),
    (_loader(skip=("ff.linear1.bias",)), ["`ff.linear1.bias` was not loaded"]),
    (lambda block, weights, layer: _loader()(block, weights, 0), ["layer 1", "encoder.layer.0", "should hold `encoder.layer.1"]),
]


@pytest.mark.parametrize("wrong, phrases", LOAD_MISTAKES)
def test_load_mistakes_are_named(wrong, phrases):
    assert_caught(check_load_encoder_layer, wrong, *phrases)


def test_load_replaced_norm_and_errors():
    def new_norms(block, weights, layer):
        _loader(skip=("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"))(block, weights, layer)
        for i, bert in ((1, "attention.output.LayerNorm"), (2, "output.LayerNorm")):
            norm = nn.LayerNorm(block.norm1.normalized_shape).double()
            norm.weight.data = weights[f"encoder.layer.{layer}.{bert}.weight"].clone()
            norm.bias.data = weights[f"encoder.layer.{layer}.{bert}.bias"].clone()
            setattr(block, f"norm{i}", norm)

    assert_caught(check_load_encoder_layer, new_norms, "eps=1e-12")

    def wrong_key(block, weights, layer):
        block.self_attn.w_q.weight.copy_(weights[f"layer.{layer}.query.weight"])

    assert_caught(check_load_encoder_layer, wrong_key, "raised KeyError")


# ---------------------------------------------------------------- mean pooling


def test_mean_pool_reference_passes():
    assert check_mean_pooling(mean_pool) is True


def test_mean_pool_other_writings_pass():
    def with_bool(hidden, mask):
        keep = mask.bool()
        return torch.stack([hidden[i][keep[i]].mean(0) for i in range(hidden.shape[0])])

    def einsum(hidden, mask):
        m = mask.to(hidden.dtype)
        return torch.einsum("bnd,bn->bd", hidden, m) / m.sum(1, keepdim=True)

    assert check_mean_pooling(with_bool) is True
    assert check_mean_pooling(einsum) is True


def test_mean_pool_stub_not_attempted(capsys):
    def stub(hidden, mask):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_mean_pooling, stub, capsys)


def _masked_sum(h, m):
    return (h * m.unsqueeze(-1)).sum(1)


POOL_MISTAKES = [
    (lambda h, m: h.mean(1), ["padding tokens were averaged in"]),
    (_masked_sum, ["not divided by the number of real tokens"]),
    (lambda h, m: _masked_sum(h, m) / h.shape[1], ["divided by the padded length"]),
    (lambda h, m: F.normalize(_masked_sum(h, m) / m.sum(1, keepdim=True), dim=-1), ["unit length"]),
    (lambda h, m: h[:, 0], ["[CLS] pooling"]),
    (lambda h, m: h.masked_fill(m.unsqueeze(-1) == 0, float("-inf")).amax(1), ["maximum over the tokens"]),
    (lambda h, m: (h * m.unsqueeze(-1)).mean(-1), ["averaged over the features", "dim=1"]),
    (lambda h, m: (h * m.unsqueeze(-1)).sum(1, keepdim=True) / m.sum(1)[:, None, None], ["drop the token axis"]),
    (lambda h, m: (h * m).sum(1), ["raised RuntimeError"]),
    (lambda h, m: _masked_sum(h, m) / m.sum(1, keepdim=True) + 0.01, ["differs from the reference", "largest difference"]),
]


@pytest.mark.parametrize("wrong, phrases", POOL_MISTAKES)
def test_mean_pool_mistakes_are_named(wrong, phrases):
    assert_caught(check_mean_pooling, wrong, *phrases)


def test_mean_pool_in_place_is_caught():
    def inplace(h, m):
        h.mul_(m.unsqueeze(-1))
        return h.sum(1) / m.sum(1, keepdim=True)

    assert_caught(check_mean_pooling, inplace, "in place")
