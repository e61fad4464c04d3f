"""The checks of notebook 08 accept the reference, report stubs, and name typical mistakes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.checks import check_image_patch_embedding, check_patchify, check_position_similarity, check_vit_forward
from helpers.models import patchify, position_similarity, vit_forward
from tests.conftest import assert_caught, assert_not_attempted


def _stub(*args, **kwargs):
    raise NotImplementedError("Exercise: replace this line with your code")


def _grid(images, p):
    b, c, h, w = images.shape
    return images.reshape(b, c, h // p, p, w // p, p)


def _flat(x, b):
    return x.reshape(b, x.shape[1] * x.shape[2], -1)


# ---------------------------------------------------------------- patchify


def test_patchify_reference_passes(capsys):
    assert check_patchify(patchify) is True
    assert "correct" in capsys.readouterr().out


def test_patchify_unfold_answer_passes():
    assert check_patchify(lambda x, p: F.unfold(x, p, stride=p).transpose(1, 2)) is True


def test_patchify_tensor_unfold_answer_passes():
    def answer(images, p):
        b, c = images.shape[:2]
        x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, gh, gw, p, p)
        return x.permute(0, 2, 3, 1, 4, 5).reshape(b, -1, c * p * p)

    assert check_patchify(answer) is True


@pytest.mark.parametrize("stub", [..., _stub])
def test_patchify_stub_not_attempted(stub, capsys):
    assert_not_attempted(check_patchify, stub, capsys)


PATCHIFY_MISTAKES = {
    "column-major": (lambda x, p: _flat(_grid(x, p).permute(0, 4, 2, 1, 3, 5), x.shape[0]), "column by column"),
    "pixels transposed": (lambda x, p: _flat(_grid(x, p).permute(0, 2, 4, 1, 5, 3), x.shape[0]), "transposed"),
    "channels last": (lambda x, p: _flat(_grid(x, p).permute(0, 2, 4, 3, 5, 1), x.shape[0]), "channels are interleaved"),
    "plain reshape": (lambda x, p: x.reshape(x.shape[0], -1, x.shape[1] * p * p), "without moving any axis"),
    "channel not moved": (
        lambda x, p: x.unfold(2, p, p).unfold(3, p, p).reshape(x.shape[0], -1, x.shape[1] * p * p),
        "channel axis was not moved",
    ),
    "overlapping": (lambda x, p: F.unfold(x, p, stride=1).transpose(1, 2), "overlap"),
    "unfold layout": (lambda x, p: F.unfold(x, p, stride=p), "transpose it"),
    "grid kept": (
        lambda x, p: _grid(x, p).permute(0, 2, 4, 1, 3, 5).reshape(x.shape[0], x.shape[2] // p, x.shape[3] // p, -1),
        "grid was not flattened",
    ),
    "hard-coded p": (lambda x, p: patchify(x, 2), "hard-coded"),
    "grid sides swapped": (
        lambda x, p: (
            x.reshape(x.shape[0], x.shape[1], x.shape[3] // p, p, x.shape[2] // p, p)
            .permute(0, 2, 4, 1, 3, 5)
            .reshape(x.shape[0], -1, x.shape[1] * p * p)
        ),
        "swapped",
    ),
    "numpy": (lambda x, p: patchify(x, p).numpy(), "numpy"),
    "unfold reshaped": (lambda x, p: F.unfold(x, p, stride=p).reshape(x.shape[0], -1, x.shape[1] * p * p), "scrambles"),
    "float32": (lambda x, p: patchify(x, p).float(), "dtype"),
    "only first channel": (lambda x, p: patchify(x[:, :1], p), "C * p * p"),
    "batch dropped": (lambda x, p: patchify(x, p)[0], "3 axes"),
    "raises": (lambda x, p: x.view(-1, p * p, 7), "raised RuntimeError"),
}


@pytest.mark.parametrize("name", list(PATCHIFY_MISTAKES))
def test_patchify_mistakes_are_named(name):
    answer, phrase = PATCHIFY_MISTAKES[name]
    assert_caught(check_patchify, answer, phrase)


def test_patchify_view_after_permute_error_is_reported():
    def answer(x, p):
        b, c, h, w = x.shape
        return x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).view(b, -1, c * p * p)

    assert_caught(check_patchify, answer, "raised RuntimeError", "reshape")


def test_patchify_one_channel_only_is_named():
    def answer(x, p):
        b, _, h, w = x.shape
        return x.reshape(b, h // p, p, w // p, p).permute(0, 1, 3, 2, 4).reshape(b, -1, p * p)

    assert_caught(check_patchify, answer, "works for one channel but not for C = 3")


def test_patchify_in_place_is_named():
    def answer(x, p):
        out = patchify(x, p).clone()
        x.zero_()
        return out

    assert_caught(check_patchify, answer, "in place")


def test_patchify_swapped_patches_are_located():
    def answer(x, p):
        out = patchify(x, p).clone()
        out[:, [0, 1]] = out[:, [1, 0]]
        return out

    assert_caught(check_patchify, answer, "holds the pixels of patch 1", "wrong order")


def test_patchify_shuffled_pixels_are_located():
    def answer(x, p):
        out = patchify(x, p).clone()
        out[:, 2] = out[:, 2].flip(-1)
        return out

    assert_caught(check_patchify, answer, "patch 2 of image 0", "right pixels in the wrong order")


def test_patchify_wrong_values_are_located():
    assert_caught(check_patchify, lambda x, p: patchify(x, p) * 2, "holds the wrong pixels", "images[0, :, 0:2, 0:2]")


# ---------------------------------------------------------------- patch embedding


def _embed(images, weight, bias, p):
    return patchify(images, p) @ weight.T + bias


def test_patch_embedding_reference_passes():
    assert check_image_patch_embedding(_embed) is True


def test_patch_embedding_linear_and_conv_answers_pass():
    assert check_image_patch_embedding(lambda x, w, b, p: F.linear(patchify(x, p), w, b)) is True

    def conv_answer(x, w, b, p):
        conv = F.conv2d(x, w.reshape(w.shape[0], x.shape[1], p, p), b, stride=p)  # (B, d, gh, gw)
        return conv.flatten(2).transpose(1, 2)

    assert check_image_patch_embedding(conv_answer) is True


@pytest.mark.parametrize("stub", [..., _stub])
def test_patch_embedding_stub_not_attempted(stub, capsys):
    assert_not_attempted(check_image_patch_embedding, stub, capsys)


def _channels_last(x, p):
    return _flat(_grid(x, p).permute(0, 2, 4, 3, 5, 1), x.shape[0])


EMBED_MISTAKES = {
    "no bias": (lambda x, w, b, p: patchify(x, p) @ w.T, "bias is missing"),
    "weight not transposed": (lambda x, w, b, p: patchify(x, p) @ w + b, "weight.T"),
    "gelu": (lambda x, w, b, p: F.gelu(_embed(x, w, b, p)), "no activation"),
    "relu": (lambda x, w, b, p: torch.relu(_embed(x, w, b, p)), "no ReLU"),
    "scaled": (lambda x, w, b, p: _embed(x, w, b, p) * w.shape[0] ** 0.5, "sqrt(d_model)"),
    "conv layout": (lambda x, w, b, p: _embed(x, w, b, p).transpose(1, 2), "(B, N, d_model)"),
    "conv not flattened": (
        lambda x, w, b, p: F.conv2d(x, w.reshape(w.shape[0], x.shape[1], p, p), b, stride=p),
        "flatten the grid",
    ),
    "channels last": (lambda x, w, b, p: _channels_last(x, p) @ w.T + b, "channels last"),
    "column-major": (lambda x, w, b, p: _flat(_grid(x, p).permute(0, 4, 2, 1, 3, 5), x.shape[0]) @ w.T + b, "column by column"),
    "plain reshape": (lambda x, w, b, p: x.reshape(x.shape[0], -1, x.shape[1] * p * p) @ w.T + b, "use patchify"),
    "stride 1": (
        lambda x, w, b, p: F.conv2d(x, w.reshape(w.shape[0], x.shape[1], p, p), b, stride=1).flatten(2).transpose(1, 2),
        "overlap",
    ),
    "bias twice": (lambda x, w, b, p: _embed(x, w, b, p) + b, "twice"),
    "not projected": (lambda x, w, b, p: patchify(x, p), "not projected"),
    "conv reshaped": (
        lambda x, w, b, p: F.conv2d(x, w.reshape(w.shape[0], x.shape[1], p, p), b, stride=p).reshape(x.shape[0], -1, w.shape[0]),
        "scrambles",
    ),
    "numpy": (lambda x, w, b, p: _embed(x, w, b, p).numpy(), "numpy"),
    "wrong value": (lambda x, w, b, p: _embed(x, w, b, p) + 0.1 * (x.sum() > -1e9), "differs from the reference"),
}


@pytest.mark.parametrize("name", list(EMBED_MISTAKES))
def test_patch_embedding_mistakes_are_named(name):
    answer, phrase = EMBED_MISTAKES[name]
    assert_caught(check_image_patch_embedding, answer, phrase)


def test_patch_embedding_weight_on_the_left_gets_the_hint():
    assert_caught(check_image_patch_embedding, lambda x, w, b, p: w @ patchify(x, p) + b, "raised RuntimeError", "weight.T")


def test_patch_embedding_untransposed_weight_crash_gets_the_hint():
    def answer(x, w, b, p):
        if x.shape[1] == 1:  # the square case first in some orders: make sure the crash path is taken
            return _embed(x, w, b, p)
        return patchify(x, p) @ w + b

    assert_caught(check_image_patch_embedding, answer, "raised RuntimeError", "weight.T")


# ---------------------------------------------------------------- ViT forward


def test_vit_forward_reference_passes():
    assert check_vit_forward(vit_forward) is True


@pytest.mark.parametrize("stub", [..., _stub])
def test_vit_forward_stub_not_attempted(stub, capsys):
    assert_not_attempted(check_vit_forward, stub, capsys)


def _tokens(model, images, cls_first=True, pos=True):
    patches = model.patch_embed(images)
    cls = model.cls_token.expand(images.shape[0], -1, -1)
    x = torch.cat([cls, patches], 1) if cls_first else torch.cat([patches, cls], 1)
    return x + model.pos_embed if pos else x


def _cls(model, images):
    return model.cls_token.expand(images.shape[0], -1, -1)


def _blocks(model, x):
    for block in model.blocks:
        x = block(x)
    return x


VIT_MISTAKES = {
    "no class token": (
        lambda m, x: m.head(m.norm(_blocks(m, m.patch_embed(x) + m.pos_embed[:, 1:]))[:, 0]),
        "class token is missing",
    ),
    "no position embeddings": (
        lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x, pos=False)))[:, 0]),
        "position embeddings are not added",
    ),
    "pos before cls": (
        lambda m, x: m.head(m.norm(_blocks(m, torch.cat([_cls(m, x), m.patch_embed(x) + m.pos_embed[:, 1:]], 1)))[:, 0]),
        "before prepending the class token",
    ),
    "pos before cls, first rows": (
        lambda m, x: m.head(
            m.norm(_blocks(m, torch.cat([m.cls_token.expand(x.shape[0], -1, -1), m.patch_embed(x) + m.pos_embed[:, :-1]], 1)))[
                :, 0
            ]
        ),
        "before prepending the class token",
    ),
    "mean head": (lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x))).mean(1)), "mean over all tokens"),
    "mean of patches": (lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x)))[:, 1:].mean(1)), "mean over the patch tokens"),
    "mean before norm": (lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x)).mean(1))), "mean over all tokens"),
    "norm after every block": (
        lambda m, x: m.head(m.norm(m.blocks[1](m.norm(m.blocks[0](_tokens(m, x)))))[:, 0]),
        "after every block",
    ),
    "no final norm": (lambda m, x: m.head(_blocks(m, _tokens(m, x))[:, 0]), "final layer norm is missing"),
    "last token": (lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x)))[:, -1]), "last token"),
    "cls appended": (lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x, cls_first=False)))[:, -1]), "appended at the end"),
    "no blocks": (lambda m, x: m.head(m.norm(_tokens(m, x))[:, 0]), "blocks are skipped"),
    "one block": (lambda m, x: m.head(m.norm(m.blocks[0](_tokens(m, x)))[:, 0]), "only the first encoder block"),
    "head on all tokens": (lambda m, x: m.head(m.norm(_blocks(m, _tokens(m, x)))), "every token"),
    "cls not expanded": (
        lambda m, x: m.head(m.norm(_blocks(m, torch.cat([m.cls_token, m.patch_embed(x)], 1) + m.pos_embed))[:, 0]),
        "expand it to the batch",
    ),
    "calls the model": (lambda m, x: m(x), "calls the model itself"),
    "calls model.forward": (lambda m, x: m.forward(x), "calls the model itself"),
    "dropout left active": (lambda m, x: torch.nn.functional.dropout(vit_forward(m, x), 0.1), "dropout is left active"),
    "norm first": (lambda m, x: m.head(_blocks(m, m.norm(_tokens(m, x)))[:, 0]), "before the blocks"),
    "probabilities": (lambda m, x: torch.softmax(vit_forward(m, x), -1), "return the logits"),
    "wrong scale": (lambda m, x: 1.5 * vit_forward(m, x), "differs from the reference"),
    "numpy": (lambda m, x: vit_forward(m, x).numpy(), "numpy"),
}


def test_vit_forward_calling_the_module_list_is_not_a_stub():
    def answer(m, x):
        return m.head(m.norm(m.blocks(_tokens(m, x)))[:, 0])

    assert_caught(check_vit_forward, answer, "nn.ModuleList", "for block in model.blocks")


@pytest.mark.parametrize("name", list(VIT_MISTAKES))
def test_vit_forward_mistakes_are_named(name):
    answer, phrase = VIT_MISTAKES[name]
    assert_caught(check_vit_forward, answer, phrase)


def test_checks_leave_the_random_stream_alone():
    torch.manual_seed(0)
    check_patchify(patchify)
    check_image_patch_embedding(_embed)
    check_vit_forward(vit_forward)
    after = torch.rand(3)
    torch.manual_seed(0)
    torch.testing.assert_close(after, torch.rand(3))
    assert np.isfinite(after.numpy()).all()


# ---------------------------------------------------------------- issue 25: the likeliest mistakes the catalogues lacked


def _patchify_reshaped(sizes, axes):
    """Reshape to ``sizes(b, c, h, w, p)``, permute by ``axes``, flatten to (B, N, C*p*p)."""

    def answer(x, p):
        b, c, h, w = x.shape
        return x.reshape(*sizes(b, c, h, w, p)).permute(*axes).reshape(b, -1, c * p * p)

    return answer


def _patchify_loop(columns_first):
    def answer(x, p):
        b, c, h, w = x.shape
        rows_first = [(i, j) for i in range(0, h, p) for j in range(0, w, p)]
        corners = sorted(rows_first, key=lambda ij: (ij[1], ij[0])) if columns_first else rows_first
        return torch.stack([x[:, :, i : i + p, j : j + p].reshape(b, -1) for i, j in corners], dim=1)

    return answer


PATCHIFY_MORE_MISTAKES = {
    "p before H/p in the reshape": (
        _patchify_reshaped(lambda b, c, h, w, p: (b, c, p, h // p, p, w // p), (0, 2, 4, 1, 3, 5)),
        ["reshape puts p before H/p"],
    ),
    "p before H/p, permuted to match": (
        _patchify_reshaped(lambda b, c, h, w, p: (b, c, p, h // p, p, w // p), (0, 3, 5, 1, 2, 4)),
        ["reshape puts p before H/p"],
    ),
    "a pixel axis permuted to the front": (
        _patchify_reshaped(lambda b, c, h, w, p: (b, c, h // p, p, w // p, p), (0, 2, 3, 1, 4, 5)),
        ["permute(0, 2, 3, 1, 4, 5)"],
    ),
    "square images assumed": (
        _patchify_reshaped(lambda b, c, h, w, p: (b, c, h // p, p, h // p, p), (0, 2, 4, 1, 3, 5)),
        ["works for square images but not for H = 4 != W = 6"],
    ),
    "a loop over columns first": (_patchify_loop(columns_first=True), ["column by column"]),
}


@pytest.mark.parametrize("name", list(PATCHIFY_MORE_MISTAKES))
def test_patchify_likeliest_mistakes_are_named(name):
    answer, phrases = PATCHIFY_MORE_MISTAKES[name]
    assert_caught(check_patchify, answer, *phrases)


def test_patchify_other_right_answers_pass():
    assert check_patchify(_patchify_loop(columns_first=False)) is True
    assert (
        check_patchify(lambda x, p: x.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).flatten(1, 2).flatten(2)) is True
    )


EMBED_MORE_MISTAKES = {
    "the notebook's patch size hard-coded": (lambda x, w, b, p: patchify(x, 2) @ w.T + b, ["use the patch_size argument"]),
    "a fresh nn.Linear": (
        lambda x, w, b, p: torch.nn.Linear(w.shape[1], w.shape[0]).double()(patchify(x, p)),
        ["change from one call to the next", "weight and bias you are given"],
    ),
    "the bias added to the patches": (lambda x, w, b, p: (patchify(x, p) + b) @ w.T, ["add it after the product"]),
    "F.linear with weight.T": (lambda x, w, b, p: F.linear(patchify(x, p), w.T, b), ["F.linear(patches, weight, bias)"]),
    "weight ignored (a constant projection)": (
        lambda x, w, b, p: patchify(x, p) @ torch.full_like(w.T, 0.1),
        ["do not change when `weight` and `bias` change"],
    ),
}


@pytest.mark.parametrize("name", list(EMBED_MORE_MISTAKES))
def test_patch_embedding_likeliest_mistakes_are_named(name):
    answer, phrases = EMBED_MORE_MISTAKES[name]
    assert_caught(check_image_patch_embedding, answer, *phrases)


def test_patch_embedding_other_right_answers_pass():
    assert check_image_patch_embedding(lambda x, w, b, p: torch.einsum("bnk,dk->bnd", patchify(x, p), w) + b) is True
    assert check_image_patch_embedding(lambda x, w, b, p: patchify(x, p) @ w.mT + b) is True
    assert (
        check_image_patch_embedding(
            lambda x, w, b, p: torch.addmm(b, patchify(x, p).flatten(0, 1), w.T).view(x.shape[0], -1, w.shape[0])
        )
        is True
    )


def _vit(slip):
    def answer(m, x):
        patches = m.patch_embed(x)
        cls = m.cls_token.expand(x.shape[0], -1, -1)
        if slip == "class token added, not prepended":
            tokens = patches + m.cls_token + m.pos_embed
        elif slip == "concatenated along the features":
            tokens = torch.cat([cls, patches], dim=-1) + m.pos_embed
        else:
            tokens = torch.cat([cls, patches], dim=1) + m.pos_embed
        if slip == "blocks reversed":
            for block in reversed(m.blocks):
                tokens = block(tokens)
            h = m.norm(tokens)
        else:
            h = m.norm(_blocks(m, tokens))
        return m.head({"x[:, 0:1]": h[:, 0:1], "x[0]": h[0], "x[:, 1]": h[:, 1]}.get(slip, h[:, 0]))

    return answer


@pytest.mark.parametrize(
    "slip, phrase",
    [
        ("class token added, not prepended", "prepend the class token with torch.cat"),
        ("concatenated along the features", "expand it to the batch"),
        ("x[:, 0:1]", "keeps a token axis of size 1"),
        ("x[0]", "the tokens of the first image"),
        ("x[:, 1]", "token 1, the first patch"),
        ("blocks reversed", "reverse order"),
    ],
)
def test_vit_forward_likeliest_mistakes_are_named(slip, phrase):
    assert_caught(check_vit_forward, _vit(slip), phrase)


def test_vit_forward_other_right_answers_pass():
    def norm_on_the_class_token(m, x):  # a layer norm acts on each token alone
        tokens = torch.cat([_cls(m, x), m.patch_embed(x)], dim=1)
        tokens += m.pos_embed  # in place on a new tensor: fine
        return m.head(m.norm(_blocks(m, tokens)[:, 0]))

    def sliced_positions(m, x):
        tokens = torch.cat([_cls(m, x), m.patch_embed(x)], dim=1)
        return m.head(m.norm(torch.nn.Sequential(*m.blocks)(tokens + m.pos_embed[:, : tokens.shape[1]]))[:, 0])

    assert check_vit_forward(norm_on_the_class_token) is True
    assert check_vit_forward(sliced_positions) is True


def test_the_references_in_helpers_models_pass():
    import helpers.models

    assert check_patchify(helpers.models.patchify) is True
    assert check_image_patch_embedding(helpers.models.patch_embedding) is True
    assert check_vit_forward(helpers.models.vit_forward) is True


# ---------------------------------------------------------------- position similarity (exercise 8.4)


def _patch_rows(m):
    return m.pos_embed[0, 1:]  # (N, d)


def _cosine_grid(rows, m):
    unit = rows / rows.norm(dim=-1, keepdim=True)
    return (unit @ unit.T).reshape(-1, m.grid_size, m.grid_size)


def test_position_similarity_reference_passes(capsys):
    assert check_position_similarity(position_similarity) is True
    assert "correct" in capsys.readouterr().out


@pytest.mark.parametrize("stub", [..., _stub])
def test_position_similarity_stub_not_attempted(stub, capsys):
    assert_not_attempted(check_position_similarity, stub, capsys)


POSITION_RIGHT_ANSWERS = {
    "normalise, then one product": lambda m: _cosine_grid(_patch_rows(m), m),
    "F.normalize": lambda m: (F.normalize(_patch_rows(m), dim=-1) @ F.normalize(_patch_rows(m), dim=-1).T).reshape(
        m.num_patches, m.grid_size, m.grid_size
    ),
    "F.cosine_similarity, broadcast": lambda m: F.cosine_similarity(
        _patch_rows(m)[:, None], _patch_rows(m)[None, :], dim=-1
    ).reshape(-1, m.grid_size, m.grid_size),
    "products over the outer product of norms": lambda m: (
        (_patch_rows(m) @ _patch_rows(m).T) / torch.outer(_patch_rows(m).norm(dim=-1), _patch_rows(m).norm(dim=-1))
    ).reshape(-1, m.grid_size, m.grid_size),
    "all N + 1 rows, then the class token's row and column dropped": lambda m: (
        F.normalize(m.pos_embed[0], dim=-1) @ F.normalize(m.pos_embed[0], dim=-1).T
    )[1:, 1:].reshape(-1, m.grid_size, m.grid_size),
    "batched, with mT": lambda m: (F.normalize(m.pos_embed[:, 1:], dim=-1) @ F.normalize(m.pos_embed[:, 1:], dim=-1).mT).reshape(
        -1, m.grid_size, m.grid_size
    ),
    "einsum, detached": lambda m: torch.einsum(
        "nd,md->nm", F.normalize(m.pos_embed.detach()[0, 1:], dim=-1), F.normalize(m.pos_embed.detach()[0, 1:], dim=-1)
    ).view(m.num_patches, m.grid_size, m.grid_size),
    "the grid size from the number of patches": lambda m: _cosine_grid(_patch_rows(m), m).reshape(
        len(_patch_rows(m)), int(len(_patch_rows(m)) ** 0.5), -1
    ),
}


@pytest.mark.parametrize("name", list(POSITION_RIGHT_ANSWERS))
def test_position_similarity_other_right_answers_pass(name):
    assert check_position_similarity(POSITION_RIGHT_ANSWERS[name]) is True


def _in_place(m):
    rows = m.pos_embed.data[0, 1:]
    rows /= rows.norm(dim=-1, keepdim=True)
    return (rows @ rows.T).reshape(-1, m.grid_size, m.grid_size)


def _on_grid(m, matrix):
    return matrix.reshape(-1, m.grid_size, m.grid_size)


POSITION_MISTAKES = {
    "class token's row kept, not reshaped": (
        lambda m: F.normalize(m.pos_embed[0], dim=-1) @ F.normalize(m.pos_embed[0], dim=-1).T,
        ["class token's row is still in", "pos_embed[0, 1:]"],
    ),
    "class token's row kept, reshaped": (
        lambda m: _on_grid(m, F.normalize(m.pos_embed[0], dim=-1) @ F.normalize(m.pos_embed[0], dim=-1).T),
        ["(N + 1)^2", "class token's row is still in"],
    ),
    "the last row dropped instead of the first": (lambda m: _cosine_grid(m.pos_embed[0, :-1], m), ["pos_embed[0, :-1]"]),
    "not normalised": (lambda m: _on_grid(m, _patch_rows(m) @ _patch_rows(m).T), ["not normalised"]),
    "one side normalised": (
        lambda m: _on_grid(m, F.normalize(_patch_rows(m), dim=-1) @ _patch_rows(m).T),
        ["only one side is normalised"],
    ),
    "normalised over the patches": (
        lambda m: _on_grid(m, F.normalize(_patch_rows(m), dim=0) @ F.normalize(_patch_rows(m), dim=0).T),
        ["wrong axis"],
    ),
    "correlation": (
        lambda m: _cosine_grid(_patch_rows(m) - _patch_rows(m).mean(-1, keepdim=True), m),
        ["correlation"],
    ),
    "cosine distance": (lambda m: 1 - _cosine_grid(_patch_rows(m), m), ["cosine distance"]),
    "euclidean distance": (lambda m: _on_grid(m, torch.cdist(_patch_rows(m), _patch_rows(m))), ["torch.cdist"]),
    "softmax": (
        lambda m: torch.softmax(_cosine_grid(_patch_rows(m), m).reshape(m.num_patches, -1), -1).reshape(
            -1, m.grid_size, m.grid_size
        ),
        ["softmax"],
    ),
    "attention's scaled dot product": (
        lambda m: _on_grid(m, _patch_rows(m) @ _patch_rows(m).T / _patch_rows(m).shape[-1] ** 0.5),
        ["sqrt(d)"],
    ),
    "grid transposed": (lambda m: _cosine_grid(_patch_rows(m), m).transpose(1, 2), ["grid is transposed"]),
    "not reshaped": (lambda m: _cosine_grid(_patch_rows(m), m).reshape(m.num_patches, -1), ["reshape it to (N, g, g)"]),
    "each embedding with itself": (
        lambda m: F.cosine_similarity(_patch_rows(m), _patch_rows(m), dim=-1),
        ["compared with itself only"],
    ),
    "batch axis kept in the product": (
        lambda m: m.pos_embed[:, 1:] @ m.pos_embed[:, 1:].T,
        ["pos_embed[0, 1:]"],
    ),
    "pos_embed changed in place": (_in_place, ["changed model.pos_embed in place"]),
    "numpy": (lambda m: _cosine_grid(_patch_rows(m), m).detach().numpy(), ["numpy"]),
    "float32 in float64": (lambda m: _cosine_grid(_patch_rows(m).float(), m).double(), ["float32"]),
}


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors of dimension other than 2")
@pytest.mark.parametrize("name", list(POSITION_MISTAKES))
def test_position_similarity_mistakes_are_named(name):
    answer, phrases = POSITION_MISTAKES[name]
    assert_caught(check_position_similarity, answer, *phrases)


def test_position_similarity_reference_passes_on_the_course_models():
    from helpers.models import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=8, patch_size=2, d_model=64, depth=2, num_heads=4, d_ff=128)
    torch.testing.assert_close(_cosine_grid(_patch_rows(model), model).detach(), position_similarity(model))


# ---------------------------------------------------------------- the outside review's catalogue (partial work, more slips)


def _pf(images, p):
    b, c, h, w = images.shape
    return images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, c * p * p)


def patchify_partial(images, patch_size):
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // patch_size, patch_size, w // patch_size, patch_size)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def embedding_partial(images, weight, bias, patch_size):
    patches = _pf(images, patch_size)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def vit_forward_partial(model, images):
    patches = model.patch_embed(images)  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


def position_similarity_partial(model):
    rows = model.pos_embed[0, 1:]  # noqa: F841
    raise NotImplementedError("Exercise: replace this line with your code")


@pytest.mark.parametrize(
    "check, partial",
    [
        (check_patchify, patchify_partial),
        (check_image_patch_embedding, embedding_partial),
        (check_vit_forward, vit_forward_partial),
        (check_position_similarity, position_similarity_partial),
    ],
)
def test_partial_work_is_not_called_not_attempted(check, partial):
    assert_caught(check, partial, "partial work", "unfinished branch")


def patchify_missing_last_grid_row(images, p):
    b, c, h, w = images.shape
    rows = [
        images[:, :, i * p : (i + 1) * p, j * p : (j + 1) * p].reshape(b, -1) for i in range(h // p - 1) for j in range(w // p)
    ]
    return torch.stack(rows, 1)


def test_patchify_off_by_one_grid_is_named():
    assert_caught(check_patchify, patchify_missing_last_grid_row, "off-by-one", "range(H // p)")


def test_patch_embedding_softmax_is_named():
    assert_caught(check_image_patch_embedding, lambda x, w, b, p: torch.softmax(_pf(x, p) @ w.T + b, dim=-1), "softmax", "linear")


def _vit_tokens(model, images, tokens):
    for block in model.blocks:
        tokens = block(tokens)
    return model.head(model.norm(tokens)[:, 0])


def vit_class_token_twice(model, images):
    cls = model.cls_token.expand(images.shape[0], -1, -1)
    x = torch.cat([cls, cls, model.patch_embed(images)], 1) + torch.cat([model.pos_embed[:, :1], model.pos_embed], 1)
    return _vit_tokens(model, images, x)


def vit_class_token_twice_after_positions(model, images):
    cls = model.cls_token.expand(images.shape[0], -1, -1)
    return _vit_tokens(model, images, torch.cat([cls, torch.cat([cls, model.patch_embed(images)], 1) + model.pos_embed], 1))


def vit_class_token_added_to_every_patch(model, images):
    return _vit_tokens(model, images, model.patch_embed(images) + model.cls_token + model.pos_embed[:, 1:])


def vit_softmax_over_the_batch(model, images):
    x = torch.cat([model.cls_token.expand(images.shape[0], -1, -1), model.patch_embed(images)], 1) + model.pos_embed
    return torch.softmax(_vit_tokens(model, images, x), dim=0)


@pytest.mark.parametrize(
    "wrong, phrase",
    [
        (vit_class_token_twice, "prepended twice"),
        (vit_class_token_twice_after_positions, "prepended twice"),
        (vit_class_token_added_to_every_patch, "added to every patch embedding"),
        (vit_softmax_over_the_batch, "softmax over the batch"),
    ],
)
def test_vit_forward_review_mistakes_are_named(wrong, phrase):
    assert_caught(check_vit_forward, wrong, phrase)


def patchify_conv_identity(images, p):
    c = images.shape[1]
    eye = torch.eye(c * p * p, dtype=images.dtype, device=images.device).reshape(c * p * p, c, p, p)  # (Cpp, C, p, p)
    return F.conv2d(images, eye, stride=p).flatten(2).transpose(1, 2)  # (B, N, C*p*p)


def patchify_einsum(images, p):
    b, c, h, w = images.shape
    grid = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, gh, p, gw, p)
    return torch.einsum("bcipjq->bijcpq", grid).reshape(b, -1, c * p * p)  # (B, N, C*p*p)


def vit_forward_with_pad(model, images):
    x = F.pad(model.patch_embed(images), (0, 0, 1, 0))  # (B, N + 1, d): a zero row in front
    x = x + F.pad(model.cls_token, (0, 0, 0, x.shape[1] - 1)) + model.pos_embed  # the class token in that row
    x = torch.nn.Sequential(*model.blocks)(x)
    return model.head(model.norm(x)).select(1, 0)


def test_review_right_answers_pass():
    assert check_patchify(patchify_conv_identity) is True
    assert check_patchify(patchify_einsum) is True
    assert check_image_patch_embedding(lambda x, w, b, p: torch.einsum("bnk,dk->bnd", _pf(x, p), w) + b) is True
    assert check_vit_forward(vit_forward_with_pad) is True


# A tensor made on the notebook's `device` instead of the inputs': "meta" stands in for CUDA on a CPU-only machine.
_OTHER = "meta"


@pytest.mark.parametrize(
    "check, wrong",
    [
        (check_patchify, lambda x, p: torch.zeros(x.shape[0], 1, 1, dtype=x.dtype, device=_OTHER).expand(x.shape[0], -1, -1)),
        (check_patchify, lambda x, p: _pf(x, p) + torch.zeros(1, dtype=x.dtype, device=_OTHER)),
        (check_image_patch_embedding, lambda x, w, b, p: _pf(x, p) @ w.T + torch.zeros_like(b, device=_OTHER)),
        (
            check_vit_forward,
            lambda m, x: torch.cat([torch.zeros(x.shape[0], 1, 12, dtype=x.dtype, device=_OTHER), m.patch_embed(x)], 1),
        ),
        (
            check_position_similarity,
            lambda m: torch.zeros(m.grid_size**2, m.grid_size, m.grid_size, dtype=m.pos_embed.dtype, device=_OTHER),
        ),
    ],
)
def test_a_tensor_made_on_another_device_is_named(check, wrong):
    assert_caught(check, wrong, "device")
