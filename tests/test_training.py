"""helpers.training: fit records per-epoch validation numbers, is reproducible with a seed, follows the model's
device; evaluate returns the mean cross-entropy and the accuracy; the warm-up + cosine schedule."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.training import History, count_parameters, evaluate, fit, train_step, warmup_cosine


def _data(n: int = 96, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 6, generator=g)  # (n, 6)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0).long()  # (n,) three classes, learnable
    return x, y


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 3))


def _fit(model: nn.Module, **kwargs) -> History:
    x, y = _data()
    xv, yv = _data(40, seed=1)
    return fit(model, x, y, xv, yv, **{"epochs": 3, "lr": 1e-2, "batch_size": 32, "progress": False, **kwargs})


def test_fit_records_training_and_validation_numbers_every_epoch():
    hist = _fit(_model(), epochs=4)
    for key in ("train_loss", "train_acc", "val_loss", "val_acc"):
        assert len(hist[key]) == 4, key
        assert all(isinstance(v, float) for v in hist[key])
    assert all(0.0 <= a <= 1.0 for a in hist.train_acc + hist.val_acc)
    assert all(v > 0 for v in hist.train_loss + hist.val_loss)
    assert hist.final_val_acc == hist.val_acc[-1]
    assert hist.seconds > 0
    assert not hasattr(hist, "test_acc")  # the test set is evaluated once, outside fit


def test_fit_learns():
    hist = _fit(_model(), epochs=15, lr=3e-2)
    assert hist.train_loss[-1] < hist.train_loss[0]
    assert hist.val_acc[-1] > 0.7


def test_validation_numbers_are_those_of_evaluate_on_the_validation_split():
    model = _model()
    hist = _fit(model)
    xv, yv = _data(40, seed=1)
    assert evaluate(model, xv, yv) == (hist.val_loss[-1], hist.val_acc[-1])
    x, y = _data()
    assert evaluate(model, x, y) == (hist.train_loss[-1], hist.train_acc[-1])


def test_fit_is_reproducible_with_a_seed():
    # the seed orders the batches; dropout draws from torch's global generator, seeded with the model (_model)
    a = _model()
    ha = _fit(a, seed=3)
    b = _model()
    hb = _fit(b, seed=3)
    assert (ha.train_loss, ha.val_loss, ha.val_acc) == (hb.train_loss, hb.val_loss, hb.val_acc)
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    hc = _fit(_model(), seed=4)  # another seed shuffles the batches differently
    assert hc.train_loss != ha.train_loss


def test_fit_calls_step_fn_once_per_batch_on_the_models_device():
    seen = []

    def step(model, optimizer, x, y):
        seen.append((x.shape[0], x.device, y.device))
        return train_step(model, optimizer, x, y)

    model = _model()
    _fit(model, epochs=2, batch_size=40, step_fn=step)  # 96 examples: batches of 40, 40, 16
    assert [n for n, _, _ in seen] == [40, 40, 16] * 2
    device = next(model.parameters()).device
    assert all(xd == device and yd == device for _, xd, yd in seen)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_fit_and_evaluate_follow_a_cuda_model():
    x, y = _data()
    xv, yv = _data(40, seed=1)
    model = _model().cuda()
    hist = fit(model, x, y, xv.cuda(), yv.cuda(), epochs=2, batch_size=32, progress=False)  # CPU or GPU data alike
    assert len(hist.val_acc) == 2
    assert next(model.parameters()).is_cuda
    loss, acc = evaluate(model, x, y)
    assert 0.0 <= acc <= 1.0 and loss > 0


def test_evaluate_returns_mean_cross_entropy_and_accuracy_over_batches():
    torch.manual_seed(0)
    model = nn.Linear(4, 3)
    x = torch.randn(7, 4)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    with torch.no_grad():
        logits = model(x)
    loss, acc = evaluate(model, x, y, batch_size=3)  # batches of 3, 3, 1: the mean is over examples, not batches
    assert loss == pytest.approx(F.cross_entropy(logits, y).item(), rel=1e-6)
    assert acc == (logits.argmax(-1) == y).sum().item() / 7
    assert isinstance(loss, float) and isinstance(acc, float)


def test_evaluate_switches_to_eval_mode_and_keeps_gradients_off():
    model = nn.Sequential(nn.Linear(4, 3), nn.Dropout(0.5))
    x, y = torch.randn(10, 4), torch.zeros(10, dtype=torch.long)
    first = evaluate(model, x, y)
    assert not model.training
    assert evaluate(model, x, y) == first  # dropout off: the same numbers twice
    assert all(p.grad is None for p in model.parameters())


def test_evaluate_exact_accuracy():
    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.dummy = nn.Parameter(torch.zeros(()))

        def forward(self, x):
            return x  # the inputs are the logits

    logits = torch.tensor([[2.0, 0.0], [0.0, 2.0], [2.0, 0.0], [0.0, 2.0]])
    y = torch.tensor([0, 1, 1, 1])
    loss, acc = evaluate(Fixed(), logits, y)
    assert acc == 0.75
    assert loss == pytest.approx(F.cross_entropy(logits, y).item())


def test_train_step_returns_the_loss_and_updates():
    model = _model()
    x, y = _data(32)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    model.eval()
    loss = train_step(model, optimizer, x, y)
    assert isinstance(loss, float) and loss > 0
    assert model.training
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def test_warmup_cosine_schedule():
    optimizer = torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=1.0)
    scheduler = warmup_cosine(optimizer, warmup_steps=4, total_steps=12)
    lrs = []
    for _ in range(13):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[:4] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert lrs[4] == pytest.approx(1.0)
    assert lrs[8] == pytest.approx(0.5)  # half-way through the decay
    assert lrs[12] == pytest.approx(0.0, abs=1e-12)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:], strict=False))


def test_count_parameters_counts_trainable_only():
    model = nn.Linear(4, 3)  # 12 + 3
    assert count_parameters(model) == 15
    model.bias.requires_grad_(False)
    assert count_parameters(model) == 12


def test_eval_train_n_measures_the_training_curve_on_the_first_n_examples():
    x, y = _data()
    model = _model()
    hist = _fit(model, epochs=1, eval_train=40)
    assert (hist.train_loss[-1], hist.train_acc[-1]) == evaluate(model, x[:40], y[:40])
    assert _fit(_model(), epochs=1, eval_train=False).train_loss == []
    for bad in (0, -3, 2.5, "all"):
        with pytest.raises(ValueError, match="eval_train"):
            _fit(_model(), epochs=1, eval_train=bad)


def test_augment_transforms_every_training_batch_with_the_seeded_generator():
    seen = []

    def augment(xb, generator):
        assert isinstance(generator, torch.Generator)
        seen.append(xb.shape[0])
        return xb + torch.randn(xb.shape, generator=generator)

    ha = _fit(_model(), epochs=2, batch_size=40, augment=augment)  # 96 examples: batches of 40, 40, 16
    assert seen == [40, 40, 16] * 2
    hb = _fit(_model(), epochs=2, batch_size=40, augment=augment)  # _model() reseeds dropout's global generator
    assert ha.train_loss == hb.train_loss  # reproducible: the augmentation draws from fit's seeded generator
    plain = _fit(_model(), epochs=2, batch_size=40)
    assert plain.train_loss != ha.train_loss
    model = _model()
    hist = _fit(model, epochs=1, augment=augment)
    xv, yv = _data(40, seed=1)
    assert evaluate(model, xv, yv) == (hist.val_loss[-1], hist.val_acc[-1])  # evaluation never sees it


def test_adamw_is_fused_where_pytorch_has_the_kernel_and_falls_back_elsewhere(monkeypatch):
    from helpers.training import adamw

    model = _model()
    optimizer = adamw(model, lr=1e-3, weight_decay=0.01)
    assert optimizer.defaults["fused"] is True  # PyTorch has fused AdamW on the CPU
    assert optimizer.defaults["lr"] == 1e-3 and optimizer.defaults["weight_decay"] == 0.01
    assert len(optimizer.param_groups[0]["params"]) == len(list(model.parameters()))
    real = torch.optim.AdamW

    def no_fused(params, **kwargs):
        if kwargs.get("fused"):
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported devices")
        return real(params, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", no_fused)
    fallback = adamw(model, lr=1e-3, weight_decay=0.01)  # a device without the kernel: the plain AdamW
    assert not fallback.defaults.get("fused")
    assert len(fallback.param_groups[0]["params"]) == len(list(model.parameters()))


def test_the_guards_are_off_by_default_and_a_huge_clip_changes_nothing():
    # each model built right before its run: dropout draws from the global generator that _model() seeds
    a = _model()
    ha = _fit(a, epochs=2)
    hb = _fit(_model(), epochs=2, clip_grad_norm=None, keep_best=False)
    c = _model()
    hc = _fit(c, epochs=2, clip_grad_norm=1e9)  # the norm is never above 1e9: the gradients are left as they are
    assert ha.val_loss == hb.val_loss == hc.val_loss
    assert ha.grad_norm == [] and ha.best_epoch is None
    for pa, pc in zip(a.parameters(), c.parameters(), strict=True):
        assert torch.equal(pa, pc)
    assert len(hc.grad_norm) == 2 and all(g > 0 for g in hc.grad_norm)


def test_clip_grad_norm_caps_the_gradient_of_every_step_whatever_the_step_function():
    after = []

    def step(model, optimizer, x, y):  # a step of one's own: the clipping still happens inside optimizer.step()
        loss = train_step(model, optimizer, x, y)
        after.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()])).item())
        return loss

    hist = _fit(_model(), epochs=3, lr=0.1, clip_grad_norm=0.05, step_fn=step)
    assert after and max(after) <= 0.05 * (1 + 1e-5)
    assert max(hist.grad_norm) > 0.05  # the norms recorded are those before clipping
    for bad in (0, -1.0, "1"):
        with pytest.raises(ValueError, match="clip_grad_norm"):
            _fit(_model(), epochs=1, clip_grad_norm=bad)


def test_keep_best_returns_the_weights_of_the_lowest_validation_loss():
    model = _model()
    hist = _fit(model, epochs=8, lr=0.3)  # a high rate: the validation loss goes up and down
    xv, yv = _data(40, seed=1)
    kept = _model()
    hist_kept = _fit(kept, epochs=8, lr=0.3, keep_best=True)
    assert hist_kept.val_loss == hist.val_loss  # the run itself is the same
    assert hist_kept.best_epoch == min(range(8), key=hist.val_loss.__getitem__)
    assert evaluate(kept, xv, yv)[0] == pytest.approx(min(hist.val_loss), rel=1e-6)
    x, y = _data()
    with pytest.raises(ValueError, match="keep_best"):
        fit(_model(), x, y, None, None, epochs=1, progress=False, keep_best=True)


def test_blew_up_and_choose_learning_rate():
    from helpers.training import blew_up, choose_learning_rate

    assert not blew_up([2.0, 1.0, 0.5]) and not blew_up([2.0, 0.5, 0.7])  # a small rise at the end is noise
    assert blew_up([2.0, 0.5, 0.9]) and blew_up([2.0, float("nan"), 0.4]) and blew_up([2.0, 0.5, float("inf")])
    runs = {
        1e-3: History(val_loss=[2.0, 1.5, 1.2]),
        1e-2: History(val_loss=[2.0, 0.6, 0.5]),
        1e-1: History(val_loss=[2.0, 0.1, 0.3]),  # the lowest point and the lowest end, but it blew up
    }
    assert choose_learning_rate(runs) == 1e-2
    runs[3e-2] = History(val_loss=[2.0, 0.5, float("nan")])
    assert choose_learning_rate(runs) == 1e-2
    with pytest.raises(ValueError, match="every run blew up"):
        choose_learning_rate({0.1: History(val_loss=[1.0, float("nan")])})
    with pytest.raises(ValueError, match="empty validation curve"):
        choose_learning_rate({0.1: History()})
