"""Checks of notebook 08: patchify, the patch embedding, the ViT forward pass, the position embeddings' similarity.

Each compares the student's answer with PyTorch on fresh random inputs of
small, distinct sizes (``F.unfold``, ``F.conv2d``, the model's own forward) and
recognises the typical mistakes by recomputing what each would give.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from helpers.checks._core import (
    ExerciseFailed,
    call_attempt,
    device_mixup_hint,
    exercise,
    expect_close,
    expect_deterministic,
    expect_device,
    expect_tensor,
    forbid_forward,
)

__all__ = ["check_patchify", "check_image_patch_embedding", "check_vit_forward", "check_position_similarity"]


_VIT_DEVICE_FIX = "device=images.device (or model.pos_embed.device), or build new tensors with torch.zeros_like / x.new_zeros"


def _name_the_device(err: ExerciseFailed) -> None:
    """A failure that PyTorch reports as tensors on two devices: name its cause (a tensor made on another device)."""
    hint = device_mixup_hint(err, _VIT_DEVICE_FIX)
    if hint:
        raise ExerciseFailed(f"{str(err).rstrip('.')}. {hint}") from None


def _expect_device(out: object, like: Tensor, what: str) -> None:
    expect_device(out, like, what, "device=x.device, or use torch.zeros_like / x.new_zeros")


# ---------------------------------------------------------------- patchify


def _reference_patches(images: Tensor, p: int) -> Tensor:
    """``F.unfold`` with kernel and stride p: ``(B, C*p*p, N)`` -> ``(B, N, C*p*p)``."""
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)


def _grid(images: Tensor, p: int) -> Tensor:
    b, c, h, w = images.shape
    return images.reshape(b, c, h // p, p, w // p, p)  # (B, C, gh, p, gw, p)


def _patch_mistakes(images: Tensor, p: int) -> dict[str, Tensor]:
    """What the typical wrong ``patchify`` implementations return."""
    b, c, h, w = images.shape
    gh, gw = h // p, w // p
    n, size = gh * gw, c * p * p
    grid = _grid(images, p)
    mistakes = {
        "the patches are numbered column by column (down the first column of the grid first); number them row by row, "
        "as one reads: patch n sits in grid row n // (W/p), column n % (W/p)": grid.permute(0, 4, 2, 1, 3, 5).reshape(b, n, size),
        "the pixels inside each patch are transposed (column index before row index); flatten each patch as (C, p, p), "
        "row before column": grid.permute(0, 2, 4, 1, 5, 3).reshape(b, n, size),
        "the channels are interleaved: each patch is flattened as (p, p, C), channels last; flatten it as (C, p, p), "
        "channel first, the order of a Conv2d weight (d_model, C, p, p) and of F.unfold": (
            grid.permute(0, 2, 4, 3, 5, 1).reshape(b, n, size)
        ),
        "each patch is flattened as (p, p, C) with its rows and columns swapped; flatten it as (C, p, p): channel, then row, "
        "then column": grid.permute(0, 2, 4, 5, 3, 1).reshape(b, n, size),
        "the image was reshaped to (B, N, C*p*p) without moving any axis, so a 'patch' is a run of consecutive pixels "
        "in memory, not a p x p square; reshape to (B, C, H/p, p, W/p, p), permute the two grid axes to the front, "
        "then flatten (a permute that leaves H/p and p side by side, such as permute(0, 2, 3, 1, 4, 5), keeps this "
        "order too: the grid axes are 2 and 4)": images.reshape(b, n, size),
        "the channel axis was not moved next to the patch pixels: from (B, C, H/p, W/p, p, p) permute to "
        "(B, H/p, W/p, C, p, p) before reshaping, or channels of different patches get mixed": (
            grid.permute(0, 1, 2, 4, 3, 5).reshape(b, n, size)
        ),
        "the patches overlap (stride 1, as unfold(2, p, 1)): step by p so that the patches do not overlap and "
        "there are (H/p) * (W/p) of them": F.unfold(images, kernel_size=p, stride=1).transpose(1, 2),
        "the result is F.unfold's layout (B, C*p*p, N); transpose it to (B, N, C*p*p), one row per patch": (
            _reference_patches(images, p).transpose(1, 2)
        ),
        "the patch grid was not flattened: return (B, N, C*p*p) with N = (H/p) * (W/p) patches in one axis, "
        "not (B, H/p, W/p, C*p*p)": _reference_patches(images, p).reshape(b, gh, gw, size),
    }
    p_first = images.reshape(b, c, p, gh, p, gw)  # the sizes of a grid axis and a pixel axis swapped in the reshape
    p_first_message = (
        "the reshape puts p before H/p: (B, C, p, H/p, p, W/p) cuts each side into p runs of H/p pixels, so a 'patch' "
        "gathers pixels H/p apart; reshape to (B, C, H/p, p, W/p, p), the grid index first, then the pixel within the patch"
    )
    mistakes[p_first_message] = p_first.permute(0, 2, 4, 1, 3, 5).reshape(b, n, size)
    mistakes[p_first_message + " "] = p_first.permute(0, 3, 5, 1, 2, 4).reshape(b, n, size)
    mistakes[
        "the permute picks the wrong axes: in (B, C, H/p, p, W/p, p) the grid axes are 2 and 4 and the pixel axes 3 and 5, "
        "so permute(0, 2, 4, 1, 3, 5) gives (B, H/p, W/p, C, p, p); permute(0, 2, 3, 1, 4, 5) moves a pixel axis to the front"
    ] = grid.permute(0, 2, 3, 1, 4, 5).reshape(b, n, size)
    unfolded = F.unfold(images, kernel_size=p, stride=p)  # (B, C*p*p, N)
    mistakes[
        "F.unfold's output (B, C*p*p, N) was reshaped to (B, N, C*p*p), which scrambles it; transpose the last two axes "
        "instead (.transpose(1, 2))"
    ] = unfolded.reshape(b, n, size)
    if h != w:
        mistakes["the height and width of the patch grid are swapped: the grid has H/p rows and W/p columns"] = (
            images.reshape(b, c, gw, p, gh, p).permute(0, 2, 4, 1, 3, 5).reshape(b, n, size)
        )
    if p != 2 and h % 2 == 0 and w % 2 == 0:
        mistakes["the patch size is hard-coded to 2; use the `patch_size` argument"] = _reference_patches(images, 2)
    return mistakes


def _diagnose_patches(actual: Tensor, expected: Tensor, grid_w: int, p: int, label: str) -> None:
    """Name the first wrong patch: right pixels in the wrong order, a patch from elsewhere, or wrong values."""
    if actual.shape != expected.shape or not actual.is_floating_point():
        return
    actual = actual.detach().double()
    expected = expected.double()
    for b in range(expected.shape[0]):
        for n in range(expected.shape[1]):
            got, want = actual[b, n], expected[b, n]
            if torch.allclose(got, want, atol=1e-9):
                continue
            where = f"patch {n} of image {b} (grid row {n // grid_w}, column {n % grid_w})"
            matches = [m for m in range(expected.shape[1]) if torch.allclose(got, expected[b, m], atol=1e-9)]
            if matches:
                m = matches[0]
                raise ExerciseFailed(
                    f"with {label}: {where} holds the pixels of patch {m} (grid row {m // grid_w}, column {m % grid_w}): "
                    "the patches are right but in the wrong order; number them row by row over the grid"
                )
            if torch.allclose(got.sort().values, want.sort().values, atol=1e-9):
                raise ExerciseFailed(
                    f"with {label}: {where} has the right pixels in the wrong order; flatten each patch as (C, p, p): "
                    "channel, then row, then column"
                )
            raise ExerciseFailed(
                f"with {label}: {where} holds the wrong pixels: it should hold "
                f"images[{b}, :, {(n // grid_w) * p}:{(n // grid_w + 1) * p}, "
                f"{(n % grid_w) * p}:{(n % grid_w + 1) * p}] flattened"
            )


def _match_mistakes(actual: Tensor, expected: Tensor, mistakes: dict[str, Tensor], name: str, atol: float = 1e-9) -> None:
    """Raise the message of the first typical mistake that ``actual`` reproduces (same shape, same values)."""
    got = actual.detach().double()
    for message, wrong in mistakes.items():
        wrong = wrong.detach().double()
        if wrong.shape != got.shape or (wrong.shape == expected.shape and torch.allclose(wrong, expected.double(), atol=atol)):
            continue
        if torch.allclose(got, wrong, atol=atol, rtol=1e-7):
            raise ExerciseFailed(f"{name}: {message}")


def _patch_cases() -> list[tuple[str, Tensor, int]]:
    return [
        ("images of shape (2, 1, 8, 8) and patch_size=2", torch.randn(2, 1, 8, 8, dtype=torch.float64), 2),
        ("images of shape (2, 3, 6, 6) and patch_size=3", torch.randn(2, 3, 6, 6, dtype=torch.float64), 3),
        ("images of shape (2, 3, 6, 6) and patch_size=2", torch.randn(2, 3, 6, 6, dtype=torch.float64), 2),
        ("images of shape (3, 2, 4, 6) and patch_size=2", torch.randn(3, 2, 4, 6, dtype=torch.float64), 2),
    ]


def _expect_patch_shape(out: Tensor, images: Tensor, p: int, label: str, what: str = "patches") -> None:
    b, c, h, w = images.shape
    n, size = (h // p) * (w // p), c * p * p
    got = tuple(out.shape)
    if got == (b, n, size):
        return
    if out.dim() != 3:
        raise ExerciseFailed(
            f"with {label}: {what} should have 3 axes (batch, patches, values), got shape {got}; expected {(b, n, size)}"
        )
    problems = []
    if got[0] != b:
        problems.append(f"axis 0 (the batch) has size {got[0]}, expected {b}")
    if got[1] != n:
        problems.append(f"there are {got[1]} patches, expected (H/p) * (W/p) = ({h}/{p}) * ({w}/{p}) = {n}")
        if got[1] in ((h // p - 1) * (w // p), (h // p) * (w // p - 1), (h // p - 1) * (w // p - 1)):
            problems.append(
                "one row or column of the grid is missing, an off-by-one: loop over range(H // p) and range(W // p), "
                "and patch (i, j) is images[:, :, i*p:(i+1)*p, j*p:(j+1)*p]"
            )
    if got[2] != size:
        problems.append(f"each patch vector has {got[2]} values, expected C * p * p = {c} * {p} * {p} = {size}")
    raise ExerciseFailed(f"with {label}: {what} have shape {got}, expected {(b, n, size)}: " + "; ".join(problems))


@exercise("patchify")
def check_patchify(patchify: Callable[[Tensor, int], Tensor]) -> None:
    """Check ``patchify(images, patch_size) -> (B, N, C*p*p)`` against ``F.unfold`` with kernel and stride p."""
    passed_one_channel = passed_square_channels = False
    for label, images, p in _patch_cases():
        original = images.clone()
        try:
            out = call_attempt(patchify, images, p, what=label)
        except ExerciseFailed as err:
            _name_the_device(err)
            if passed_square_channels and images.shape[2] != images.shape[3]:
                raise ExerciseFailed(
                    f"{str(err).split('. The sizes asked for')[0].rstrip('.')}; your patchify works for square images but "
                    f"not for H = {images.shape[2]} != W = {images.shape[3]}: take the grid's width from W, "
                    "reshape to (B, C, H // p, p, W // p, p)"
                ) from None
            if passed_one_channel and images.shape[1] > 1:
                raise ExerciseFailed(
                    f"{str(err).split('. The sizes asked for')[0].rstrip('.')}; your patchify works for one channel but not "
                    f"for C = {images.shape[1]}: keep the channel axis, "
                    "reshape to (B, C, H/p, p, W/p, p)"
                ) from None
            raise
        _expect_device(out, images, f"the patches for {label}")
        out = expect_tensor(out, f"patchify with {label}")
        if not torch.equal(images, original):
            raise ExerciseFailed(f"with {label}: patchify changed its input images in place; leave them untouched")
        expected = _reference_patches(images, p)
        _match_mistakes(out, expected, _patch_mistakes(images, p), f"patches with {label}")
        _expect_patch_shape(out, images, p, label)
        if out.dtype != images.dtype:
            raise ExerciseFailed(
                f"with {label}: patchify changed the dtype from {images.dtype} to {out.dtype}; keep the input's dtype"
            )
        _diagnose_patches(out, expected, images.shape[-1] // p, p, label)
        expect_close(out, expected, f"patches with {label}", atol=1e-9, rtol=1e-7)
        passed_one_channel = passed_one_channel or images.shape[1] == 1
        passed_square_channels = passed_square_channels or (images.shape[1] > 1 and images.shape[2] == images.shape[3])


# ---------------------------------------------------------------- patch embedding


def _embed_reference(images: Tensor, weight: Tensor, bias: Tensor, p: int) -> Tensor:
    """The patch embedding as a convolution: ``Conv2d(C, d, p, stride=p)``, flattened and transposed."""
    d, c = weight.shape[0], images.shape[1]
    conv = F.conv2d(images, weight.reshape(d, c, p, p), bias, stride=p)  # (B, d, H/p, W/p)
    return conv.flatten(2).transpose(1, 2)  # (B, N, d)


def _embed_mistakes(images: Tensor, weight: Tensor, bias: Tensor, p: int) -> dict[str, Tensor]:
    b, c, h, w = images.shape
    d = weight.shape[0]
    right = _embed_reference(images, weight, bias, p)
    conv = F.conv2d(images, weight.reshape(d, c, p, p), bias, stride=p)  # (B, d, gh, gw)
    grid = _grid(images, p)
    n, size = (h // p) * (w // p), c * p * p

    def project(patches: Tensor) -> Tensor:
        return patches @ weight.T + bias

    mistakes = {
        "the bias is missing: add `bias` after multiplying by the weight": right - bias,
        "the bias is added twice": right + bias,
        "a softmax was applied over the embedding's features; the patch embedding is linear, patches @ weight.T + bias": (
            torch.softmax(right, dim=-1)
        ),
        "the patch embedding is linear: there is no activation (GELU, ReLU, tanh) after the projection": F.gelu(right),
        "the patch embedding is linear: there is no ReLU after the projection": F.relu(right),
        "the patch embedding is linear: there is no tanh after the projection": torch.tanh(right),
        "the embeddings are scaled by sqrt(d_model), as token embeddings were in the original Transformer; "
        "the ViT's patch embedding is just patches @ weight.T + bias": right * d**0.5,
        "the result is in the convolution's layout (B, d_model, N); transpose it to (B, N, d_model), one row per patch": (
            right.transpose(1, 2)
        ),
        "the result is the convolution's output (B, d_model, H/p, W/p); flatten the grid and transpose to (B, N, d_model)": conv,
        "the patches are numbered column by column; number them row by row over the grid (patchify's order)": project(
            grid.permute(0, 4, 2, 1, 3, 5).reshape(b, n, size)
        ),
        "each patch is flattened as (p, p, C), channels last, but the weight expects (C, p, p), the order of "
        "patchify and of a Conv2d weight (d_model, C, p, p)": project(grid.permute(0, 2, 4, 3, 5, 1).reshape(b, n, size)),
        "the pixels inside each patch are transposed (column before row); flatten each patch as (C, p, p)": project(
            grid.permute(0, 2, 4, 1, 5, 3).reshape(b, n, size)
        ),
        "the image was reshaped to (B, N, C*p*p) without cutting it into p x p patches; use patchify": (
            project(images.reshape(b, n, size))
        ),
        "the patches overlap (a stride of 1); the convolution inside ViT has kernel size and stride p": F.conv2d(
            images, weight.reshape(d, c, p, p), bias, stride=1
        )
        .flatten(2)
        .transpose(1, 2),
    }
    mistakes["the patches are not projected: multiply them by weight.T and add bias"] = _reference_patches(images, p)
    if d == size:
        mistakes["the bias is added to the patches before the product; add it after: patches @ weight.T + bias"] = (
            _reference_patches(images, p) + bias
        ) @ weight.T
    mistakes[
        "the convolution's output (B, d_model, N) was reshaped to (B, N, d_model), which scrambles it; "
        "transpose the last two axes instead (.transpose(1, 2))"
    ] = conv.flatten(2).reshape(b, n, d)
    if d == size:
        mistakes[
            "the weight is not transposed: it is stored as nn.Linear's, (d_model, C*p*p), so compute patches @ weight.T + bias "
            "(or F.linear(patches, weight, bias))"
        ] = _reference_patches(images, p) @ weight + bias
    return mistakes


def _embed_error_hint(message: str, size: int, d: int, p: int) -> str:
    """Why the patch embedding's product failed, read off PyTorch's message."""
    found = re.search(r"cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", message)
    if found:
        width = int(found.group(2))
        if width != size and width != d:
            return (
                f"; the patches have {width} values each, but with patch_size = {p} they have C * p * p = {size}: use the "
                "patch_size argument (not the notebook's patch size) in patchify"
            )
    found = re.search(r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\)", message)
    if found and int(found.group(1)) == size and int(found.group(2)) == d:
        return (
            f"; the bias (d_model = {d} entries) was added to the patches ({size} values each): add it after the product, "
            "patches @ weight.T + bias"
        )
    return _TRANSPOSE_HINT


_MATMUL_ERRORS = ("cannot be multiplied", "size mismatch", "must match the size", "Expected size")
_TRANSPOSE_HINT = (
    "; the weight is stored as nn.Linear's, (d_model, C*p*p): compute patches @ weight.T + bias "
    "(or F.linear(patches, weight, bias))"
)


@exercise("patch embedding")
def check_image_patch_embedding(patch_embedding: Callable[[Tensor, Tensor, Tensor, int], Tensor]) -> None:
    """Check ``patch_embedding(images, weight, bias, patch_size) -> (B, N, d_model)`` against ``F.conv2d``.

    ``weight`` is ``(d_model, C*p*p)`` and ``bias`` ``(d_model,)``, as in
    ``nn.Linear(C*p*p, d_model)``; the reference is a convolution with kernel
    size and stride p whose weight is ``weight.reshape(d_model, C, p, p)``.
    """
    cases = [
        ((2, 3, 6, 6), 3, 5),
        ((3, 1, 8, 8), 2, 4),  # C*p*p = d_model: a missing transpose does not crash here
        ((2, 2, 4, 6), 2, 7),
    ]
    for shape, p, d in cases:
        images = torch.randn(*shape, dtype=torch.float64)
        size = shape[1] * p * p
        weight = torch.randn(d, size, dtype=torch.float64) / size**0.5
        bias = torch.randn(d, dtype=torch.float64)
        label = f"images {shape}, weight ({d}, {size}), bias ({d},), patch_size={p}"
        try:
            out = call_attempt(patch_embedding, images, weight, bias, p, what=label)
        except ExerciseFailed as err:
            _name_the_device(err)
            message = str(err)
            if any(phrase in message for phrase in _MATMUL_ERRORS):
                raise ExerciseFailed(message + _embed_error_hint(message, size, d, p)) from None
            raise
        _expect_device(out, images, f"the embeddings for {label}")
        expected = _embed_reference(images, weight, bias, p)
        if isinstance(out, Tensor) and out.shape == expected.shape:
            same = call_attempt(patch_embedding, images, weight, bias, p, what=label)
            if isinstance(same, Tensor) and same.shape == out.shape and not torch.equal(same.detach(), out.detach()):
                raise ExerciseFailed(
                    f"with {label}: the embeddings change from one call to the next on the same inputs: something random "
                    "runs inside (a new nn.Linear has fresh random weights each time); use the weight and bias you are "
                    "given, patches @ weight.T + bias"
                )
            again = call_attempt(patch_embedding, images, 2 * weight, bias + 1.0, p, what=label)
            if isinstance(again, Tensor) and torch.allclose(again.detach().double(), out.detach().double()):
                raise ExerciseFailed(
                    f"with {label}: the embeddings do not change when `weight` and `bias` change: use the weight and bias "
                    "you are given (patches @ weight.T + bias); a new nn.Linear inside the function has weights of its own"
                )
        mistakes = _embed_mistakes(images, weight, bias, p)
        expect_close(out, expected, f"the embeddings with {label}", atol=1e-8, rtol=1e-6, mistakes=mistakes)


# ---------------------------------------------------------------- ViT forward pass


def _vit_variants(model, images: Tensor) -> dict[str, Tensor]:
    """Outputs of typical wrong forward passes, built from the model's own submodules."""
    b = images.shape[0]
    patches = model.patch_embed(images)  # (B, N, d)
    n = patches.shape[1]
    cls = model.cls_token.expand(b, -1, -1)  # (B, 1, d)
    pos = model.pos_embed  # (1, N + 1, d)

    def blocks(x: Tensor, which=None) -> Tensor:
        for block in model.blocks if which is None else which:
            x = block(x)
        return x

    def head_cls(x: Tensor) -> Tensor:
        return model.head(model.norm(x)[:, 0])

    with_cls = torch.cat([cls, patches], dim=1)  # (B, N + 1, d)
    right_tokens = with_cls + pos
    out = blocks(right_tokens)
    variants = {
        "the class token is missing: prepend model.cls_token (expanded to the batch) to the patch embeddings, add the "
        "position embeddings, and give the head the class token's output (index 0)": head_cls(blocks(patches + pos[:, 1:])),
        "the class token is missing (the head reads the first patch): prepend model.cls_token, expanded to the batch, "
        "before the blocks": head_cls(blocks(patches + pos[:, :n])),
        "the class token is missing and the head is applied to the mean of the patches; prepend model.cls_token "
        "and read the head's input from it (index 0)": model.head(model.norm(blocks(patches + pos[:, 1:])).mean(1)),
        "the position embeddings are not added: add model.pos_embed to the tokens (after prepending the class token)": (
            head_cls(blocks(with_cls))
        ),
        "the position embeddings were added before prepending the class token: model.pos_embed has N + 1 rows, row 0 "
        "for the class token, so concatenate first, then add": head_cls(blocks(torch.cat([cls, patches + pos[:, 1:]], 1))),
        "the position embeddings were added before prepending the class token (with rows 0..N-1): model.pos_embed has "
        "N + 1 rows, row 0 for the class token, so concatenate first, then add": (
            head_cls(blocks(torch.cat([cls, patches + pos[:, :n]], 1)))
        ),
        "the head is applied to the mean over all tokens; apply it to the class token's output, x[:, 0]": (
            model.head(model.norm(out).mean(1))
        ),
        "the head is applied to the mean over the patch tokens; apply it to the class token's output, x[:, 0]": model.head(
            model.norm(out)[:, 1:].mean(1)
        ),
        "the head reads the last token; the class token is the first one, x[:, 0]": model.head(model.norm(out)[:, -1]),
        "the final layer norm is missing: with pre-LN blocks the output is not normalised, apply model.norm before the head": (
            model.head(out[:, 0])
        ),
        "the class token was appended at the end; prepend it (position 0, the row of pos_embed that belongs to it)": model.head(
            model.norm(blocks(torch.cat([patches, cls], 1) + pos))[:, -1]
        ),
        "the class token was appended at the end (and the head reads token 0); prepend it and read x[:, 0]": head_cls(
            blocks(torch.cat([patches, cls], 1) + pos)
        ),
        "the encoder blocks are skipped: pass the tokens through every block of model.blocks": head_cls(right_tokens),
        "the layer norm is applied to the tokens before the blocks instead of after them; "
        "apply model.norm after the last block": model.head(blocks(model.norm(right_tokens))[:, 0]),
        "the head is applied to every token; apply it to the class token's output only, x[:, 0]": model.head(model.norm(out)),
        "the head is applied to the mean over all tokens (taken before the final norm); apply model.norm, then the "
        "head to the class token's output, x[:, 0]": model.head(model.norm(out.mean(1))),
        "model.norm is applied after every block; apply it once, after the last block": head_cls(
            _each_block_then_norm(model, right_tokens)
        ),
        "softmax was applied to the output; return the logits (F.cross_entropy applies log-softmax itself)": torch.softmax(
            head_cls(out), dim=-1
        ),
        "the head got x[:, 0:1] (or x[:, :1]), which keeps a token axis of size 1, so the logits have 3 axes; x[:, 0] "
        "gives one vector per image": model.head(model.norm(out)[:, :1]),
        "the head got x[0], the tokens of the first image; the class token of every image is x[:, 0]": model.head(
            model.norm(out)[0]
        ),
        "the head reads token 1, the first patch; the class token was prepended, so it is token 0, x[:, 0]": model.head(
            model.norm(out)[:, 1]
        ),
        "the class token was added to every patch embedding instead of prepended as a token of its own: "
        "torch.cat([model.cls_token.expand(batch, -1, -1), patches], dim=1) makes N + 1 tokens": head_cls(
            blocks(patches + model.cls_token + pos[:, 1:])
        ),
        "the class token was prepended twice: prepend one copy, torch.cat([cls, patches], dim=1), so that the tokens "
        "match model.pos_embed's N + 1 rows": head_cls(
            blocks(torch.cat([cls, cls, patches], 1) + torch.cat([pos[:, :1], pos], 1))
        ),
        "the class token was prepended twice (and the position embeddings padded to match): prepend one copy, "
        "torch.cat([cls, patches], dim=1)": head_cls(blocks(torch.cat([cls, right_tokens], 1))),
        "a softmax over the batch (dim=0) was applied to the output; return the logits themselves (F.cross_entropy "
        "applies log-softmax itself, over the classes)": torch.softmax(head_cls(out), dim=0),
    }
    if len(model.blocks) > 1:
        variants["the blocks run in reverse order: apply them as they are listed, for block in model.blocks"] = head_cls(
            blocks(right_tokens, list(model.blocks)[::-1])
        )
    if len(model.blocks) > 1:
        variants["only the first encoder block is applied: loop over all of model.blocks"] = head_cls(
            blocks(right_tokens, model.blocks[:1])
        )
        variants["only the last encoder block is applied: loop over all of model.blocks"] = head_cls(
            blocks(right_tokens, model.blocks[-1:])
        )
    return variants


