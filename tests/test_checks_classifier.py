"""The checks of notebook 07 pass the reference, spot the stub and name the typical mistakes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.checks.classifier import (
    check_attention_summary,
    check_choose_learning_rate,
    check_classifier_forward,
    check_patch_embedding,
    check_train_step,
)
from helpers.models.classifier import PatchEmbedding
from helpers.training import train_step
from tests.conftest import assert_caught, assert_not_attempted

# ---------------------------------------------------------------- patch embedding


def make_patch_embedding(forward=None, proj_shape=None):
    class Student(nn.Module):
        def __init__(self, patch_size, stride, d_model):
            super().__init__()
            self.patch_size, self.stride = patch_size, stride
            self.proj = nn.Linear(*(proj_shape(patch_size, d_model) if proj_shape else (patch_size, d_model)))

        def forward(self, x):
            return forward(self, x)

    return Student


def test_patch_reference_passes():
    assert check_patch_embedding(PatchEmbedding) is True


def test_patch_loop_version_passes():
    def loop(self, x):
        n = (x.shape[1] - self.patch_size) // self.stride + 1
        patches = torch.stack([x[:, i * self.stride : i * self.stride + self.patch_size] for i in range(n)], 1)
        return self.proj(patches)

    assert check_patch_embedding(make_patch_embedding(loop)) is True


class StubPatchEmbedding(nn.Module):  # the student notebook's cell as shipped
    def __init__(self, patch_size, stride, d_model):
        super().__init__()
        self.patch_size, self.stride = patch_size, stride
        self.proj = nn.Linear(patch_size, d_model)

    def forward(self, x):
        """x (batch, length) -> (batch, num_patches, d_model): one projected window per patch."""
        raise NotImplementedError("Exercise: replace this line with your code")


def test_patch_stub_not_attempted(capsys):
    assert_not_attempted(check_patch_embedding, StubPatchEmbedding, capsys)
    assert_not_attempted(check_patch_embedding, ..., capsys)


PATCH_MISTAKES = [
    (lambda self, x: self.proj(x.unfold(1, self.patch_size, 1)), ["stride is ignored"]),
    (lambda self, x: self.proj(x.unfold(1, self.patch_size, self.patch_size)), ["do not overlap"]),
    (lambda self, x: x.unfold(1, self.patch_size, self.stride), ["not projected"]),
    (lambda self, x: x.unfold(1, self.patch_size, self.stride) @ self.proj.weight.T, ["bias is missing"]),
    (lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride)[:, :-1]), ["one patch short"]),
    (lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride)).transpose(1, 2), ["transposed"]),
    (lambda self, x: self.proj(x.unfold(1, self.stride, self.patch_size)), ["window size first"]),
    (lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride).flip(-1)), ["reversed"]),
    (
        lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride)) * 2,
        ["differs from the reference", "largest difference"],
    ),
]


@pytest.mark.parametrize("wrong, phrases", PATCH_MISTAKES)
def test_patch_mistakes_are_named(wrong, phrases):
    assert_caught(check_patch_embedding, make_patch_embedding(wrong), *phrases)


def test_patch_wrong_linear_and_missing_proj():
    ok = lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride))  # noqa: E731
    assert_caught(
        check_patch_embedding, make_patch_embedding(ok, proj_shape=lambda p, d: (d, p)), "nn.Linear(patch_size, d_model)"
    )

    class NoProj(nn.Module):
        def __init__(self, patch_size, stride, d_model):
            super().__init__()
            self.linear = nn.Linear(patch_size, d_model)

    assert_caught(check_patch_embedding, NoProj, "no attribute `proj`")


# ---------------------------------------------------------------- forward pass


def forward_reference(model, x):
    h = model.patch_embed(x)
    if model.pooling == "cls":
        cls = model.cls_token.expand(x.shape[0], -1, -1)
        h = torch.cat([cls, h], dim=1)
    h = h + model.pos_embed
    for block in model.blocks:
        h = block(h)
    h = model.norm(h)
    return model.head(h[:, 0] if model.pooling == "cls" else h.mean(dim=1))


def forward_cls_only(model, x):
    """Right for the class-token model, but always reads position 0."""
    h = model.patch_embed(x)
    if model.cls_token is not None:
        h = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), h], dim=1)
    h = h + model.pos_embed
    for block in model.blocks:
        h = block(h)
    return model.head(model.norm(h)[:, 0])


def make_forward(pos=True, cls_at_end=False, pool="cls", norm=True, blocks="all", post=None, head_all=False, norm_first=False):
    def forward(model, x):
        tokens = model.patch_embed(x)
        cls = model.cls_token.expand(x.shape[0], -1, -1)
        h = torch.cat([tokens, cls] if cls_at_end else [cls, tokens], dim=1)
        if pos:
            h = h + model.pos_embed
        if norm_first:
            h = model.norm(h)
        chosen = {"all": list(model.blocks), "none": [], "first": [model.blocks[0]], "first_twice": [model.blocks[0]] * 2}[blocks]
        for block in chosen:
            h = block(h)
        if norm and not norm_first:
            h = model.norm(h)
        if head_all:
            return model.head(h)
        pooled = {"cls": h[:, 0], "last": h[:, -1], "mean": h.mean(1)}[pool]
        logits = model.head(pooled)
        return post(logits) if post else logits

    return forward


def test_forward_reference_passes():
    assert check_classifier_forward(forward_reference) is True


def forward_modulelist_called(model, x):
    h = model.patch_embed(x)
    if model.cls_token is not None:
        h = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), h], dim=1)
    h = model.blocks(h + model.pos_embed)  # an nn.ModuleList cannot be called: PyTorch raises NotImplementedError
    return model.head(model.norm(h)[:, 0])


def forward_dropout_active(model, x):
    return torch.nn.functional.dropout(forward_reference(model, x), 0.1)


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (lambda model, x: model(x), ["calls the model itself", "model.patch_embed"]),
        (lambda model, x: model.forward(x), ["calls the model itself"]),
        (forward_modulelist_called, ["NotImplementedError", "not the exercise's stub", "for block in model.blocks"]),
        (forward_dropout_active, ["dropout is left active"]),
    ],
)
def test_forward_shortcuts_and_real_errors_are_named(wrong, phrases):
    assert_caught(check_classifier_forward, wrong, *phrases)


def test_forward_generator_stub_is_not_attempted(capsys):
    def stub(model, x):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_classifier_forward, stub, capsys)


def test_forward_stub_not_attempted(capsys):
    def stub(model, x):
        raise NotImplementedError

    assert_not_attempted(check_classifier_forward, stub, capsys)


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (make_forward(pos=False), ["position embeddings are not added"]),
        (make_forward(pool="last"), ["reads the last token"]),
        (make_forward(pool="mean"), ["tokens are averaged"]),
        (make_forward(cls_at_end=True), ["appended at the end"]),
        (make_forward(norm=False), ["final layer norm"]),
        (make_forward(blocks="none"), ["blocks are skipped"]),
        (make_forward(blocks="first"), ["only the first encoder block"]),
        (make_forward(blocks="first_twice"), ["applied twice"]),
        (make_forward(post=lambda z: torch.softmax(z, -1)), ["softmax"]),
        (make_forward(head_all=True), ["one row per token"]),
        (make_forward(norm_first=True), ["before the blocks"]),
        (make_forward(post=lambda z: z * 1.01), ["differs from the reference"]),
        (forward_cls_only, ["pooling='mean'", "h.mean(dim=1)"]),
    ],
)
def test_forward_mistakes_are_named(wrong, phrases):
    assert_caught(check_classifier_forward, wrong, *phrases)


# ---------------------------------------------------------------- training step


def test_train_step_reference_passes():
    assert check_train_step(train_step) is True


def test_train_step_zero_grad_at_the_end_passes():
    def step(model, optimizer, x, y):
        model.train()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return float(loss.detach())

    assert check_train_step(step) is True


def test_train_step_stub_not_attempted(capsys):
    def stub(model, optimizer, x, y):
        raise NotImplementedError

    assert_not_attempted(check_train_step, stub, capsys)


def wrong_step(zero=True, backward=True, step=True, train=True, loss_fn=None, ret="item", zero_between=False, step_first=False):
    def fn(model, optimizer, x, y):
        if train:
            model.train()
        if zero:
            optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y) if loss_fn else F.cross_entropy(logits, y)
        if step_first:
            optimizer.step()
        if backward:
            loss.backward()
        if zero_between:
            optimizer.zero_grad()
        if step and not step_first:
            optimizer.step()
        return {"item": loss.item(), "tensor": loss, "none": None}[ret]

    return fn


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (wrong_step(zero=False), ["accumulate", "zero_grad"]),
        (wrong_step(step=False), ["optimizer.step()"]),
        (wrong_step(backward=False), ["loss.backward()"]),
        (wrong_step(loss_fn=lambda z, y: F.cross_entropy(torch.softmax(z, -1), y)), ["softmax was applied before"]),
        (wrong_step(ret="tensor"), ["returned a tensor", "loss.item()"]),
        (wrong_step(ret="none"), ["returned None"]),
        (wrong_step(train=False), ["eval mode", "model.train()"]),
        (wrong_step(zero_between=True), ["not between backward and step"]),
        (wrong_step(step_first=True), ["not before it"]),
        (wrong_step(loss_fn=lambda z, y: F.nll_loss(z, y)), ["nll_loss"]),
        (wrong_step(loss_fn=lambda z, y: F.cross_entropy(z, y, reduction="sum")), ["summed"]),
        (wrong_step(loss_fn=lambda z, y: F.cross_entropy(z, y, label_smoothing=0.1)), ["loss of the first step"]),
    ],
)
def test_train_step_mistakes_are_named(wrong, phrases):
    assert_caught(check_train_step, wrong, *phrases)


def test_train_step_double_step_is_caught():
    def twice(model, optimizer, x, y):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.step()
        return loss.item()

    assert_caught(check_train_step, twice, "second is")


# ---------------------------------------------------------------- issue 25: the likeliest mistakes the catalogues lacked


def _forward_unfolding(unfold):
    return make_patch_embedding(lambda self, x: self.proj(unfold(self, x)))


def _loop_windows(extra_start):
    def windows(self, x):
        starts = range(0, x.shape[1] - self.patch_size + extra_start, self.stride)
        return torch.stack([x[:, i : i + self.patch_size] for i in starts], dim=1)

    return windows


PATCH_MORE_MISTAKES = [
    (_forward_unfolding(lambda self, x: x.unfold(0, self.patch_size, self.stride)), ["cuts along the batch axis"]),
    (make_patch_embedding(lambda self, x: self.proj(x).unfold(1, self.patch_size, self.stride)), ["applied to the whole signal"]),
    (_forward_unfolding(lambda self, x: x.unfold(1, 8, 2)), ["use self.patch_size and self.stride"]),
    (_forward_unfolding(_loop_windows(0)), ["one patch short"]),
    (
        _forward_unfolding(
            lambda self, x: torch.stack([x[:, i : i + self.patch_size] for i in range(0, x.shape[1], self.stride)], 1)
        ),
        ["windows at the end are shorter", "length - patch_size + 1"],
    ),
    (_forward_unfolding(lambda self, x: x.view(x.shape[0], -1, self.patch_size)), ["do not overlap"]),
    (
        _forward_unfolding(lambda self, x: x.unfold(1, self.patch_size, self.stride).float()),
        ["float32 and float64 tensors are mixed"],
    ),
]


@pytest.mark.parametrize("wrong, phrases", PATCH_MORE_MISTAKES)
def test_patch_likeliest_mistakes_are_named(wrong, phrases):
    assert_caught(check_patch_embedding, wrong, *phrases)


def test_patch_other_right_answers_pass():
    def conv(self, x):
        return F.conv1d(x[:, None], self.proj.weight[:, None], self.proj.bias, stride=self.stride).transpose(1, 2)

    assert check_patch_embedding(make_patch_embedding(conv)) is True
    assert check_patch_embedding(_forward_unfolding(_loop_windows(1))) is True
    assert check_patch_embedding(_forward_unfolding(lambda self, x: x.unfold(-1, self.patch_size, self.stride))) is True


def _classifier(cls="expand", pos="after", pool="mean(1)", norm="tokens"):
    def forward(model, x):
        h = model.patch_embed(x)
        if pos == "all before":
            h = h + model.pos_embed
        if pos == "rest before" and model.pooling == "cls":
            h = h + model.pos_embed[:, 1:]
        if cls == "always" or model.pooling == "cls":
            token = model.cls_token if cls == "not expanded" else model.cls_token.expand(x.shape[0], -1, -1)
            h = torch.cat([token, h], dim=-1 if cls == "features" else 1)
        if pos == "after" or (pos == "rest before" and model.pooling != "cls"):
            h = h + model.pos_embed
        for block in model.blocks:
            h = block(h)
        if norm == "pooled":
            return model.head(model.norm(h[:, 0] if model.pooling == "cls" else h.mean(1)))
        h = model.norm(h)
        if model.pooling == "cls":
            return model.head(h[:, 0])
        return model.head({"mean(1)": lambda: h.mean(1), "mean(0)": lambda: h.mean(0), "sum": lambda: h.sum(1)}[pool]())

    return forward


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (_classifier(cls="not expanded"), ["expand it to the batch"]),
        (_classifier(cls="features"), ["concatenate along the tokens axis"]),
        (_classifier(cls="always"), ["no class token (model.cls_token is None)"]),
        (_classifier(pos="all before"), ["prepend the class token first, then add the position embeddings"]),
        (_classifier(pos="rest before"), ["added before prepending the class token"]),
        (_classifier(pool="mean(0)"), ["averaged over the batch axis"]),
        (_classifier(norm="pooled"), ["model.norm is applied after averaging"]),
        (_classifier(pool="sum"), ["the tokens are summed"]),
    ],
)
def test_forward_likeliest_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_classifier_forward, wrong, *phrases)
    assert "differs from the reference in" not in message


def forward_sliced_positions(model, x):  # pos_embed sliced to the tokens present: the same here
    h = model.patch_embed(x)
    if model.cls_token is not None:
        h = torch.cat([model.cls_token.expand(len(x), -1, -1), h], dim=1)
    h = h + model.pos_embed[:, : h.shape[1]]
    h = nn.Sequential(*model.blocks)(h)
    return model.head(model.norm(h)[:, 0] if model.pooling == "cls" else model.norm(h).mean(dim=1))


def forward_norm_on_the_class_token(model, x):  # a layer norm acts on each token alone: norm(h)[:, 0] == norm(h[:, 0])
    h = model.patch_embed(x)
    if model.pooling == "cls":
        h = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), h], dim=1)
    h = h + model.pos_embed
    for block in model.blocks:
        h = block(h)
    return model.head(model.norm(h[:, 0]) if model.pooling == "cls" else model.norm(h).mean(dim=1))


def test_forward_other_right_answers_pass():
    assert check_classifier_forward(forward_sliced_positions) is True
    assert check_classifier_forward(forward_norm_on_the_class_token) is True


@pytest.mark.parametrize(
    "wrong, phrases",
    [
        (wrong_step(loss_fn=lambda z, y: F.cross_entropy(y, z)), ["logits first and the class labels second"]),
        (wrong_step(loss_fn=lambda z, y: F.cross_entropy(z, y.float())), ["class indices (integers)"]),
        (wrong_step(loss_fn=lambda z, y: F.nll_loss(torch.softmax(z, -1), y)), ["nll_loss on softmax probabilities"]),
        (wrong_step(loss_fn=lambda z, y: F.cross_entropy(z, y) / len(y)), ["already averages over the batch"]),
    ],
)
def test_train_step_likeliest_mistakes_are_named(wrong, phrases):
    assert_caught(check_train_step, wrong, *phrases)


def _step_with(slip):
    def step(model, optimizer, x, y):
        model.train()
        optimizer.zero_grad()
        if slip == "no_grad":
            with torch.no_grad():
                logits = model(x)
        else:
            logits = model(x)
        loss = F.cross_entropy(logits, y)
        if slip == "item_first":
            loss = loss.item()
        loss.backward()
        if slip == "backward_twice":
            loss.backward()
        optimizer.step()
        return loss if slip == "item_first" else loss.item()

    return step


@pytest.mark.parametrize(
    "slip, phrases",
    [
        ("no_grad", ["torch.no_grad()"]),
        ("item_first", [".item() was taken first"]),
        ("backward_twice", ["loss.backward() ran twice"]),
    ],
)
def test_train_step_likeliest_crashes_are_named(slip, phrases):
    assert_caught(check_train_step, _step_with(slip), *phrases)


def test_train_step_other_right_answers_pass():
    def log_softmax_and_nll(model, optimizer, x, y):
        model.train()
        optimizer.zero_grad()
        loss = F.nll_loss(F.log_softmax(model(x), dim=-1), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    def loss_module_and_eval_at_the_end(model, optimizer, x, y):
        model.train()
        optimizer.zero_grad(set_to_none=True)
        loss = nn.CrossEntropyLoss()(model(x), y)
        loss.backward()
        optimizer.step()
        model.eval()
        return float(loss.detach())

    assert check_train_step(log_softmax_and_nll) is True
    assert check_train_step(loss_module_and_eval_at_the_end) is True


def test_the_references_in_helpers_models_pass():
    import helpers.models
    import helpers.training
    from helpers.models.classifier import TransformerClassifier

    assert check_patch_embedding(helpers.models.PatchEmbedding) is True
    assert check_classifier_forward(TransformerClassifier.forward) is True  # what the notebook falls back on
    assert check_train_step(helpers.training.train_step) is True


# ---------------------------------------------------------------- Exercise 7.4: choosing the learning rate


def _finite(losses):
    return all(math.isfinite(v) for v in losses)


def choose_reference(runs):
    healthy = [lr for lr, run in runs.items() if _finite(run.val_loss) and run.val_loss[-1] <= 1.5 * min(run.val_loss)]
    return min(healthy, key=lambda lr: runs[lr].val_loss[-1])


def choose_sorted(runs):  # sorted, a strict boundary, NaN tested as x != x and inf by abs, the History read like a dict
    ok = {lr: run["val_loss"] for lr, run in runs.items() if not any(v != v or abs(v) == math.inf for v in run["val_loss"])}
    ok = {lr: losses for lr, losses in ok.items() if not losses[-1] >= 1.5 * min(losses)}
    return sorted(ok, key=lambda lr: ok[lr][-1])[0]


def choose_numpy(runs):  # numpy: isfinite over the curve, argmin over the kept learning rates
    lrs = np.array(
        [lr for lr, run in runs.items() if np.isfinite(run.val_loss).all() and run.val_loss[-1] <= 1.5 * np.min(run.val_loss)]
    )
    return lrs[np.argmin([runs[lr].val_loss[-1] for lr in lrs])]


def choose_loop(runs):  # a loop, and its own ValueError when every run blew up
    best = None
    for lr, run in runs.items():
        losses = run.val_loss
        if any(math.isnan(v) or math.isinf(v) for v in losses) or losses[-1] > 1.5 * min(losses):
            continue
        if best is None or losses[-1] < runs[best].val_loss[-1]:
            best = lr
    if best is None:
        raise ValueError("every run blew up")
    return best


def test_choose_reference_and_other_right_answers_pass():
    import helpers.training

    for right in (helpers.training.choose_learning_rate, choose_reference, choose_sorted, choose_numpy, choose_loop):
        assert check_choose_learning_rate(right) is True, right.__name__


def test_choose_stub_not_attempted(capsys):
    def stub(runs):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_choose_learning_rate, stub, capsys)
    assert_not_attempted(check_choose_learning_rate, ..., capsys)


def _choose_by(score, refuse=lambda losses: False):
    def choose(runs):
        kept = {lr: run for lr, run in runs.items() if not refuse(run.val_loss)}
        return min(kept, key=lambda lr: score(kept[lr]))

    return choose


_ratio_only = lambda losses: losses[-1] > 1.5 * min(losses)  # noqa: E731
_last_finite = lambda losses: not math.isfinite(losses[-1]) or losses[-1] > 1.5 * min(losses)  # noqa: E731
_healthy = lambda losses: not _finite(losses) or _ratio_only(losses)  # noqa: E731

CHOOSE_MISTAKES = [
    (_choose_by(lambda run: -run.val_loss[-1], _healthy), ["highest last validation loss", "min, not max"]),
    (_choose_by(lambda run: -run.val_acc[-1], _healthy), ["highest validation accuracy"]),
    (_choose_by(lambda run: run.train_loss[-1], _healthy), ["lowest training loss"]),
    (_choose_by(lambda run: min(run.val_loss), _healthy), ["dipped lowest", "val_loss[-1]"]),
    (_choose_by(lambda run: run.val_loss[-1], lambda losses: losses[-1] > min(losses)), ["a healthy run was refused"]),
    (_choose_by(lambda run: run.val_loss[-1]), ["blew up", "more than 1.5 times its lowest"]),
    (_choose_by(lambda run: run.val_loss[-1], _ratio_only), ["ended as NaN", "math.isfinite"]),
    (_choose_by(lambda run: run.val_loss[-1], _last_finite), ["NaN validation loss at epoch 2", "not only the last"]),
    (lambda runs: runs[choose_reference(runs)], ["returned a run (a History)"]),
    (lambda runs: list(runs).index(choose_reference(runs)), ["a position in the list"]),
    (lambda runs: str(choose_reference(runs)), ["returned str"]),
    (lambda runs: torch.tensor(choose_reference(runs)), ["returned Tensor"]),
    (lambda runs: choose_reference(runs) * 10, ["not one of the learning rates tried"]),
]


@pytest.mark.parametrize("wrong, phrases", CHOOSE_MISTAKES)
def test_choose_mistakes_are_named(wrong, phrases):
    assert_caught(check_choose_learning_rate, wrong, *phrases)


def test_choose_must_refuse_when_every_run_blew_up_and_leave_the_runs_alone():
    def choose_anyway(runs):  # falls back on the lowest loss when nothing is healthy
        try:
            return choose_reference(runs)
        except ValueError:
            return min(runs, key=lambda lr: runs[lr].val_loss[-1])

    assert_caught(check_choose_learning_rate, choose_anyway, "every run blew up", "nothing to choose")

    def choose_then_pop(runs):
        choice = choose_reference(runs)
        for run in runs.values():
            run.val_loss.pop()
        return choice

    assert_caught(check_choose_learning_rate, choose_then_pop, "changed a run's history")


# ---------------------------------------------------------------- Exercise 7.5: reading the attention maps


def summary_reference(weights):
    rows = weights.mean(dim=1)  # (batch, n, n)
    received = rows.mean(dim=1)  # (batch, n)
    return received, 0.5 * (rows - received[:, None, :]).abs().sum(-1).mean(-1)


def summary_other_ways(weights):  # one mean over two axes, keepdim, the L1 norm of torch.linalg
    received = weights.mean(dim=(1, 2))  # (batch, n)
    rows = weights.mean(1)
    spread = torch.linalg.vector_norm(rows - received.unsqueeze(1), ord=1, dim=-1).mean(dim=-1) / 2
    return received, spread


def summary_einsum(weights):  # einsum, and a list instead of a tuple
    b, h, n, _ = weights.shape
    received = torch.einsum("bhqk->bk", weights) / (h * n)
    spread = (weights.mean(1) - received[:, None]).abs().sum(-1).mean(-1) * 0.5
    return [received, spread]


def test_summary_reference_and_other_right_answers_pass():
    from helpers.models.classifier import attention_summary

    for right in (attention_summary, summary_reference, summary_other_ways, summary_einsum):
        assert check_attention_summary(right) is True, right.__name__


def test_summary_stub_not_attempted(capsys):
    def stub(weights):
        raise NotImplementedError("Exercise: replace this line with your code")

    assert_not_attempted(check_attention_summary, stub, capsys)
    assert_not_attempted(check_attention_summary, ..., capsys)


def _summary(received=None, spread=None):
    def summary(weights):
        rows = weights.mean(dim=1)
        good = rows.mean(dim=1)
        r = received(weights, rows) if received else good
        s = spread(weights, rows, good) if spread else 0.5 * (rows - good[:, None, :]).abs().sum(-1).mean(-1)
        return r, s

    return summary


_tv = lambda a, b: 0.5 * (a - b).abs().sum(-1)  # noqa: E731

SUMMARY_MISTAKES = [
    (_summary(received=lambda w, rows: rows.mean(-1)), ["averaged over the keys", "axis 2"]),
    (_summary(received=lambda w, rows: rows.sum(1)), ["summed over the queries"]),
    (_summary(received=lambda w, rows: w[:, 0].mean(1)), ["only the first head"]),
    (_summary(received=lambda w, rows: rows.amax(1)), ["largest attention over the queries"]),
    (_summary(received=lambda w, rows: w.sum(1).mean(1)), ["summed over the heads"]),
    (_summary(received=lambda w, rows: w.mean(dim=(0, 1))), ["wrong shape"]),
    (_summary(spread=lambda w, rows, r: (rows - r[:, None, :]).abs().sum(-1).mean(-1)), ["factor 0.5"]),
    (_summary(spread=lambda w, rows, r: _tv(rows, r[:, None, :]).amax(-1)), ["largest distance over the queries"]),
    (_summary(spread=lambda w, rows, r: _tv(rows, r[:, None, :]).sum(-1)), ["sums the distances"]),
    (_summary(spread=lambda w, rows, r: _tv(rows, 1.0 / rows.shape[-1]).mean(-1)), ["uniform distribution"]),
    (_summary(spread=lambda w, rows, r: ((rows - r[:, None, :]) ** 2).sum(-1).mean(-1)), ["squared"]),
    (_summary(spread=lambda w, rows, r: _tv(rows, r[:, :, None]).mean(-1)), ["wrong axis", "received[:, None, :]"]),
    (_summary(spread=lambda w, rows, r: _tv(w, w.mean(2, keepdim=True)).mean(dim=(1, 2))), ["per head"]),
    (lambda w: summary_reference(w)[::-1], ["swapped"]),
    (lambda w: summary_reference(w)[0], ["two tensors"]),
]


@pytest.mark.parametrize("wrong, phrases", SUMMARY_MISTAKES)
def test_summary_mistakes_are_named(wrong, phrases):
    assert_caught(check_attention_summary, wrong, *phrases)


@pytest.mark.parametrize("check", [check_choose_learning_rate, check_attention_summary])
def test_new_checks_keep_the_stub_contract(check, capsys):
    def bare_stub(arg):
        raise NotImplementedError

    def own_not_implemented(arg):
        raise NotImplementedError("dim=None is not supported")  # the student's own message: a real attempt

    def calls_a_module_list(arg):
        return nn.ModuleList([nn.Identity()])(arg)  # PyTorch's own NotImplementedError: a real attempt

    assert_not_attempted(check, bare_stub, capsys)
    assert_caught(check, own_not_implemented, "not the exercise's stub", "dim=None is not supported")
    assert "not attempted" not in assert_caught(check, calls_a_module_list, "not the exercise's stub", "loop over it")


# ---------------------------------------------------------------- an outside review: more of the likeliest mistakes


class PartialPatchEmbedding(StubPatchEmbedding):
    def forward(self, x):
        patches = x.unfold(1, self.patch_size, self.stride)  # noqa: F841 (the learner stopped here)
        raise NotImplementedError("Exercise: replace this line with your code")


def _first_n_windows(self, x):
    n = (x.shape[1] - self.patch_size) // self.stride + 1
    return self.proj(torch.stack([x[:, i : i + self.patch_size] for i in range(n)], 1))


def _new_linear(self, x):
    return nn.Linear(self.patch_size, self.proj.out_features).to(x.dtype)(x.unfold(1, self.patch_size, self.stride))


REVIEW_PATCH_MISTAKES = [
    (
        make_patch_embedding(lambda self, x: self.proj(x.unsqueeze(1).unfold(2, self.patch_size, self.stride))),
        ["extra axis of size 1"],
    ),
    (
        make_patch_embedding(lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride).transpose(1, 2))),
        ["were transposed"],
    ),
    (
        make_patch_embedding(lambda self, x: self.proj(x.T.unfold(0, self.patch_size, self.stride))),
        ["batch axis and the patch axis are swapped"],
    ),
    (make_patch_embedding(_first_n_windows), ["starts at sample i instead of i * stride"]),
    (make_patch_embedding(_new_linear), ["does not depend on self.proj", "created inside forward"]),
    (
        make_patch_embedding(lambda self, x: self.proj(F.pad(x, (0, self.stride)).unfold(1, self.patch_size, self.stride))),
        ["one too many"],
    ),
    (make_patch_embedding(lambda self, x: self.proj(x.unfold(1, self.patch_size, self.stride)).mean(1)), ["patches were pooled"]),
    (make_patch_embedding(lambda self, x: torch.relu(self.proj(x.unfold(1, self.patch_size, self.stride)))), ["an activation"]),
    (PartialPatchEmbedding, ["partial work", "not an exercise left untouched"]),
]


@pytest.mark.parametrize("wrong, phrases", REVIEW_PATCH_MISTAKES)
def test_review_patch_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_patch_embedding, wrong, *phrases)
    assert "not attempted" not in message


def test_review_patch_right_answers_pass():
    def zeros_loop(self, x):
        n = (x.shape[1] - self.patch_size) // self.stride + 1
        out = torch.zeros(x.shape[0], n, self.patch_size, dtype=x.dtype, device=x.device)
        for i in range(n):
            out[:, i] = x[:, i * self.stride : i * self.stride + self.patch_size]
        return self.proj(out)

    def as_strided(self, x):
        n = (x.shape[1] - self.patch_size) // self.stride + 1
        return self.proj(x.as_strided((x.shape[0], n, self.patch_size), (x.stride(0), self.stride * x.stride(1), x.stride(1))))

    def einsum(self, x):
        return torch.einsum("bnp,dp->bnd", x.unfold(1, self.patch_size, self.stride), self.proj.weight) + self.proj.bias

    def transposed_weight(self, x):
        return x.unfold(1, self.patch_size, self.stride) @ self.proj.weight.T + self.proj.bias

    for right in (zeros_loop, as_strided, einsum, transposed_weight):
        assert check_patch_embedding(make_patch_embedding(right)) is True, right.__name__


def _forward_with(block=None, pool=None, norm=None):
    def forward(model, x):
        h = model.patch_embed(x)
        if model.pooling == "cls":
            h = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), h], dim=1)
        h = h + model.pos_embed
        for b in model.blocks:
            h = block(b, h) if block else b(h)
        h = norm(model, h) if norm else model.norm(h)
        pooled = pool(h) if pool else (h[:, 0] if model.pooling == "cls" else h.mean(dim=1))
        return model.head(pooled)

    return forward


def forward_partial(model, x):
    h = model.patch_embed(x)
    if model.pooling == "cls":
        h = torch.cat([model.cls_token.expand(x.shape[0], -1, -1), h], dim=1)
    h = h + model.pos_embed  # noqa: F841 (the learner stopped here)
    raise NotImplementedError("Exercise: replace this line with your code")


def forward_batch_of_two(model, x):
    h = model.patch_embed(x)
    if model.pooling == "cls":
        h = torch.cat([model.cls_token.expand(2, -1, -1), h], dim=1)
    h = h + model.pos_embed
    for block in model.blocks:
        h = block(h)
    h = model.norm(h)
    return model.head(h[:, 0] if model.pooling == "cls" else h.mean(dim=1))


REVIEW_FORWARD_MISTAKES = [
    (_forward_with(block=lambda b, h: h + b(h)), ["already adds its own residual"]),
    (_forward_with(pool=lambda h: h.amax(1)), ["max-pooled"]),
    (_forward_with(pool=lambda h: h[:, 0] if h.shape[1] == 7 else h.amax(1)), ["max-pooled", "pooling='mean'"]),
    (_forward_with(norm=lambda m, h: F.layer_norm(h, h.shape[-1:])), ["without model.norm's learned weight"]),
    (_forward_with(norm=lambda m, h: m.norm(m.norm(h))), ["applied twice"]),
    (lambda model, x: forward_reference(model, x).argmax(-1), ["1 axes"]),
    (forward_batch_of_two, ["expand it to the batch"]),
    (forward_partial, ["partial work"]),
]


@pytest.mark.parametrize("wrong, phrases", REVIEW_FORWARD_MISTAKES)
def test_review_forward_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_classifier_forward, wrong, *phrases)
    assert "not attempted" not in message


def test_review_forward_right_answers_pass():
    def repeat_and_head_first(model, x):  # a linear head commutes with the mean, and with reading token 0
        h = model.patch_embed(x)
        if model.cls_token is not None:
            h = torch.cat([model.cls_token.repeat(len(x), 1, 1), h], 1)
        h = h + model.pos_embed
        for block in model.blocks:
            h = block(h)
        logits = model.head(model.norm(h))  # (batch, tokens, classes)
        return logits[:, 0] if model.pooling == "cls" else logits.mean(1)

    def sequential_and_sum(model, x):
        h = model.patch_embed(x)
        if model.cls_token is not None:
            h = torch.cat((model.cls_token.expand(x.size(0), *model.cls_token.shape[1:]), h), dim=-2)
        h = model.norm(nn.Sequential(*model.blocks)(h + model.pos_embed))
        return model.head(h[:, 0, :] if model.pooling == "cls" else h.sum(1) / h.shape[1])

    def by_cls_token(model, x):  # the branch read off model.cls_token instead of model.pooling
        h = model.patch_embed(x)
        has_cls = model.cls_token is not None
        if has_cls:
            h = torch.cat([model.cls_token.expand(h.shape[0], -1, -1), h], dim=1)
        h = h + model.pos_embed
        for block in model.blocks:
            h = block(h)
        h = model.norm(h)
        return model.head(h[:, 0] if has_cls else torch.mean(h, dim=1))

    for right in (repeat_and_head_first, sequential_and_sum, by_cls_token):
        assert check_classifier_forward(right) is True, right.__name__


def step_partial(model, optimizer, x, y):
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)  # noqa: F841 (the learner stopped here)
    raise NotImplementedError("Exercise: replace this line with your code")


def step_new_optimizer(model, optimizer, x, y):
    model.train()
    own = torch.optim.Adam(model.parameters(), lr=1e-3)
    own.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    own.step()
    return loss.item()


def step_by_hand(model, optimizer, x, y):
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
    return loss.item()


def _step_returning(ret):
    def step(model, optimizer, x, y):
        model.train()
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return ret(loss)

    return step


REVIEW_STEP_MISTAKES = [
    (step_new_optimizer, ["not through the `optimizer` handed to train_step"]),
    (step_by_hand, ["not through the `optimizer` handed to train_step"]),
    (_step_returning(lambda loss: loss.item), ["returned builtin_function_or_method", "loss.item()"]),
    (_step_returning(lambda loss: loss.detach()), ["returned a tensor"]),
    (_step_returning(lambda loss: int(loss.item())), ["returned int"]),
    (_step_returning(lambda loss: 0.5), ["the loss of the first step is 0.5"]),
    (wrong_step(loss_fn=lambda z, y: F.mse_loss(z, F.one_hot(y, z.shape[-1]).to(z.dtype))), ["loss of the first step"]),
    (step_partial, ["partial work"]),
]


@pytest.mark.parametrize("wrong, phrases", REVIEW_STEP_MISTAKES)
def test_review_step_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_train_step, wrong, *phrases)
    assert "not attempted" not in message


def test_review_step_right_answers_pass():
    def model_zero_grad(model, optimizer, x, y):
        model.train()
        model.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    def one_hot_targets(model, optimizer, x, y):  # probabilities as targets: the same cross-entropy
        model.train()
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, F.one_hot(y, logits.shape[-1]).to(logits.dtype))
        loss.backward()
        optimizer.step()
        return loss.item()

    def gathered_log_probabilities(model, optimizer, x, y):
        model.train()
        optimizer.zero_grad()
        loss = -F.log_softmax(model(x), dim=-1).gather(1, y[:, None]).mean()
        loss.backward()
        optimizer.step()
        return loss.item()

    for right in (model_zero_grad, one_hot_targets, gathered_log_probabilities):
        assert check_train_step(right) is True, right.__name__


def _choose_healthy(healthy):
    return lambda runs: min((lr for lr, run in runs.items() if healthy(run.val_loss)), key=lambda lr: runs[lr].val_loss[-1])


def _healthy_runs(runs):
    return [lr for lr, run in runs.items() if _finite(run.val_loss) and run.val_loss[-1] <= 1.5 * min(run.val_loss)]


def choose_partial(runs):
    healthy = [lr for lr, run in runs.items() if _finite(run.val_loss)]  # noqa: F841 (the learner stopped here)
    raise NotImplementedError("Exercise: replace this line with your code")


REVIEW_CHOOSE_MISTAKES = [
    (_choose_healthy(lambda v: not any(math.isnan(x) for x in v) and v[-1] <= 1.5 * min(v)), ["infinite", "math.isfinite"]),
    (_choose_healthy(lambda v: _finite(v) and v[-1] <= 1.5 * v[-2]), ["not with the epoch before"]),
    (_choose_healthy(lambda v: _finite(v) and v[-1] <= 2.0 * min(v)), ["1.8 times its lowest"]),
    (lambda runs: min(_healthy_runs(runs), key=lambda lr: sum(runs[lr].val_loss)), ["lowest average over its curve"]),
    (
        lambda runs: sorted(((lr, runs[lr]) for lr in _healthy_runs(runs)), key=lambda item: item[1].val_loss[-1])[0],
        ["a pair (learning rate, run)"],
    ),
    (lambda runs: min(runs[lr].val_loss[-1] for lr in _healthy_runs(runs)), ["a validation loss, not a learning rate"]),
    (lambda runs: _healthy_runs(runs), ["list of learning rates"]),
    (
        lambda runs: (lambda ok: min(ok, key=lambda lr: runs[lr].val_loss[-1]) if ok else None)(_healthy_runs(runs)),
        ["returned None"],
    ),
    (choose_partial, ["partial work"]),
]


@pytest.mark.parametrize("wrong, phrases", REVIEW_CHOOSE_MISTAKES)
def test_review_choose_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_choose_learning_rate, wrong, *phrases)
    assert "not attempted" not in message


def test_review_choose_right_answers_pass():
    def max_of_negative(runs):
        return max(_healthy_runs(runs), key=lambda lr: -runs[lr].val_loss[-1])

    def torch_isfinite(runs):
        ok = [
            lr
            for lr, run in runs.items()
            if torch.isfinite(torch.tensor(run.val_loss)).all() and run.val_loss[-1] <= 1.5 * min(run.val_loss)
        ]
        return min(ok, key=lambda lr: runs[lr].val_loss[-1])

    def dict_get(runs):
        last = {lr: runs[lr].val_loss[-1] for lr in _healthy_runs(runs)}
        return min(last, key=last.get)

    for right in (max_of_negative, torch_isfinite, dict_get):
        assert check_choose_learning_rate(right) is True, right.__name__


def summary_partial(weights):
    rows = weights.mean(dim=1)
    received = rows.mean(dim=1)  # noqa: F841 (the learner stopped here)
    raise NotImplementedError("Exercise: replace this line with your code")


REVIEW_SUMMARY_MISTAKES = [
    (_summary(spread=lambda w, rows, r: _tv(w, r[:, None, None, :]).mean(dim=(1, 2))), ["each head's rows"]),
    (_summary(spread=lambda w, rows, r: 0.5 * (rows - r[:, None, :]).abs().mean(-1).mean(-1)), ["averaged over the keys"]),
    (_summary(spread=lambda w, rows, r: torch.linalg.norm(rows - r[:, None, :], dim=-1).mean(-1)), ["Euclidean"]),
    (_summary(spread=lambda w, rows, r: rows.std(1).mean(-1)), ["standard deviation"]),
    (_summary(received=lambda w, rows: rows[:, 0]), ["only the first query"]),
    (_summary(spread=lambda w, rows, r: _tv(rows, r[:, None, :])), ["2 axes"]),
    (_summary(received=lambda w, rows: rows.mean(1, keepdim=True)), ["3 axes"]),
    (lambda w: tuple(t.numpy() for t in summary_reference(w)), ["ndarray"]),
    (summary_partial, ["partial work"]),
]


@pytest.mark.parametrize("wrong, phrases", REVIEW_SUMMARY_MISTAKES)
def test_review_summary_mistakes_are_named(wrong, phrases):
    message = assert_caught(check_attention_summary, wrong, *phrases)
    assert "not attempted" not in message


def test_review_summary_right_answers_pass():
    def permuted(weights):
        received = weights.permute(0, 2, 1, 3).mean((1, 2))  # (batch, n)
        return received, 0.5 * (weights.mean(1) - received[:, None]).abs().sum(-1).mean(-1)

    def queries_first(weights):
        received = weights.mean(2).mean(1)  # (batch, n)
        return received, (weights.mean(1) - received.unsqueeze(-2)).abs().sum(dim=-1).mean(dim=-1) / 2

    def l1_norm(weights):
        received = weights.mean(dim=[1, 2])  # (batch, n)
        return received, 0.5 * torch.norm(weights.mean(1) - received[:, None, :], p=1, dim=-1).mean(-1)

    def in_float32(weights):  # a float32 answer is judged at float32's precision
        rows = weights.float().mean(1)
        received = rows.mean(1)
        return received, 0.5 * (rows - received[:, None, :]).abs().sum(-1).mean(-1)

    for right in (permuted, queries_first, l1_norm, in_float32):
        assert check_attention_summary(right) is True, right.__name__


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_review_learner_code_runs_on_cuda_tensors():
    """What passed its check also runs on the device tensors of the notebook (a learner on a GPU)."""
    from helpers.models.classifier import TransformerClassifier, attention_summary

    model = TransformerClassifier().cuda().eval()
    x = torch.randn(3, 40, device="cuda")
    with torch.no_grad():
        logits = forward_reference(model, x)  # (3, 10)
        assert logits.device.type == "cuda" and logits.shape == (3, 10)
        received, spread = attention_summary(model.attention_maps(x)[-1])  # (3, 17), (3,)
    assert received.device.type == "cuda" and spread.shape == (3,)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    assert isinstance(train_step(model, optimizer, x, torch.tensor([0, 1, 2], device="cuda")), float)
