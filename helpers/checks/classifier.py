"""Checks of notebook 07: the patch embedding, the classifier's forward pass, one training step, the choice of a
learning rate on validation curves, and what the attention maps say.

Each runs the student's code next to the reference on fresh random inputs
(PyTorch's ``F.conv1d`` for the patches, ``helpers.models.TransformerClassifier``
for the forward pass, a copy of the same model and optimiser for the step,
``helpers.training.choose_learning_rate`` on made-up validation curves, random
attention maps whose rows sum to 1) and names the typical mistakes.
"""

from __future__ import annotations

import copy
import numbers
import re

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.checks._core import (
    ExerciseFailed,
    NotAttempted,
    call,
    exercise,
    expect_close,
    expect_deterministic,
    expect_tensor,
    forbid_forward,
    is_stub_error,
    more_than_the_stub,
    not_a_stub_message,
    require_attempt,
)
from helpers.models.classifier import TransformerClassifier
from helpers.training import History

__all__ = [
    "check_patch_embedding",
    "check_classifier_forward",
    "check_train_step",
    "check_choose_learning_rate",
    "check_attention_summary",
]


_PARTIAL = (
    "it reached a `raise NotImplementedError` that is still in your code: the rest of the function is written, so this "
    "is partial work, not an exercise left untouched; finish it (or remove the raise)"
)


def _attempt(fn, *args, source: object = None, what: str | None = None):
    """``call``, except that the stub's ``NotImplementedError`` after real code (partial work) is a named failure.

    ``source`` is the function whose body is read (a module's ``forward``, where ``fn`` is the module).
    """
    try:
        return call(fn, *args, what=what)
    except NotAttempted:
        if not more_than_the_stub(source if source is not None else fn):
            raise
        name = getattr(fn, "__name__", type(fn).__name__)
        raise ExerciseFailed(f"calling your `{name}` with {what}: {_PARTIAL}") from None


# ---------------------------------------------------------------- patch embedding


def _patch_reference(x: Tensor, proj: nn.Linear, patch_size: int, stride: int) -> Tensor:
    """Patches by PyTorch's own sliding window: a 1-D convolution whose kernel is the projection."""
    kernel = proj.weight[:, None, :]  # (d_model, 1, patch_size)
    return F.conv1d(x[:, None, :], kernel, proj.bias, stride=stride).transpose(1, 2)  # (batch, num_patches, d_model)


def _patch_mistakes(x: Tensor, proj: nn.Linear, p: int, s: int) -> dict[str, Tensor]:
    n = (x.shape[1] - p) // s + 1
    good = x.unfold(1, p, s)  # (batch, n, p)
    return {
        f"the stride is ignored: patches start at every sample (step 1) instead of every {s}th; use x.unfold(1, patch_size, stride)": proj(
            x.unfold(1, p, 1)
        ),
        f"the patches do not overlap (step = patch_size = {p}); consecutive patches start `stride` = {s} samples apart": proj(
            x.unfold(1, p, p)
        ),
        "the patches are not projected: apply self.proj (nn.Linear(patch_size, d_model)) to each patch": good,
        "the projection's bias is missing: use self.proj(patches), not only its weight": good @ proj.weight.T,
        f"one patch short: a signal of length {x.shape[1]} holds (length - patch_size) // stride + 1 = {n} patches, the last one included": proj(
            good[:, :-1]
        ),
        "the output is transposed: return (batch, num_patches, d_model)": proj(good).transpose(1, 2),
        "each patch is reversed in time (flip): keep the samples in order, x[:, i*stride : i*stride + patch_size]": proj(
            good.flip(-1)
        ),
        f"window i starts at sample i instead of i * stride (the stride is ignored in the loop): x[:, i * stride : "
        f"i * stride + patch_size] for i in range({n}), or x.unfold(1, patch_size, stride)": proj(x.unfold(1, p, 1)[:, :n]),
        "an activation was applied after the projection; the patch embedding is linear: return self.proj(patches)": torch.relu(
            proj(good)
        ),
        "the batch axis and the patch axis are swapped (the windows were cut from x.T, or the result transposed): "
        "return (batch, num_patches, d_model)": proj(good).transpose(0, 1),
    }


def _patch_error_hint(message: str, batch: int, length: int, p: int, s: int) -> str:
    """Why a patch embedding crashed, read off PyTorch's message (an empty string if nothing to say)."""
    found = re.search(r"cannot be multiplied \((\d+)x(\d+) and", message)
    if found:
        width = int(found.group(2))
        if width == length:
            return (
                f"self.proj was applied to the whole signal of {length} samples; cut it into windows first, "
                f"patches = x.unfold(1, patch_size, stride), then self.proj(patches) maps each window of {p} samples"
            )
        n = (length - p) // s + 1
        if width == n and n != s:
            return (
                f"self.proj received windows of shape (batch, patch_size, num_patches) = (..., {p}, {n}): the windows were "
                "transposed. x.unfold(1, patch_size, stride) already puts each window's samples on the last axis, the one "
                "nn.Linear acts on: apply self.proj to it as it is"
            )
        if width == s:
            return (
                f"The windows have {s} samples, the stride, not patch_size = {p}: x.unfold(1, size, step) takes the "
                "window size first and the step second"
            )
        return (
            f"The windows have {width} samples but this PatchEmbedding has patch_size = {p} (stride {s}): use "
            "self.patch_size and self.stride, not the sizes of the notebook's model"
        )
    if "maximum size for tensor at dimension 0" in message:
        return (
            f"x.unfold(0, ...) cuts along the batch axis (size {batch}); the signal runs along axis 1: "
            "x.unfold(1, self.patch_size, self.stride)"
        )
    if "stack expects each tensor to be equal size" in message:
        return (
            f"The windows at the end are shorter than patch_size: the last window starts at length - patch_size, so "
            f"the starts are 0, stride, ..., up to {length} - {p} (range(0, length - patch_size + 1, stride))"
        )
    return ""


