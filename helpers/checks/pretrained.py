"""Checks of notebook 10: the WordPiece step, loading one BERT layer into an encoder block, mean pooling.

None of them needs the model package: they run on a toy vocabulary and on
random weights with BERT's names and layouts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.checks._core import ExerciseFailed, call, exercise, expect_close, expect_shape, expect_tensor, require_attempt
from helpers.models.minilm import LAYER_NAMES, BertEncoderBlock, encoder_layer_state_dict
from helpers.tokenizer import wordpiece as reference_wordpiece

__all__ = ["check_wordpiece", "check_load_encoder_layer", "check_mean_pooling", "TOY_VOCAB"]

# ---------------------------------------------------------------- WordPiece

#: A small vocabulary on which the usual mistakes give different answers.
TOY_VOCAB = {
    token: i
    for i, token in enumerate(
        "[PAD] [UNK] [CLS] [SEP] u un una aff ##a ##aff ##ffa ##able ##ble ##b ##l ##e able ble "
        "play ##ing ##s ##er ing s er playing ##pla ##y token ##izer ##ize ##r ##i ##z ##t x ##x h ##h".split()
    )
}

#: Words whose greedy split separates the typical mistakes.
_WORDS = ["playing", "unaffable", "players", "tokenizer", "play", "x", "xx", "xhx", "uq", "unaffableq", "qplay", "tokenq"]


def _variant(kind: str):
    """Typical wrong WordPiece implementations, to recognise what the student's code did."""

    def split(word: str, vocab) -> list[str]:
        pieces: list[str] = []
        start = 0
        while start < len(word):
            lengths = range(1, len(word) - start + 1) if kind == "shortest" else range(len(word) - start, 0, -1)
            piece = None
            for length in lengths:
                text = word[start : start + length]
                prefixed = "##" + text if (start > 0 or kind == "hash_first") and kind != "no_hash" else text
                if prefixed in vocab:
                    piece, end = prefixed, start + length
                    break
            if piece is None:
                if kind == "partial_unk":
                    return [*pieces, "[UNK]"]
                if kind == "skip_unknown":
                    start += 1
                    continue
                if kind == "char_unk":
                    pieces.append("[UNK]")
                    start += 1
                    continue
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    return split


_WORDPIECE_MISTAKES = {
    "shortest": "the pieces are the shortest matches: WordPiece is greedy longest-match-first. From the current position "
    "try the whole rest of the word, then shorten it one character at a time until the piece is in the vocabulary",
    "no_hash": "the pieces after the first were looked up without their '##' prefix: a piece that continues a word is "
    "stored as '##' + piece (so 'ing' at the start of a word and '##ing' inside one are different tokens)",
    "hash_first": "the first piece got a '##' prefix too: only the pieces that continue a word carry '##'",
    "partial_unk": "when no piece matches, the pieces found so far were kept and '[UNK]' appended: the whole word becomes a "
    "single '[UNK]'",
    "skip_unknown": "a character with no matching piece was skipped: when no piece matches, the whole word becomes a single '[UNK]'",
    "char_unk": "an unmatched character became its own '[UNK]' and the split went on: the whole word becomes a single '[UNK]'",
}


@exercise("WordPiece")
def check_wordpiece(wordpiece) -> None:
    """Check ``wordpiece(word, vocab) -> list[str]`` against ``helpers.tokenizer.wordpiece`` on a toy vocabulary."""
    require_attempt(wordpiece, "wordpiece")
    answers = {}
    for word in _WORDS:
        got = call(wordpiece, word, dict(TOY_VOCAB), what=f"the word {word!r} and a toy vocabulary")
        if isinstance(got, str):
            raise ExerciseFailed(
                f"for {word!r} you returned the string {got!r}; return a list of pieces such as ['play', '##ing']"
            )
        if isinstance(got, tuple):
            got = list(got)
        if not isinstance(got, list) or not all(isinstance(p, str) for p in got):
            raise ExerciseFailed(f"for {word!r} you returned {got!r}; return a list of strings (the pieces)")
        answers[word] = got
    expected = {word: reference_wordpiece(word, TOY_VOCAB) for word in _WORDS}
    if answers == expected:
        return
    for kind, message in _WORDPIECE_MISTAKES.items():
        wrong = {word: _variant(kind)(word, TOY_VOCAB) for word in _WORDS}
        if answers == wrong:
            example = next(w for w in _WORDS if wrong[w] != expected[w])
            raise ExerciseFailed(f"{message} (for {example!r} you gave {answers[example]}, expected {expected[example]})")
    for word in _WORDS:
        if answers[word] != expected[word]:
            if "".join(p.removeprefix("##") for p in answers[word]) != word and "[UNK]" not in answers[word]:
                hint = "the pieces (without their '##') do not spell the word: every character belongs to exactly one piece"
            else:
                hint = "take the longest piece in the vocabulary at each position, '##' before every piece but the first"
            raise ExerciseFailed(f"for {word!r} you gave {answers[word]}, expected {expected[word]}: {hint}")