def _each_block_then_norm(model, x: Tensor) -> Tensor:
    for block in model.blocks[:-1]:
        x = model.norm(block(x))
    return model.blocks[-1](x)  # head_cls applies the last norm


_EXPAND_HINT = (
    "; model.cls_token is (1, 1, d_model): expand it to the batch, model.cls_token.expand(batch, -1, -1), "
    "then torch.cat([cls, patches], dim=1)"
)


@exercise("ViT forward pass")
def check_vit_forward(vit_forward: Callable) -> None:
    """Check ``vit_forward(model, images) -> logits (B, num_classes)`` against the model's own forward.

    Uses a small random ``helpers.models.VisionTransformer`` (6 x 6 images with 2
    channels, 3 x 3 patches of 2 x 2, width 12, 3 heads, 2 blocks, 7 classes) in
    float64, with a large random class token and position embeddings so that
    forgetting either shows.
    """
    from helpers.models.vit import VisionTransformer

    model = (
        VisionTransformer(image_size=6, patch_size=2, in_channels=2, num_classes=7, d_model=12, depth=2, num_heads=3, d_ff=20)
        .double()
        .eval()
    )
    with torch.no_grad():
        model.cls_token.normal_()
        model.pos_embed.normal_()
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.normal_(0, 0.5)
    images = torch.rand(3, 2, 6, 6, dtype=torch.float64)
    shortcut = (
        "your function calls the model itself (`model(images)` or `model.forward(images)`), the forward pass it should "
        "write; build it from model.patch_embed, model.cls_token, model.pos_embed, model.blocks, model.norm and model.head"
    )
    with torch.no_grad():
        expected = model(images)
        label = (
            "a VisionTransformer(image_size=6, patch_size=2, in_channels=2, d_model=12, depth=2, num_classes=7) "
            "and images (3, 2, 6, 6)"
        )
        try:
            with forbid_forward(model, shortcut):  # calling model.blocks(x) is caught by `call` (not the stub)
                out = call_attempt(vit_forward, model, images, what=label)
                again = call_attempt(vit_forward, model, images, what=label)
        except ExerciseFailed as err:
            _name_the_device(err)
            message = str(err)
            if "Sizes of tensors must match" in message or "same number of dimensions" in message:
                raise ExerciseFailed(message + _EXPAND_HINT) from None
            if "must match the size of tensor b" in message:
                raise ExerciseFailed(
                    f"{message.rstrip('.')}; model.pos_embed has N + 1 = {model.pos_embed.shape[1]} rows, one for the class "
                    "token and one per patch: prepend the class token with torch.cat (adding it to the patches does not "
                    "make a new token), then add model.pos_embed"
                ) from None
            raise
        _expect_device(out, images, "the logits")
        expect_deterministic(
            out,
            again,
            "the logits",
            "dropout is left active. F.dropout(h, p) drops at random even in eval "
            "mode (its default is training=True); the model's own modules follow model.eval(): use them",
        )
        expect_close(out, expected, "the logits", atol=1e-8, rtol=1e-6, mistakes=_vit_variants(model, images))