@exercise("patch embedding")
def check_patch_embedding(PatchEmbedding) -> None:
    """Check ``PatchEmbedding(patch_size, stride, d_model)``: ``(batch, length) -> (batch, num_patches, d_model)``."""
    require_attempt(PatchEmbedding, "PatchEmbedding")
    for batch, length, p, s, d in ((2, 20, 5, 3, 7), (3, 40, 8, 2, 6)):
        label = f"PatchEmbedding(patch_size={p}, stride={s}, d_model={d})"
        module = call(PatchEmbedding, p, s, d, what=f"patch_size={p}, stride={s}, d_model={d}")
        proj = getattr(module, "proj", None)
        if not isinstance(proj, nn.Linear):
            raise ExerciseFailed(
                f"{label} has no attribute `proj` holding an nn.Linear; create self.proj = nn.Linear(patch_size, d_model) in __init__"
            )
        if (proj.in_features, proj.out_features) != (p, d):
            raise ExerciseFailed(
                f"{label}.proj is nn.Linear({proj.in_features}, {proj.out_features}); it maps one patch of {p} samples "
                f"to d_model = {d} features: nn.Linear(patch_size, d_model)"
            )
        module = module.double()
        x = torch.randn(batch, length, dtype=torch.float64)
        with torch.no_grad():
            try:
                out = _attempt(module, x.clone(), source=type(module).forward, what=f"x of shape ({batch}, {length})")
            except ExerciseFailed as err:
                hint = _patch_error_hint(str(err), batch, length, p, s)
                if hint:
                    raise ExerciseFailed(f"{str(err).rstrip('.')}. {hint}") from None
                raise
            expected = _patch_reference(x, proj, p, s)
            _patch_shape_hint(out, expected, label)
            try:
                expect_close(
                    out,
                    expected,
                    f"{label}(x) with x ({batch}, {length})",
                    atol=1e-10,
                    rtol=1e-8,
                    mistakes=_patch_mistakes(x, proj, p, s),
                )
            except ExerciseFailed as err:
                if "differs from the reference" in str(err) and _ignores_proj(module, x):
                    raise ExerciseFailed(
                        f"{label}(x) does not depend on self.proj's weights: a layer created inside forward "
                        "(nn.Linear(...)(patches)) gets new random weights at every call and is never trained. Use the "
                        "self.proj made in __init__: self.proj(patches)"
                    ) from None
                raise


def _patch_shape_hint(out: object, expected: Tensor, label: str) -> None:
    """Name the shapes of the likeliest wrong outputs: an extra axis of size 1, the patches pooled, one patch too many."""
    if not isinstance(out, Tensor) or out.shape == expected.shape:
        return
    batch, n, d = expected.shape
    if tuple(out.shape) == (batch, 1, n, d):
        raise ExerciseFailed(
            f"{label}(x) has an extra axis of size 1, {tuple(out.shape)}: x.unfold(1, patch_size, stride) on the "
            "(batch, length) signal gives (batch, num_patches, patch_size) directly, with no unsqueeze (or a channel "
            "axis left over from a convolution: squeeze it)"
        )
    if tuple(out.shape) == (batch, d):
        raise ExerciseFailed(
            f"{label}(x) is {tuple(out.shape)}, one vector per signal: the patches were pooled (averaged or summed). The "
            f"patch embedding returns one token per patch, (batch, num_patches, d_model) = {tuple(expected.shape)}"
        )
    if tuple(out.shape) == (batch, n + 1, d):
        raise ExerciseFailed(
            f"{label}(x) has {n + 1} patches, one too many: padding the signal adds a window that runs past its end. A "
            f"signal of length L holds (L - patch_size) // stride + 1 = {n} whole windows"
        )


def _ignores_proj(module: nn.Module, x: Tensor) -> bool:
    """True when the module's output stays the same with self.proj's weights and bias changed (proj unused).

    Both calls start from the same random state, so a layer created inside forward gets the same weights in both.
    """

    def run(m: nn.Module) -> object:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            return m(x.clone())

    try:
        probe = copy.deepcopy(module)
        with torch.no_grad():
            first = run(probe)
            probe.proj.weight.mul_(2.0).add_(1.0)
            probe.proj.bias.add_(1.0)
            second = run(probe)
        return (
            isinstance(first, Tensor)
            and isinstance(second, Tensor)
            and first.shape == second.shape
            and bool(torch.allclose(first, second))
        )
    except Exception:
        return False


# ---------------------------------------------------------------- forward pass


def _small_classifier(pooling: str = "cls") -> TransformerClassifier:
    model = (
        TransformerClassifier(
            length=20,
            num_classes=4,
            patch_size=5,
            stride=3,
            d_model=12,
            num_heads=3,
            num_layers=2,
            d_ff=20,
            dropout=0.1,
            pooling=pooling,
        )
        .double()
        .eval()
    )
    with torch.no_grad():  # a zero class token or unit norms would hide mistakes
        if model.cls_token is not None:
            model.cls_token.normal_()
        model.pos_embed.normal_()
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.3)
    return model