# ---------------------------------------------------------------- loading one layer


def _fake_bert_weights(d_model: int, d_ff: int, layers: int) -> dict[str, Tensor]:
    """Random tensors under BERT's names and in its layouts ``(out, in)``, ``layers`` layers."""
    shapes = {
        "attention.self.query": (d_model, d_model),
        "attention.self.key": (d_model, d_model),
        "attention.self.value": (d_model, d_model),
        "attention.output.dense": (d_model, d_model),
        "attention.output.LayerNorm": None,
        "intermediate.dense": (d_ff, d_model),
        "output.dense": (d_model, d_ff),
        "output.LayerNorm": None,
    }
    weights = {}
    for i in range(layers):
        for name, shape in shapes.items():
            prefix = f"encoder.layer.{i}.{name}"
            if shape is None:  # a layer norm: gain near 1, bias near 0, both random
                weights[f"{prefix}.weight"] = 1.0 + 0.3 * torch.randn(d_model, dtype=torch.float64)
                weights[f"{prefix}.bias"] = 0.3 * torch.randn(d_model, dtype=torch.float64)
            else:
                weights[f"{prefix}.weight"] = torch.randn(*shape, dtype=torch.float64) / shape[1] ** 0.5
                weights[f"{prefix}.bias"] = 0.1 * torch.randn(shape[0], dtype=torch.float64)
    weights["embeddings.word_embeddings.weight"] = torch.randn(20, d_model, dtype=torch.float64)
    return weights


def _describe_wrong_parameter(name: str, got: Tensor, start: Tensor, weights: dict[str, Tensor], layer: int) -> str:
    """Why the block's parameter ``name`` does not hold what layer ``layer`` says it should."""
    ours_to_bert = {f"{ours}.{kind}": f"{bert}.{kind}" for bert, ours in LAYER_NAMES.items() for kind in ("weight", "bias")}
    bert_name = f"encoder.layer.{layer}.{ours_to_bert[name]}"
    expected = weights[bert_name]
    if got.shape == start.shape and torch.equal(got, start):
        return f"`{name}` was not loaded (it still holds its initial values); it should hold `{bert_name}`"
    if got.dim() == 2 and got.T.shape == expected.shape and torch.allclose(got.T, expected):
        return (
            f"`{name}` holds `{bert_name}` transposed. BERT stores a linear layer's weight as nn.Linear does, "
            "(out_features, in_features): copy it as it is, without .T"
        )
    for other, tensor in weights.items():
        if other != bert_name and tensor.shape == got.shape and torch.allclose(tensor, got):
            return f"`{name}` holds `{other}`, but it should hold `{bert_name}`"
        if other != bert_name and tensor.dim() == 2 and tensor.T.shape == got.shape and torch.allclose(tensor.T, got):
            return f"`{name}` holds `{other}` transposed, but it should hold `{bert_name}` as it is"
    return f"`{name}` does not hold `{bert_name}` (largest difference {(got - expected).abs().max().item():.3g})"