# ---------------------------------------------------------------- what the position embeddings learned


def _similarity_model(grid: int, d_model: int, dtype: torch.dtype):
    """A small ViT whose position embeddings are random, off-centre (a mean per feature) and whose class row stands out."""
    from helpers.models.vit import VisionTransformer

    model = VisionTransformer(image_size=2 * grid, patch_size=2, d_model=d_model, depth=1, num_heads=1, d_ff=8).to(dtype)
    with torch.no_grad():
        model.pos_embed.normal_()
        model.pos_embed.add_(torch.linspace(-1.0, 2.0, d_model, dtype=dtype))  # a mean per feature: correlation != cosine
        model.pos_embed[0, 0].mul_(3.0).add_(1.5)  # the class token's row, unlike any patch's
    return model


def _similarity_mistakes(pos: Tensor, grid: int) -> dict[str, Tensor]:
    """What the typical wrong answers return, from the position embeddings ``(1, N + 1, d)`` in float64."""
    n = grid * grid
    rows = pos[0, 1:]  # (N, d)
    unit = F.normalize(rows, dim=-1)  # (N, d)
    right = unit @ unit.T  # (N, N)

    def grid_of(matrix: Tensor) -> Tensor:
        return matrix.reshape(n, grid, grid)

    last_dropped = F.normalize(pos[0, :-1], dim=-1)  # (N, d): rows 0..N-1, the class token's in, the last patch's out
    centred = F.normalize(rows - rows.mean(-1, keepdim=True), dim=-1)  # Pearson correlation of the features
    across = F.normalize(rows, dim=0)  # each feature scaled over the patches
    return {
        "the class token's row was compared instead of the last patch's: model.pos_embed[0, :-1] keeps row 0 (the class "
        "token's) and drops patch N-1's; the patches' rows are model.pos_embed[0, 1:]": grid_of(last_dropped @ last_dropped.T),
        "the dot products are not normalised: a cosine similarity divides by both vectors' lengths, so that every "
        "patch has similarity 1 with itself; normalise each row first (F.normalize(pos, dim=-1))": grid_of(rows @ rows.T),
        "only one side is normalised: divide by the lengths of both embeddings (normalise the rows, then pos @ pos.T)": (
            grid_of(unit @ rows.T)
        ),
        "the normalisation runs over the wrong axis (over the patches, dim=0): normalise each embedding, a row, over its "
        "features (dim=-1)": grid_of(across @ across.T),
        "this is the correlation (the mean of each embedding subtracted first); the cosine similarity uses the "
        "embeddings as they are": grid_of(centred @ centred.T),
        "this is the cosine distance, 1 - cosine similarity: return the similarity itself (1 on the diagonal)": grid_of(
            1 - right
        ),
        "the distances between embeddings came back (torch.cdist); the exercise asks for cosine similarities": grid_of(
            torch.cdist(rows, rows)
        ),
        "a softmax was applied (as in attention); return the cosine similarities themselves, each between -1 and 1": (
            grid_of(torch.softmax(right, dim=-1))
        ),
        "the scaled dot products of attention (divided by sqrt(d)) came back; the cosine similarity divides by both "
        "embeddings' lengths instead": grid_of(rows @ rows.T / rows.shape[-1] ** 0.5),
        "the grid is transposed: panel n's entry [i, j] must be the patch in grid row i, column j, which is "
        "similarity[n, i * g + j]: reshape(N, g, g) without a transpose": grid_of(right).transpose(1, 2),
    }