def _forward_mistakes(model: TransformerClassifier, x: Tensor) -> dict[str, Tensor]:
    patches = model.patch_embed(x)  # (batch, n, d)
    cls = model.cls_token.expand(x.shape[0], -1, -1)
    tokens = torch.cat([cls, patches], 1) + model.pos_embed

    def blocks(h: Tensor, which=None) -> Tensor:
        for block in which if which is not None else model.blocks:
            h = block(h)
        return h

    head = lambda h: model.head(model.norm(h)[:, 0])  # noqa: E731
    h = blocks(tokens)
    at_end = blocks(torch.cat([patches, cls], 1) + model.pos_embed)
    first = model.blocks[0]
    residual_again = tokens
    for block in model.blocks:
        residual_again = residual_again + block(residual_again)
    return {
        "the position embeddings are not added: tokens = cat([cls, patches]) + model.pos_embed": head(
            blocks(torch.cat([cls, patches], 1))
        ),
        "the classification reads the last token; the class token is the first, h[:, 0]": model.head(model.norm(h)[:, -1]),
        "the tokens are averaged; this model (pooling='cls') classifies from the class token h[:, 0]": model.head(
            model.norm(h).mean(1)
        ),
        "the patch tokens are averaged without the class token; classify from the class token h[:, 0]": model.head(
            model.norm(h)[:, 1:].mean(1)
        ),
        "the class token is appended at the end; prepend it: torch.cat([cls, patches], dim=1)": head(at_end),
        "the class token is appended at the end and read from there; prepend it: torch.cat([cls, patches], dim=1)": model.head(
            model.norm(at_end)[:, -1]
        ),
        "the final layer norm (model.norm) is skipped before the head": model.head(h[:, 0]),
        "the encoder blocks are skipped: run the tokens through every block in model.blocks": head(tokens),
        "only the first encoder block is used: loop over all of model.blocks": head(first(tokens)),
        "the first block is applied twice: loop over the blocks themselves (for block in model.blocks)": head(
            first(first(tokens))
        ),
        "only the last encoder block is used: loop over all of model.blocks": head(model.blocks[-1](tokens)),
        "the logits went through softmax: return the raw logits (cross_entropy applies log-softmax itself)": torch.softmax(
            head(h), -1
        ),
        "the logits went through log-softmax: return the raw logits": torch.log_softmax(head(h), -1),
        "model.norm is applied to the tokens before the blocks; it belongs after them": model.head(
            blocks(model.norm(tokens))[:, 0]
        ),
        "the position embeddings were added before prepending the class token (rows 1.. to the patches, none to the "
        "class token); model.pos_embed has a row for the class token: concatenate first, then add": head(
            blocks(torch.cat([cls, patches + model.pos_embed[:, 1:]], 1))
        ),
        "the position embeddings were added before prepending the class token (its first rows to the patches); "
        "model.pos_embed has a row for the class token, row 0: concatenate first, then add": head(
            blocks(torch.cat([cls, patches + model.pos_embed[:, : patches.shape[1]]], 1))
        ),
        "each block's output was added to its input again (h = h + block(h)); an EncoderBlock already adds its own "
        "residual connections: h = block(h)": head(residual_again),
        "the tokens were max-pooled (h.amax(dim=1)); this model (pooling='cls') classifies from the class token h[:, 0]": (
            model.head(model.norm(h).amax(1))
        ),
        "the final layer norm was computed without model.norm's learned weight and bias (F.layer_norm(h, ...)); use "
        "the model's own layer, model.norm(h)": model.head(F.layer_norm(h, h.shape[-1:])[:, 0]),
        "model.norm was applied twice; once, after the last block, is enough": model.head(model.norm(model.norm(h))[:, 0]),
    }


def _forward_error_hint(message: str, model: TransformerClassifier) -> str:
    """Why a classifier forward pass crashed, read off the error (an empty string if nothing to say)."""
    if "Sizes of tensors must match except in dimension" in message:
        return (
            "model.cls_token is (1, 1, d_model): expand it to the batch, model.cls_token.expand(batch, -1, -1), and "
            "concatenate along the tokens axis, torch.cat([cls, h], dim=1)"
        )
    if "NoneType" in message and model.cls_token is None:
        return (
            "With pooling='mean' the model has no class token (model.cls_token is None): prepend it only when "
            "model.pooling == 'cls', and average the tokens otherwise"
        )
    if "must match the size of tensor b" in message and model.cls_token is not None:
        return (
            f"model.pos_embed has one row per token including the class token, {tuple(model.pos_embed.shape)}: prepend "
            "the class token first, then add the position embeddings to all the tokens"
        )
    return ""


_SHORTCUT = (
    "your classifier_forward calls the model itself (`model(x)` or `model.forward(x)`), which is the forward pass the exercise "
    "asks you to write; write its steps with the model's parts: model.patch_embed, model.cls_token, model.pos_embed, "
    "each block of model.blocks, model.norm and model.head"
)
_DROPOUT_HINT = (
    "dropout is left active. F.dropout(h, p) drops at random even in eval mode (its default is training=True); "
    "the model's own modules follow model.eval(): use them, or leave dropout out of the forward pass"
)


