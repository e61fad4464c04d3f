"""The notebook 07 models: shapes, patches, pooling, attention maps, and parameter counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from helpers.models.classifier import (
    CNNClassifier,
    GRUClassifier,
    MLPClassifier,
    PatchEmbedding,
    TransformerClassifier,
    attention_summary,
    num_patches,
)


def test_num_patches():
    assert num_patches(40, 8, 2) == 17
    assert num_patches(20, 5, 3) == 6
    with pytest.raises(ValueError):
        num_patches(4, 8, 2)


def test_patch_embedding_equals_a_strided_convolution():
    torch.manual_seed(0)
    embed = PatchEmbedding(5, 3, 7)
    x = torch.randn(2, 20)
    out = embed(x)
    assert out.shape == (2, 6, 7)
    ref = F.conv1d(x[:, None], embed.proj.weight[:, None, :], embed.proj.bias, stride=3).transpose(1, 2)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(out[:, 1], embed.proj(x[:, 3:8]))


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_transformer_classifier_shapes(pooling):
    model = TransformerClassifier(pooling=pooling, d_model=16, num_heads=2, num_layers=1)
    x = torch.randn(3, 40)
    n_tokens = 17 + (pooling == "cls")
    assert model.tokens(x).shape == (3, n_tokens, 16)
    assert model(x).shape == (3, 10)
    maps = model.attention_maps(x)
    assert len(maps) == 1 and maps[0].shape == (3, 2, n_tokens, n_tokens)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(3, 2, n_tokens))
    assert all(not b.keep_weights for b in model.blocks)


def test_transformer_is_permutation_sensitive_through_positions():
    torch.manual_seed(0)
    model = TransformerClassifier(d_model=16, num_heads=2, num_layers=1).eval()
    x = torch.randn(2, 40)
    assert not torch.allclose(model(x), model(x.flip(-1)))


@pytest.mark.parametrize("cls", [MLPClassifier, CNNClassifier, GRUClassifier])
def test_baselines_shapes(cls):
    assert cls()(torch.randn(4, 40)).shape == (4, 10)


def test_all_models_train_one_step():
    torch.manual_seed(0)
    x, y = torch.randn(8, 40), torch.randint(0, 10, (8,))
    for model in (
        TransformerClassifier(d_model=16, num_heads=2, num_layers=1),
        MLPClassifier(),
        CNNClassifier(),
        GRUClassifier(),
    ):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        before = F.cross_entropy(model(x), y).item()
        for _ in range(5):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        assert F.cross_entropy(model(x), y).item() < before


def test_a_patch_embedding_class_can_be_passed_and_draws_the_same_weights():
    class MyPatches(torch.nn.Module):  # another class, the same nn.Linear: the notebook's student version
        def __init__(self, patch_size, stride, d_model):
            super().__init__()
            self.patch_size, self.stride = patch_size, stride
            self.proj = torch.nn.Linear(patch_size, d_model)

        def forward(self, x):
            return self.proj(x.unfold(1, self.patch_size, self.stride))

    torch.manual_seed(0)
    reference = TransformerClassifier(d_model=16, num_heads=2, num_layers=1).eval()
    torch.manual_seed(0)
    mine = TransformerClassifier(d_model=16, num_heads=2, num_layers=1, patch_embedding=MyPatches).eval()
    assert isinstance(mine.patch_embed, MyPatches)
    for (name, a), (_, b) in zip(reference.state_dict().items(), mine.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    x = torch.randn(2, 40)
    torch.testing.assert_close(mine(x), reference(x))


def test_the_default_transformer_is_notebook_07s_model():
    model = TransformerClassifier()
    assert model.num_patches == 17 and model.pooling == "mean"
    assert len(model.blocks) == 2  # 2 blocks for 40 epochs beat 3 for 27 (benchmarks/search_classifier.py)
    assert model.blocks[0].self_attn.num_heads == 2  # 2 heads of 16 features
    assert sum(p.numel() for p in model.parameters()) == 18_314  # the count notebook 07 prints
    maps = model.attention_maps(torch.randn(3, 40))
    assert [tuple(m.shape) for m in maps] == [(3, 2, 17, 17)] * 2


def test_attention_summary_reads_columns():
    n = 5
    columns = torch.zeros(2, 3, n, n)
    columns[..., 1] = 0.75
    columns[..., 3] = 0.25  # every query attends alike: pure columns
    received, spread = attention_summary(columns)
    torch.testing.assert_close(received, torch.tensor([[0.0, 0.75, 0.0, 0.25, 0.0]] * 2))
    torch.testing.assert_close(spread, torch.zeros(2))
    diagonal = torch.eye(n).expand(2, 3, n, n)  # each query attends to itself alone
    received, spread = attention_summary(diagonal)
    torch.testing.assert_close(received, torch.full((2, n), 1 / n))
    torch.testing.assert_close(spread, torch.full((2,), 1 - 1 / n))  # total variation between a one-hot and uniform
    for bad in (torch.zeros(3, n, n), torch.zeros(2, 3, n, n + 1), "maps"):
        with pytest.raises(ValueError, match="batch, heads, n, n"):
            attention_summary(bad)


def test_the_figures_of_notebook_07_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.plots.classifier import attention_over_signal, lr_selection
    from helpers.training import History

    runs = {"GRU": {0.03: History(val_loss=[2.0, 1.5, 1.2]), 0.1: History(val_loss=[2.0, 1.0, 0.6])}}
    fig = lr_selection(runs, {"GRU": 0.1})
    assert fig.axes[0].get_title() == "GRU: lr 0.1 chosen" and fig.axes[0].get_ylabel() == "validation loss"
    plt.close(fig)
    weights = torch.softmax(torch.randn(3, 17, 17), dim=-1)
    fig = attention_over_signal(torch.randn(3, 40), weights, patch_size=8, stride=2, titles=["a", "b", "c"])
    assert any(ax.get_ylabel() == "attention weight" for ax in fig.axes)  # the maps' colorbar
    assert any(ax.get_ylabel() == "attention received (bars)" for ax in fig.axes)  # the bars' labelled axis
    plt.close(fig)
