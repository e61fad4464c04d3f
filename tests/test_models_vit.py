"""helpers.models.vit: patchify, the patch embedding as a convolution, the ViT, rollout, the CNN baseline."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.models import (
    ImagePatchEmbedding,
    SmallCNN,
    VisionTransformer,
    attention_rollout,
    patchify,
    position_similarity,
    unpatchify,
    vit_forward,
)
from helpers.training import count_parameters


@pytest.mark.parametrize("shape, p", [((2, 1, 8, 8), 2), ((2, 1, 8, 8), 4), ((2, 3, 6, 6), 3), ((3, 2, 4, 6), 2)])
def test_patchify_equals_unfold_and_unpatchify_inverts_it(shape, p):
    images = torch.randn(*shape, dtype=torch.float64)
    patches = patchify(images, p)
    b, c, h, w = shape
    assert patches.shape == (b, (h // p) * (w // p), c * p * p)
    torch.testing.assert_close(patches, F.unfold(images, p, stride=p).transpose(1, 2), atol=0, rtol=0)
    assert torch.equal(unpatchify(patches, p, c, h, w), images)


def test_patchify_numbers_patches_row_major():
    image = torch.arange(16.0).reshape(1, 1, 4, 4)
    patches = patchify(image, 2)
    assert patches[0, 1].tolist() == [2.0, 3.0, 6.0, 7.0]  # second patch: top right
    assert patches[0, 2].tolist() == [8.0, 9.0, 12.0, 13.0]  # third patch: bottom left


def test_patchify_rejects_indivisible_sizes():
    with pytest.raises(ValueError, match="not divisible"):
        patchify(torch.zeros(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="expected"):
        unpatchify(torch.zeros(1, 4, 5), 2, 1, 4, 4)


@pytest.mark.parametrize("c, p, d", [(1, 2, 5), (3, 3, 4)])
def test_patch_embedding_is_a_convolution(c, p, d):
    torch.manual_seed(0)
    embed = ImagePatchEmbedding(c, p, d).double()
    images = torch.randn(2, c, 6 if p == 3 else 8, 6 if p == 3 else 8, dtype=torch.float64)
    conv = embed.as_conv2d()
    assert isinstance(conv, nn.Conv2d) and conv.kernel_size == (p, p) and conv.stride == (p, p)
    torch.testing.assert_close(embed(images), conv(images).flatten(2).transpose(1, 2), atol=1e-12, rtol=0)


def _vit(**kw):
    torch.manual_seed(0)
    args = dict(image_size=8, patch_size=2, d_model=16, depth=2, num_heads=4, d_ff=24)
    args.update(kw)
    return VisionTransformer(**args).double().eval()


def test_vit_shapes_parameters_and_blocks():
    model = _vit()
    images = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    assert model(images).shape == (3, 10)
    assert model.num_patches == 16 and model.grid_size == 4
    assert model.cls_token.shape == (1, 1, 16) and model.pos_embed.shape == (1, 17, 16)
    for block in model.blocks:
        assert block.norm_first and block.ff.activation == "gelu"
    assert count_parameters(_vit(mlp_head=False)) == count_parameters(model) - (16 * 16 + 16)


def test_vit_forward_matches_the_module():
    model = _vit()
    images = torch.rand(3, 1, 8, 8, dtype=torch.float64)
    torch.testing.assert_close(vit_forward(model, images), model(images), atol=1e-12, rtol=0)


def test_without_position_embeddings_the_vit_ignores_patch_order():
    model = _vit()
    with torch.no_grad():
        model.pos_embed.zero_()
    images = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    perm = torch.randperm(16)
    shuffled = unpatchify(patchify(images, 2)[:, perm], 2, 1, 8, 8)
    torch.testing.assert_close(model(shuffled), model(images), atol=1e-10, rtol=0)
    with torch.no_grad():
        model.pos_embed.normal_()
    assert not torch.allclose(model(shuffled), model(images), atol=1e-6)


def test_attention_rollout_matches_a_hand_computation():
    model = _vit()
    images = torch.rand(2, 1, 8, 8, dtype=torch.float64)
    rollout = attention_rollout(model, images)
    assert rollout.shape == (2, 4, 4)
    torch.testing.assert_close(rollout.sum((1, 2)), torch.ones(2, dtype=torch.float64))
    assert all(not block.keep_weights for block in model.blocks)  # restored
    model.keep_attention(True)
    model(images)
    eye = torch.eye(17, dtype=torch.float64)
    joint = eye
    for block in model.blocks:
        a = 0.5 * block.attn_weights.mean(1) + 0.5 * eye
        joint = (a / a.sum(-1, keepdim=True)) @ joint
    expected = joint[:, 0, 1:] / joint[:, 0, 1:].sum(-1, keepdim=True)
    torch.testing.assert_close(rollout.reshape(2, 16), expected)


def test_position_similarity_is_a_cosine_matrix():
    sim = position_similarity(_vit())
    assert sim.shape == (16, 4, 4)
    flat = sim.reshape(16, 16)
    torch.testing.assert_close(flat.diagonal(), torch.ones(16, dtype=torch.float64))
    torch.testing.assert_close(flat, flat.T)


def test_small_cnn_shape():
    model = SmallCNN()
    assert model(torch.rand(3, 1, 8, 8)).shape == (3, 10)
    assert count_parameters(model) == (16 * 9 + 16) + (32 * 16 * 9 + 32) + (32 * 16 * 10 + 10)


def test_vit_figures_draw(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import helpers.plots as plots

    model = _vit()
    images = torch.rand(3, 1, 8, 8)
    figures = [
        plots.image_patches(images[0, 0], 2, patchify(images[:1], 2)[0]),
        plots.digit_gallery(images[:, 0], ["a", "b", "c"], ncols=2),
        plots.position_similarity_grid(position_similarity(model)),
        plots.rollout_overlays(images[:, 0], attention_rollout(model, images.double()), ["a", "b", "c"], ncols=2),
    ]
    ax = plots.confusion_heatmap(torch.tensor([0, 1, 2]), torch.tensor([0, 2, 2]))
    figures.append(ax.figure)
    import pandas as pd

    from helpers.training import History

    curves = plots.validation_curves(
        {"ViT": History(val_acc=[0.5, 0.9, 0.97]), "CNN": History(val_acc=[0.8, 0.99])}, {"logistic regression": 96.0}
    )
    assert [a.get_ylabel() for a in curves.axes] == ["validation accuracy (%)"] * 2
    assert len(curves.axes[1].get_lines()) == 3  # two runs and the baseline
    table = pd.DataFrame({"CNN": [99.0, 85.0], "ViT, shifted": [96.0, 95.5]}, index=["none", "right"])
    bars = plots.shift_accuracy(table, title="t")
    assert len(bars.axes[0].patches) == 4 and bars.axes[0].get_xlabel().startswith("shift")
    figures += [curves, bars]
    assert len(figures[2].axes) == 17  # 16 panels and the colour bar
    for fig in figures:
        plt.close(fig)


def _model_and_batch():
    torch.manual_seed(0)
    model = VisionTransformer(image_size=8, patch_size=4, d_model=16, depth=1, num_heads=2, d_ff=24)
    xb, yb = torch.rand(6, 1, 8, 8), torch.arange(6) % 10
    return model, torch.optim.SGD(model.parameters(), lr=0.1), xb, yb


def test_augmented_step_without_shifts_or_smoothing_is_the_plain_step():
    from helpers.models import augmented_step
    from helpers.training import train_step

    model_a, opt_a, xb, yb = _model_and_batch()
    model_b, opt_b, _, _ = _model_and_batch()
    loss_a = augmented_step(0, 0.0, seed=0)(model_a, opt_a, xb, yb)
    loss_b = train_step(model_b, opt_b, xb, yb)
    assert loss_a == loss_b
    for p, q in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.equal(p, q)


def test_augmented_step_smooths_labels_and_shifts_reproducibly():
    from helpers.data import random_shift
    from helpers.models import augmented_step

    model, opt, xb, yb = _model_and_batch()
    with torch.no_grad():
        moved = random_shift(xb, 1, torch.Generator().manual_seed(3))
        expected = F.cross_entropy(model.train()(moved), yb, label_smoothing=0.1).item()
    loss = augmented_step(1, 0.1, seed=3)(model, opt, xb, yb)
    assert abs(loss - expected) < 1e-6
    # the same seed gives the same shifts: two fresh runs agree
    losses = []
    for _ in range(2):
        model, opt, xb, yb = _model_and_batch()
        step = augmented_step(1, 0.1, seed=5)
        losses.append([step(model, opt, xb, yb) for _ in range(3)])
    assert losses[0] == losses[1]


def test_mixup_blends_each_image_with_a_permuted_partner_reproducibly():
    import numpy as np

    from helpers.data import mixup

    images = torch.rand(6, 1, 8, 8)
    mixed, perm, lam = mixup(images, 0.4, np.random.default_rng(7))
    assert mixed.shape == images.shape and 0.0 <= lam <= 1.0
    assert sorted(perm.tolist()) == list(range(6))
    torch.testing.assert_close(mixed, lam * images + (1 - lam) * images[perm])
    again, perm2, lam2 = mixup(images, 0.4, np.random.default_rng(7))
    assert lam2 == lam and torch.equal(perm2, perm) and torch.equal(again, mixed)
    with pytest.raises(ValueError, match="alpha > 0"):
        mixup(images, 0.0, np.random.default_rng(0))


def test_augmented_step_with_mixup_blends_the_losses_of_both_labels():
    import numpy as np

    from helpers.data import mixup
    from helpers.models import augmented_step

    model, opt, xb, yb = _model_and_batch()
    mixed, perm, lam = mixup(xb, 0.3, np.random.default_rng(11))
    with torch.no_grad():
        logits = model.train()(mixed)
        expected = lam * F.cross_entropy(logits, yb, label_smoothing=0.1) + (1 - lam) * F.cross_entropy(
            logits, yb[perm], label_smoothing=0.1
        )
    loss = augmented_step(0, 0.1, seed=11, mixup_alpha=0.3)(model, opt, xb, yb)
    assert abs(loss - expected.item()) < 1e-6