@exercise("classifier forward pass")
def check_classifier_forward(classifier_forward) -> None:
    """Check ``classifier_forward(model, x) -> logits (batch, num_classes)`` against ``TransformerClassifier.forward``.

    First a model with a class token (``pooling="cls"``), then one with mean pooling (``model.cls_token is None``).
    """
    model = _small_classifier()
    before = copy.deepcopy(model.state_dict())
    x = torch.randn(2, 20, dtype=torch.float64)

    def student(m: TransformerClassifier, x_in: Tensor, what: str) -> object:
        with forbid_forward(m, _SHORTCUT):
            try:
                return _attempt(classifier_forward, m, x_in.clone(), what=what)
            except ExerciseFailed as err:
                hint = _forward_error_hint(str(err), m)
                if hint:
                    raise ExerciseFailed(f"{str(err).rstrip('.')}. {hint}") from None
                raise

    with torch.no_grad():
        what = "a TransformerClassifier (patch 5, stride 3, 12 features, 2 blocks) and x (2, 20)"
        out = expect_tensor(student(model, x, what), "the logits")
        expect_deterministic(out, student(model, x, what), "the logits", _DROPOUT_HINT)
        if out.dim() == 3 and out.shape[0] == 2 and out.shape[-1] == 4:
            raise ExerciseFailed(
                f"the logits have shape {tuple(out.shape)}: one row per token. Pool first (the class token, "
                "h[:, 0]), then apply model.head, to get (batch, num_classes)"
            )
        expected = model(x)
        expect_close(out, expected, "the logits", atol=1e-9, rtol=1e-7, mistakes=_forward_mistakes(model, x))
        for name, value in model.state_dict().items():
            if not torch.equal(value, before[name]):
                raise ExerciseFailed(
                    f"your classifier_forward changed the model's parameter `{name}`; a forward pass only reads it"
                )
        x3 = torch.randn(3, 20, dtype=torch.float64)  # another batch size: nothing hard-coded
        out3 = student(model, x3, "x (3, 20)")
        expect_close(out3, model(x3), "the logits for a batch of 3", atol=1e-9, rtol=1e-7)
        # the same model with mean pooling: no class token, the tokens are averaged
        mean_model = _small_classifier("mean")
        out_mean = expect_tensor(
            student(mean_model, x3, "a TransformerClassifier with pooling='mean' (no class token) and x (3, 20)"),
            "the logits with pooling='mean'",
        )
        tokens = mean_model.patch_embed(x3) + mean_model.pos_embed
        h = mean_residual_again = tokens
        for block in mean_model.blocks:
            h = block(h)
            mean_residual_again = mean_residual_again + block(mean_residual_again)
        mean_mistakes = {
            "with pooling='mean' (model.pooling) the tokens are averaged, h.mean(dim=1), not read from position 0": mean_model.head(
                mean_model.norm(h)[:, 0]
            ),
            "the tokens are averaged over the batch axis (dim=0); average each sequence over its tokens, h.mean(dim=1)": (
                mean_model.head(mean_model.norm(h).mean(0))
            ),
            "model.norm is applied after averaging the tokens; it normalises each token, before the pooling: "
            "model.head(model.norm(h).mean(dim=1))": mean_model.head(mean_model.norm(h.mean(1))),
            "the tokens are summed; with pooling='mean' they are averaged, h.mean(dim=1)": mean_model.head(
                mean_model.norm(h).sum(1)
            ),
            "the tokens were max-pooled (h.amax(dim=1)); with pooling='mean' they are averaged, h.mean(dim=1)": mean_model.head(
                mean_model.norm(h).amax(1)
            ),
            "each block's output was added to its input again (h = h + block(h)); an EncoderBlock already adds its own "
            "residual connections: h = block(h)": mean_model.head(mean_model.norm(mean_residual_again).mean(1)),
        }
        expect_close(out_mean, mean_model(x3), "the logits with pooling='mean'", atol=1e-9, rtol=1e-7, mistakes=mean_mistakes)


# ---------------------------------------------------------------- training step


def _step_model() -> nn.Module:
    """A small classifier with dropout, so train and eval mode differ."""
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, 3)).double()


def _variant(kind: str):
    """Wrong training steps, to recognise what the student's step did."""

    def step(model, optimizer, x, y):
        if kind != "eval":
            model.train()
        if kind != "no_zero_grad":
            optimizer.zero_grad()
        logits = model(x)
        if kind == "softmax":
            loss = F.cross_entropy(torch.softmax(logits, -1), y)
        elif kind == "nll_logits":
            loss = F.nll_loss(logits, y)
        elif kind == "sum":
            loss = F.cross_entropy(logits, y, reduction="sum")
        elif kind == "nll_softmax":
            loss = F.nll_loss(torch.softmax(logits, -1), y)
        elif kind == "divided":
            loss = F.cross_entropy(logits, y) / len(y)
        elif kind == "mse":
            loss = F.mse_loss(torch.softmax(logits, -1), F.one_hot(y, logits.shape[-1]).to(logits.dtype))
        else:
            loss = F.cross_entropy(logits, y)
        if kind != "no_backward":
            loss.backward()
        if kind != "no_step":
            optimizer.step()
        return loss.item()

    return step


_VARIANTS = {
    "reference": "",
    "no_zero_grad": "the gradients accumulate from one step to the next: call optimizer.zero_grad() before loss.backward()",
    "no_step": "the parameters did not change: call optimizer.step() after loss.backward() (not before it: "
    "the gradients of this batch exist only after the backward pass)",
    "no_backward": "the parameters did not change and no gradients are left after your step: call loss.backward() before "
    "optimizer.step(), and zero the gradients before the backward pass, not between backward and step",
    "softmax": "softmax was applied before F.cross_entropy; cross_entropy takes the raw logits (it applies log-softmax itself)",
    "nll_logits": "F.nll_loss on raw logits is not cross-entropy: use F.cross_entropy(logits, y) (nll_loss expects log-probabilities)",
    "sum": "the loss is summed over the batch; F.cross_entropy's default (the mean) keeps the step size independent of the batch size",
    "mse": "that is a squared error on the probabilities; the classifier is trained with F.cross_entropy(logits, y)",
    "eval": "the model was left in eval mode (dropout off): call model.train() first, since fit() evaluates the model after each epoch",
    "nll_softmax": "F.nll_loss on softmax probabilities is not cross-entropy: nll_loss expects log-probabilities "
    "(log_softmax); simply use F.cross_entropy(logits, y) on the raw logits",
    "divided": "the loss is divided by the batch size, but F.cross_entropy already averages over the batch "
    "(reduction='mean'): use it as it is",
}