def _similarity_shape_hint(got: tuple[int, ...], n: int, grid: int) -> str:
    if got in ((n + 1, n + 1), (1, n + 1, n + 1)):
        return (
            "the class token's row is still in: row 0 of model.pos_embed[0] is the class token's, so compare the "
            f"patches' rows, model.pos_embed[0, 1:] ({n} of them), and reshape to (N, g, g) = ({n}, {grid}, {grid})"
        )
    if got in ((n, n), (1, n, n)):
        return (
            f"the matrix of similarities is right-sized but not laid out on the grid: reshape it to (N, g, g) = "
            f"({n}, {grid}, {grid}) with g = model.grid_size, so that panel n is a {grid} x {grid} picture"
        )
    if got in ((n,), (n + 1,), (1, n), (1, n + 1)):
        return (
            "there is one number per patch: each embedding was compared with itself only. Compare every pair: "
            "F.normalize(pos, dim=-1) @ F.normalize(pos, dim=-1).T, or "
            "F.cosine_similarity(pos[:, None], pos[None, :], dim=-1)"
        )
    return ""


@exercise("position similarity")
def check_position_similarity(position_similarity: Callable) -> None:
    """Check ``position_similarity(model) -> (N, g, g)``: the cosine similarities of the patches' position embeddings.

    Entry ``[n, i, j]`` compares patch ``n``'s row of ``model.pos_embed`` with that of the patch in grid row ``i``,
    column ``j`` (patch ``i * g + j``); the class token's row 0 is left out. Runs on small ViTs whose position
    embeddings are random and off-centre (3 x 3 patches in float64, 4 x 4 in float32, the notebook's case) and
    compares with a float64 computation.
    """
    for grid, d_model, dtype in ((3, 5, torch.float64), (4, 6, torch.float32)):
        model = _similarity_model(grid, d_model, dtype)
        n = grid * grid
        before = model.pos_embed.detach().clone()
        label = f"a ViT with a {grid} x {grid} grid of patches, pos_embed {tuple(before.shape)} ({dtype})"
        try:
            out = call_attempt(position_similarity, model, what=label)
        except ExerciseFailed as err:
            _name_the_device(err)
            message = str(err)
            if f"input of size {(n + 1) ** 2}" in message:
                raise ExerciseFailed(
                    f"{message.split('. The sizes asked for')[0].rstrip('.')}; {(n + 1) ** 2} = (N + 1)^2 similarities: "
                    "the class token's row is still in; compare the patches' rows only, model.pos_embed[0, 1:]"
                ) from None
            if "must match the size" in message or "cannot be multiplied" in message or "Expected size" in message:
                raise ExerciseFailed(
                    f"{message.rstrip('.')}; model.pos_embed is (1, N + 1, d): take model.pos_embed[0, 1:], an (N, d) "
                    "matrix, so that pos @ pos.T is (N, N)"
                ) from None
            raise
        if not torch.equal(model.pos_embed.detach(), before):
            raise ExerciseFailed(
                "your function changed model.pos_embed in place (a `/=` or a method ending in `_` on a view of it): "
                "compute new tensors and leave the model's parameters as they were"
            )
        _expect_device(out, before, f"the similarities for {label}")
        out = expect_tensor(out, f"the similarities for {label}")
        expected = F.normalize(before.double()[0, 1:], dim=-1)  # (N, d)
        expected = (expected @ expected.T).reshape(n, grid, grid)  # (N, g, g)
        hint = _similarity_shape_hint(tuple(out.shape), n, grid)
        if hint:
            raise ExerciseFailed(f"the similarities for {label} have shape {tuple(out.shape)}: {hint}")
        expect_close(
            out,
            expected,
            f"the similarities for {label}",
            atol=1e-9,
            rtol=1e-7,
            mistakes=_similarity_mistakes(before.double(), grid),
        )