@exercise("loading one layer into an encoder block")
def check_load_encoder_layer(load_encoder_layer) -> None:
    """Check ``load_encoder_layer(block, weights, layer)``: copies BERT layer ``layer`` into a ``BertEncoderBlock``.

    Uses random weights with BERT's names and layouts (d_model 8, 2 heads, d_ff 12, 3 layers).
    """
    require_attempt(load_encoder_layer, "load_encoder_layer")
    d_model, heads, d_ff = 8, 2, 12
    weights = _fake_bert_weights(d_model, d_ff, layers=3)
    for layer in (1, 2):
        block = BertEncoderBlock(d_model, heads, d_ff).double()
        start = {k: v.clone() for k, v in block.state_dict().items()}
        given = {k: v.clone() for k, v in weights.items()}
        with torch.no_grad():
            call(
                load_encoder_layer,
                block,
                given,
                layer,
                what=f"a BertEncoderBlock (d_model 8, 2 heads, d_ff 12), BERT-style weights of 3 layers and layer={layer}",
            )
        expected = encoder_layer_state_dict(weights, layer)
        state = block.state_dict()
        for name, want in expected.items():
            if name not in state:
                raise ExerciseFailed(
                    f"the block has no parameter `{name}` any more: copy into the block's existing modules "
                    "instead of replacing them"
                )
            got = state[name].detach().to("cpu", torch.float64)
            if got.shape != want.shape or not torch.allclose(got, want, atol=1e-12, rtol=0):
                raise ExerciseFailed(f"layer {layer}: " + _describe_wrong_parameter(name, got, start[name], weights, layer))
        for norm in ("norm1", "norm2"):
            if getattr(block, norm).eps != 1e-12:
                raise ExerciseFailed(
                    f"`block.{norm}` was replaced by a layer norm with eps={getattr(block, norm).eps}; "
                    "BERT's layer norms use eps=1e-12: copy the weights into the block's own norms"
                )
        reference = BertEncoderBlock(d_model, heads, d_ff).double().eval()
        reference.load_state_dict(expected)
        x = torch.randn(2, 5, d_model, dtype=torch.float64)
        with torch.no_grad():
            out = block.eval()(x)
            expect_close(out, reference(x), f"the block's output after loading layer {layer}", atol=1e-10, rtol=1e-8)


# ---------------------------------------------------------------- mean pooling


@exercise("mean pooling")
def check_mean_pooling(mean_pool) -> None:
    """Check ``mean_pool(hidden, attention_mask) -> (batch, d)``: the mean over the real tokens only."""
    require_attempt(mean_pool, "mean_pool")
    hidden = torch.randn(3, 6, 5, dtype=torch.float64)  # (batch 3, 6 tokens, d 5)
    lengths = torch.tensor([6, 4, 2])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).long()  # (3, 6): 1 on real tokens, 0 on padding
    got = expect_tensor(
        call(mean_pool, hidden, mask, what="hidden (3, 6, 5) and attention_mask (3, 6) with 6, 4 and 2 real tokens"),
        "the pooled vectors",
    )
    m = mask.to(hidden.dtype).unsqueeze(-1)  # (3, 6, 1)
    expected = (hidden * m).sum(1) / m.sum(1)  # (3, 5)
    if got.dim() == 2 and got.shape == (3, 6):
        raise ExerciseFailed(
            "the pooled vectors have shape (3, 6) = (batch, tokens): you averaged over the features (the last axis); "
            "average over the tokens, dim=1, to get (batch, d)"
        )
    if got.dim() == 3 and got.shape[1] == 1:
        raise ExerciseFailed(
            f"the pooled vectors have shape {tuple(got.shape)}: drop the token axis (keepdim=False, or squeeze it) "
            "to get (batch, d)"
        )
    expect_shape(got, (3, 5), "the pooled vectors")
    mistakes = {
        "the padding tokens were averaged in: multiply by the mask before summing and divide by the number of real tokens": hidden.mean(
            1
        ),
        "the masked sum was not divided by the number of real tokens (mask.sum(1))": (hidden * m).sum(1),
        "the masked sum was divided by the padded length, not by the number of real tokens of each sentence": (hidden * m).sum(1)
        / hidden.shape[1],
        "the vectors were scaled to unit length: that is the step after mean pooling, leave it out here": F.normalize(
            expected, dim=-1
        ),
        "that is the first token's vector ([CLS] pooling); average over the real tokens instead": hidden[:, 0],
        "that is a maximum over the tokens; average over the real tokens instead": hidden.masked_fill(m == 0, float("-inf")).amax(
            1
        ),
    }
    expect_close(got, expected, "the pooled vectors", atol=1e-10, rtol=1e-8, mistakes=mistakes)
    # a batch without padding is a plain mean
    full = call(mean_pool, hidden, torch.ones(3, 6, dtype=torch.long), what="a mask of all ones")
    expect_close(full, hidden.mean(1), "the pooled vectors of a batch without padding", atol=1e-10, rtol=1e-8)