def _step_error_hint(message: str) -> str:
    """Why a training step crashed, read off the error (an empty string if nothing to say)."""
    if "not implemented for 'Long'" in message or "Expected floating point type for target" in message:
        return "F.cross_entropy takes the logits first and the class labels second: F.cross_entropy(model(x), y)"
    if "expected scalar type Long" in message or "expected target dtype" in message:
        return "the labels y are class indices (integers): pass them to F.cross_entropy as they are, without .float()"
    return ""


def _has_grads(model: nn.Module) -> bool:
    return any(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in model.parameters())


_STEPS_TAKEN = [0]  # how often the student's train_step called optimizer.step() in the last _run


def _run(
    step_fn, model: nn.Module, batches: list[tuple[Tensor, Tensor]], seed: int, student: bool
) -> tuple[list[object], nn.Module]:
    """Two steps with SGD from zeroed gradients, the model in eval mode as fit() leaves it."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    if student:  # count the calls of the optimizer handed over: a new optimizer or a manual update bypasses it
        original_step = optimizer.step

        def counted_step(*args, **kwargs):
            _STEPS_TAKEN[0] += 1
            return original_step(*args, **kwargs)

        optimizer.step = counted_step  # type: ignore[method-assign]
        _STEPS_TAKEN[0] = 0
    model.eval()
    losses = []
    for i, (x, y) in enumerate(batches):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + i)  # the same dropout masks for the student and the reference
            if student:
                losses.append(
                    _attempt(
                        step_fn,
                        model,
                        optimizer,
                        x,
                        y,
                        what=f"a small model, an SGD optimizer, x {tuple(x.shape)} and y {tuple(y.shape)}",
                    )
                )
            else:
                losses.append(step_fn(model, optimizer, x, y))
    return losses, model


def _params_close(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.allclose(p, q, atol=1e-10, rtol=1e-8) for p, q in zip(a.parameters(), b.parameters(), strict=False))


@exercise("training step")
def check_train_step(train_step) -> None:
    """Check ``train_step(model, optimizer, x, y) -> float``: forward, cross-entropy, backward, step."""
    require_attempt(train_step, "train_step")
    start = _step_model()
    batches = [(torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 3, (5,))) for _ in range(2)]
    try:
        losses, student_model = _run(train_step, copy.deepcopy(start), batches, seed=7, student=True)
        steps_taken = _STEPS_TAKEN[0]
    except ExerciseFailed as err:
        hint = _step_error_hint(str(err))
        if hint:
            raise ExerciseFailed(f"{str(err).rstrip('.')}. {hint}") from None
        raise
    outcomes = {kind: _run(_variant(kind), copy.deepcopy(start), batches, seed=7, student=False) for kind in _VARIANTS}
    ref_losses, ref_model = outcomes["reference"]

    for loss in losses:
        if loss is None:
            raise ExerciseFailed("train_step returned None: return the batch's loss as a Python float, loss.item()")
        if isinstance(loss, Tensor):
            raise ExerciseFailed(
                "train_step returned a tensor; return a Python float with loss.item() (a tensor keeps the "
                "whole graph alive, and the training loop records floats)"
            )
        if not isinstance(loss, float):
            raise ExerciseFailed(f"train_step returned {type(loss).__name__}; return the loss as a Python float, loss.item()")

    def matches(kind: str) -> bool:
        k_losses, k_model = outcomes[kind]
        return (
            all(abs(a - b) < 1e-9 for a, b in zip(losses, k_losses, strict=False))
            and _params_close(student_model, k_model)
            and _has_grads(student_model) == _has_grads(k_model)
        )

    if all(abs(a - b) < 1e-9 for a, b in zip(losses, ref_losses, strict=False)) and _params_close(student_model, ref_model):
        return  # gradients left over after the step (zero_grad at the end or not) are fine
    for kind, message in _VARIANTS.items():
        if kind != "reference" and matches(kind):
            raise ExerciseFailed(message)
    if steps_taken == 0 and not _params_close(student_model, start):
        raise ExerciseFailed(
            "the parameters changed, but not through the `optimizer` handed to train_step (it was never stepped): a new "
            "optimizer made inside train_step, or a manual update, ignores the learning rate, schedule and state that "
            "fit() set up. Call optimizer.zero_grad(), loss.backward() and optimizer.step() on the one passed in"
        )
    # nothing typical: say what differs
    if abs(losses[0] - ref_losses[0]) > 1e-9:
        raise ExerciseFailed(
            f"the loss of the first step is {losses[0]:.6g}, expected {ref_losses[0]:.6g}: "
            "compute F.cross_entropy(model(x), y) on the batch, with the model in training mode"
        )
    if abs(losses[1] - ref_losses[1]) > 1e-9:
        raise ExerciseFailed(
            f"the first loss is right but the second is {losses[1]:.6g}, expected {ref_losses[1]:.6g}: "
            "the first step did not update the parameters as zero_grad, backward, step would"
        )
    for (name, p), q in zip(student_model.named_parameters(), ref_model.parameters(), strict=False):
        if not torch.allclose(p, q, atol=1e-10, rtol=1e-8):
            diff = (p - q).abs().max().item()
            raise ExerciseFailed(
                f"the losses are right but parameter `{name}` differs from the reference step by up to {diff:.4g}: "
                "after loss.backward(), call optimizer.step() exactly once"
            )


# ---------------------------------------------------------------- choosing the learning rate on the validation split


def _curve(val_loss: list[float], val_acc: float = 0.9, train_loss: float = 0.3) -> History:
    """A validation run: its validation losses, and a last validation accuracy and training loss."""
    n = len(val_loss)
    return History(train_loss=[2.0] * (n - 1) + [train_loss], val_loss=list(val_loss), val_acc=[0.5] * (n - 1) + [val_acc])


_NAN, _INF = float("nan"), float("inf")
#: (what the case shows, {lr: run}, the right choice, {a wrong choice: the mistake that makes it}); the cases run in
#: this order, so a mistake is named by the first case whose decoy it picks.
_LR_CASES: list[tuple[str, dict[float, History], float, dict[float, str]]] = [
    (
        "two healthy runs",
        {1e-3: _curve([2.2, 1.0, 0.8], 0.80, 0.7), 3e-3: _curve([2.1, 0.6, 0.5], 0.88, 0.4)},
        3e-3,
        {1e-3: "the run with the highest last validation loss was chosen; choose the lowest (min, not max)"},
    ),
    (
        "the lowest loss and the highest accuracy disagree",
        {1e-3: _curve([2.2, 0.5, 0.40], 0.90, 0.30), 3e-3: _curve([2.3, 0.55, 0.45], 0.92, 0.32)},
        1e-3,
        {
            3e-3: "the run with the highest validation accuracy was chosen; the rule reads the validation loss, which "
            "moves smoothly where the accuracy of 800 signals moves in steps of 1/800"
        },
    ),
    (
        "the lowest validation loss and the lowest training loss disagree",
        {1e-3: _curve([2.2, 0.5, 0.40], 0.91, 0.30), 3e-3: _curve([2.3, 0.55, 0.45], 0.90, 0.10)},
        1e-3,
        {
            3e-3: "the run with the lowest training loss was chosen; the rule reads the validation split "
            "(run.val_loss), the signals that no run trained on"
        },
    ),
    (
        "a curve whose lowest point is not where it ends",
        {1e-3: _curve([2.2, 0.5, 0.40], 0.91, 0.20), 3e-3: _curve([2.4, 0.35, 0.45], 0.90, 0.25)},
        1e-3,
        {
            3e-3: "the run whose curve dipped lowest on the way was chosen (min(run.val_loss)); compare where the runs "
            "end, run.val_loss[-1]: the weights you keep are those of the last epoch"
        },
    ),
    (
        "a last loss only 1.3 times the lowest is noise, not a blow-up",
        {1e-3: _curve([2.2, 0.30, 0.40], 0.91, 0.20), 3e-3: _curve([2.3, 0.6, 0.50], 0.88, 0.30)},
        1e-3,
        {
            3e-3: "a healthy run was refused: lr 0.001 ends at 0.40, 1.33 times its lowest 0.30, which is noise. "
            "Refuse a run only when its last loss is more than 1.5 times its lowest"
        },
    ),
    (
        "a run that blew up at the end",
        {1e-3: _curve([2.2, 0.6, 0.50], 0.86, 0.40), 3e-3: _curve([2.3, 0.1, 0.30], 0.90, 0.20)},
        1e-3,
        {
            3e-3: "lr 0.003 was chosen, but its run blew up: its validation loss ended at 0.30, three times its "
            "lowest 0.10. Refuse a run whose last loss is more than 1.5 times its lowest, whatever it reached before"
        },
    ),
    (
        "a run whose loss ended as NaN",
        {3e-2: _curve([2.2, 0.4, _NAN], 0.10, _NAN), 1e-3: _curve([2.3, 0.6, 0.50], 0.86, 0.40), 3e-3: _curve([2.3, 0.7, 0.55])},
        1e-3,
        {
            3e-2: "the run of lr 0.03, whose validation loss ended as NaN, was chosen: every comparison with NaN is "
            "False, so neither min() nor the 1.5-times test refuses it. Refuse runs with a loss that is not finite "
            "(math.isfinite)"
        },
    ),
    (
        "a run that ends 1.8 times its lowest loss",
        {1e-3: _curve([2.2, 0.6, 0.50], 0.86, 0.40), 1e-2: _curve([2.3, 0.20, 0.36], 0.89, 0.25)},
        1e-3,
        {
            1e-2: "lr 0.01 was chosen, but its validation loss ended at 0.36, 1.8 times its lowest 0.20: that run blew "
            "up. The rule refuses a run whose last loss is more than 1.5 times its lowest (a looser factor lets it through)"
        },
    ),
    (
        "a run that blew up two epochs before the end and stayed up",
        {1e-3: _curve([2.3, 0.7, 0.6, 0.50], 0.86, 0.40), 1e-2: _curve([2.2, 0.10, 0.50, 0.45], 0.88, 0.30)},
        1e-3,
        {
            1e-2: "lr 0.01 was chosen, but its run blew up at epoch 3 (0.10 -> 0.50) and ends at 0.45, 4.5 times its "
            "lowest, though it no longer rises at the end. Compare the last loss with the lowest of the whole curve, "
            "min(run.val_loss), not with the epoch before (or the first)"
        },
    ),
    (
        "a fast start against a better end",
        {1e-3: _curve([1.0, 0.6, 0.50], 0.86, 0.40), 3e-3: _curve([2.6, 0.8, 0.45], 0.88, 0.35)},
        3e-3,
        {
            1e-3: "the run with the lowest average over its curve was chosen; the rule compares where the runs end, "
            "run.val_loss[-1]: a fast start says nothing about the weights you keep"
        },
    ),
    (
        "a run with a NaN in the middle of its curve",
        {3e-2: _curve([2.2, _NAN, 0.3], 0.90, 0.20), 1e-3: _curve([2.3, 0.6, 0.50], 0.86, 0.40)},
        1e-3,
        {
            3e-2: "the run of lr 0.03 has a NaN validation loss at epoch 2 and was chosen: a run that blew up on the way "
            "is refused too, so test every loss of the curve with math.isfinite, not only the last"
        },
    ),
    (
        "a run with an infinite loss in the middle of its curve",
        {3e-2: _curve([2.2, _INF, 0.3], 0.90, 0.20), 1e-3: _curve([2.3, 0.6, 0.50], 0.86, 0.40)},
        1e-3,
        {
            3e-2: "the run of lr 0.03 has an infinite validation loss at epoch 2 and was chosen: math.isnan (or v != v) "
            "misses inf; refuse every loss that is not finite, math.isfinite(v), which is False for NaN and for ±inf"
        },
    ),
]


def _lr_label(choice: object) -> str:
    return f"{choice:g}" if isinstance(choice, float) else repr(choice)


@exercise("choosing the learning rate")
def check_choose_learning_rate(choose_learning_rate) -> None:
    """Check ``choose_learning_rate(runs) -> lr``: the lowest last validation loss among the runs that did not blow up."""
    require_attempt(choose_learning_rate, "choose_learning_rate")
    for what, runs, right, decoys in _LR_CASES:
        before = {lr: (list(run.val_loss), list(run.val_acc), list(run.train_loss)) for lr, run in runs.items()}
        choice = _attempt(choose_learning_rate, dict(runs), what=f"runs of lr {', '.join(f'{lr:g}' for lr in runs)} ({what})")
        for lr, run in runs.items():
            if (list(run.val_loss), list(run.val_acc), list(run.train_loss)) != before[lr]:
                raise ExerciseFailed(
                    "your function changed a run's history (sorting or popping its list in place); read the curves, "
                    "work on copies (sorted(...), min(...)) and leave the runs as they were"
                )
        if isinstance(choice, History):
            raise ExerciseFailed("your function returned a run (a History); return its learning rate, the key of `runs`")
        if isinstance(choice, tuple) and len(choice) == 2 and choice[0] in runs:
            raise ExerciseFailed(
                "your function returned a pair (learning rate, run), an item of runs.items(); return the learning rate "
                "alone, its first element"
            )
        if isinstance(choice, (list, tuple, set)) and choice and all(c in runs for c in choice):
            raise ExerciseFailed(
                f"your function returned the {type(choice).__name__} of learning rates {list(choice)}; return one of them, "
                "the one whose run ends lowest: min(healthy, key=lambda lr: runs[lr].val_loss[-1])"
            )
        if isinstance(choice, bool) or not isinstance(choice, numbers.Real):
            raise ExerciseFailed(
                f"your function returned {type(choice).__name__} {choice!r}; return a learning rate, one of the keys of "
                "`runs` (a float such as 0.003)"
            )
        if choice == right and not isinstance(choice, bool):
            continue
        if choice in decoys:
            raise ExerciseFailed(decoys[choice])
        if isinstance(choice, int) and 0 <= choice < len(runs) and choice not in runs:
            raise ExerciseFailed(
                f"your function returned {choice}, a position in the list; return the learning rate itself (a key of "
                "`runs`), for example min(healthy, key=...) over the keys"
            )
        if choice not in runs and any(choice == run.val_loss[-1] for run in runs.values()):
            raise ExerciseFailed(
                f"your function returned {_lr_label(choice)}, a validation loss, not a learning rate: min(...) over the "
                "losses gives the lowest loss; take the minimum over the learning rates, with the loss as the key: "
                "min(healthy, key=lambda lr: runs[lr].val_loss[-1])"
            )
        if choice not in runs:
            raise ExerciseFailed(
                f"your function returned {_lr_label(choice)}, which is not one of the learning rates tried "
                f"({', '.join(f'{lr:g}' for lr in runs)}); return a key of `runs`"
            )
        raise ExerciseFailed(
            f"for {what} your function chose lr {_lr_label(choice)}, expected {right:g}: "
            + "; ".join(f"lr {lr:g} ends at {run.val_loss[-1]:.2f} (lowest {min(run.val_loss):.2f})" for lr, run in runs.items())
        )
    blown = {1e-2: _curve([2.2, 0.2, 0.9]), 3e-2: _curve([2.2, 0.3, _NAN])}
    try:
        choice = choose_learning_rate(dict(blown))
    except NotImplementedError as err:
        if is_stub_error(err):
            raise NotAttempted("`choose_learning_rate` still raises NotImplementedError: fill in its body") from None
        raise ExerciseFailed(not_a_stub_message(err, "choose_learning_rate")) from None
    except Exception:  # refusing to choose is right: min() of no healthy run raises ValueError
        return
    raise ExerciseFailed(
        f"every run blew up (one ends 4.5 times its lowest loss, one as NaN), yet your function returned "
        f"{_lr_label(choice)}: with no healthy run there is nothing to choose. Let min() over the healthy runs raise its "
        "ValueError (or raise one yourself), so that the notebook stops instead of training a rate that blew up"
    )


# ---------------------------------------------------------------- reading the attention maps


def _attention_weights(batch: int, heads: int, n: int, dtype=torch.float64) -> Tensor:
    """Random attention maps whose rows sum to 1, with a few strong columns as in a trained model."""
    scores = torch.randn(batch, heads, n, n, dtype=dtype) + 2.0 * torch.randn(batch, heads, 1, n, dtype=dtype)
    return torch.softmax(scores, dim=-1)  # (batch, heads, n, n)


def _summary_reference(w: Tensor) -> tuple[Tensor, Tensor]:
    rows = w.mean(dim=1)  # (batch, n, n)
    received = rows.mean(dim=1)  # (batch, n)
    return received, 0.5 * (rows - received[:, None, :]).abs().sum(-1).mean(-1)  # (batch,)


def _received_mistakes(w: Tensor) -> dict[str, Tensor]:
    rows = w.mean(dim=1)
    return {
        "averaged over the keys (the last axis): every row of a map sums to 1, so each value is 1/n. The attention a "
        "key receives is its column: average over the queries, axis 2 (after the heads, axis 1)": rows.mean(-1),
        "summed over the queries; average them (a share of the attention, between 0 and 1)": rows.sum(1),
        "only the first head was read; average over the heads (axis 1) as well": w[:, 0].mean(1),
        "the largest attention over the queries was taken; average over the queries instead": rows.amax(1),
        "summed over the heads and averaged over the queries; average over both": w.sum(1).mean(1),
        "only the first query's row was read; average the columns over every query, axis 1 of the head-averaged map": rows[:, 0],
    }


def _spread_mistakes(w: Tensor) -> dict[str, Tensor]:
    rows = w.mean(dim=1)
    received = rows.mean(dim=1)
    tv = lambda a, b: 0.5 * (a - b).abs().sum(-1)  # noqa: E731
    n = w.shape[-1]
    return {
        "the spread lacks the factor 0.5: the total variation between two distributions is half the sum of the "
        "absolute differences": (rows - received[:, None, :]).abs().sum(-1).mean(-1),
        "the spread takes the largest distance over the queries; average it over the queries": tv(
            rows, received[:, None, :]
        ).amax(-1),
        "the spread sums the distances over the queries; average them": tv(rows, received[:, None, :]).sum(-1),
        "each row was compared with the uniform distribution 1/n; compare it with the average row, `received`": tv(
            rows, torch.full_like(rows, 1.0 / n)
        ).mean(-1),
        "the distance is squared (an L2 distance); the total variation is 0.5 x the sum of absolute differences": (
            (rows - received[:, None, :]) ** 2
        )
        .sum(-1)
        .mean(-1),
        "received was broadcast along the wrong axis (received[:, :, None] subtracts one number from each row); "
        "compare every query's row with the average row, received[:, None, :]": tv(rows, received[:, :, None]).mean(-1),
        "the spread was measured per head and then averaged; average the heads first (rows = weights.mean(dim=1)), "
        "as for `received`": tv(w, w.mean(2, keepdim=True)).mean(dim=(1, 2)),
        "the spread compares each head's rows with `received`; compare the rows averaged over the heads, "
        "rows = weights.mean(dim=1), with it": tv(w, received[:, None, None, :]).mean(dim=(1, 2)),
        "the absolute differences are averaged over the keys (.mean(-1)); the total variation sums them, "
        "0.5 * (...).abs().sum(-1), before averaging over the queries": 0.5
        * (rows - received[:, None, :]).abs().mean(-1).mean(-1),
        "the distance is Euclidean (torch.linalg.norm, the square root of a sum of squares); the total variation is "
        "0.5 x the sum of absolute differences": (rows - received[:, None, :]).norm(dim=-1).mean(-1),
        "the spread is a standard deviation over the queries; it is a total variation distance from the average row, "
        "0.5 * (rows - received[:, None, :]).abs().sum(-1), averaged over the queries": rows.std(1).mean(-1),
    }


@exercise("reading the attention maps")
def check_attention_summary(attention_summary) -> None:
    """Check ``attention_summary(weights) -> (received, spread)`` for maps ``(batch, heads, n, n)``."""
    require_attempt(attention_summary, "attention_summary")
    if not callable(attention_summary):
        raise ExerciseFailed(f"attention_summary is {type(attention_summary).__name__}, not a function: define it with def")
    for batch, heads, n in ((2, 3, 5), (3, 2, 7)):
        w = _attention_weights(batch, heads, n)
        what = f"weights of shape ({batch}, {heads}, {n}, {n})"
        out = _attempt(attention_summary, w.clone(), what=what)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            raise ExerciseFailed(
                f"attention_summary should return two tensors, (received, spread); got {type(out).__name__}"
                + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
            )
        received, spread = (expect_tensor(t, name) for t, name in zip(out, ("received", "spread"), strict=True))
        if tuple(received.shape) == (batch,) and tuple(spread.shape) == (batch, n):
            raise ExerciseFailed("the two results are swapped: return (received, spread), received (batch, n) first")
        want_received, want_spread = _summary_reference(w)
        expect_close(received, want_received, f"received for {what}", atol=1e-10, rtol=1e-8, mistakes=_received_mistakes(w))
        expect_close(spread, want_spread, f"spread for {what}", atol=1e-10, rtol=1e-8, mistakes=_spread_mistakes(w))
