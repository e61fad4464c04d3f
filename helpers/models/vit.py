"""Models of notebook 08: the Vision Transformer (and its small CNN baseline).

- ``patchify`` / ``unpatchify``: images ``(B, C, H, W)`` <-> patch vectors
  ``(B, N, C * p * p)``, patches in row-major order over the patch grid, each
  patch flattened channel first as ``(C, p, p)`` (the order of a ``Conv2d``
  weight ``(d_model, C, p, p)`` and of ``F.unfold``).
- ``ImagePatchEmbedding`` (also ``helpers.models.vit.PatchEmbedding``; not star-exported
  because notebook 07's 1-D ``PatchEmbedding`` owns that name in ``helpers.models``):
  patchify, then one ``nn.Linear(C * p * p, d_model)``;
  ``as_conv2d()`` returns the equal ``nn.Conv2d(C, d_model, p, stride=p)``.
- ``VisionTransformer``: patch embedding, a learnable class token, learned
  position embeddings, pre-LN encoder blocks (GELU) from ``helpers.blocks``, a
  final layer norm and an MLP head on the class token.
- ``SmallCNN``: the convolutional baseline trained on the same split.
- ``attention_rollout``, ``position_similarity``: what a trained ViT learned.
- ``augmented_step``: a training step for ``helpers.training.fit`` with random
  pixel shifts, mixup and label smoothing (the ViT's recipe in notebook 08).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.blocks import EncoderBlock
from helpers.data.digits import mixup, random_shift

__all__ = [
    "patchify",
    "unpatchify",
    "patch_embedding",
    "ImagePatchEmbedding",
    "VisionTransformer",
    "vit_forward",
    "SmallCNN",
    "attention_rollout",
    "position_similarity",
    "augmented_step",
]


def _check_divisible(height: int, width: int, patch_size: int) -> None:
    if height % patch_size or width % patch_size:
        raise ValueError(f"the image size {height} x {width} is not divisible by the patch size {patch_size}")


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into non-overlapping ``p x p`` patches and flatten each.

    images ``(B, C, H, W)`` -> patches ``(B, N, C * p * p)`` with
    ``N = (H / p) * (W / p)``. Patch ``n`` is the one in row ``n // (W / p)`` and
    column ``n % (W / p)`` of the patch grid (row-major, as one reads); inside a
    patch the values are ordered channel, then row, then column ``(C, p, p)``.
    Equal to ``F.unfold(images, p, stride=p).transpose(1, 2)``.
    """
    batch, channels, height, width = images.shape
    _check_divisible(height, width, patch_size)
    p = patch_size
    grid_h, grid_w = height // p, width // p
    x = images.reshape(batch, channels, grid_h, p, grid_w, p)  # (B, C, H/p, p, W/p, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, H/p, W/p, C, p, p)
    return x.reshape(batch, grid_h * grid_w, channels * p * p)  # (B, N, C*p*p)


def unpatchify(patches: Tensor, patch_size: int, channels: int, height: int, width: int) -> Tensor:
    """The inverse of ``patchify``: ``(B, N, C * p * p)`` -> ``(B, C, H, W)``."""
    _check_divisible(height, width, patch_size)
    p = patch_size
    grid_h, grid_w = height // p, width // p
    batch = patches.shape[0]
    expected = (batch, grid_h * grid_w, channels * p * p)
    if tuple(patches.shape) != expected:
        raise ValueError(
            f"patches have shape {tuple(patches.shape)}; for {channels} x {height} x {width} images and p={p} expected {expected}"
        )
    x = patches.reshape(batch, grid_h, grid_w, channels, p, p)  # (B, H/p, W/p, C, p, p)
    x = x.permute(0, 3, 1, 4, 2, 5)  # (B, C, H/p, p, W/p, p)
    return x.reshape(batch, channels, height, width)  # (B, C, H, W)


def patch_embedding(images: Tensor, weight: Tensor, bias: Tensor, patch_size: int) -> Tensor:
    """The patch embedding as a function (the notebook's exercise): ``patchify``, then ``x @ weight.T + bias``.

    images ``(B, C, H, W)``, weight ``(d_model, C * p * p)`` and bias ``(d_model,)``
    as in ``nn.Linear(C * p * p, d_model)`` -> embeddings ``(B, N, d_model)``.
    """
    return patchify(images, patch_size) @ weight.T + bias  # (B, N, d_model)


class ImagePatchEmbedding(nn.Module):
    """Patchify and project each patch linearly: ``(B, C, H, W)`` -> ``(B, N, d_model)``.

    ``proj`` is ``nn.Linear(C * p * p, d_model)``. The same map is a convolution
    with kernel size and stride ``p``: see ``as_conv2d``.
    """

    def __init__(self, in_channels: int, patch_size: int, d_model: int) -> None:
        super().__init__()
        self.in_channels = in_channels
        self.patch_size = patch_size
        self.d_model = d_model
        self.proj = nn.Linear(in_channels * patch_size * patch_size, d_model)

    def forward(self, images: Tensor) -> Tensor:
        return self.proj(patchify(images, self.patch_size))  # (B, N, d_model)

    def as_conv2d(self) -> nn.Conv2d:
        """The equal ``nn.Conv2d(C, d_model, kernel_size=p, stride=p)``, weights copied.

        Its output ``(B, d_model, H/p, W/p)``, flattened to ``(B, d_model, N)`` and
        transposed, equals ``forward``.
        """
        p = self.patch_size
        conv = nn.Conv2d(self.in_channels, self.d_model, kernel_size=p, stride=p)
        conv = conv.to(device=self.proj.weight.device, dtype=self.proj.weight.dtype)
        with torch.no_grad():
            conv.weight.copy_(self.proj.weight.reshape(self.d_model, self.in_channels, p, p))
            conv.bias.copy_(self.proj.bias)
        return conv


class VisionTransformer(nn.Module):
    """A Vision Transformer (Dosovitskiy et al., 2021) for small images.

    ``forward(images)``: ``(B, C, H, W)`` -> logits ``(B, num_classes)``:

    1. ``patch_embed``: ``(B, N, d_model)``, ``N = (H / p) * (W / p)`` patches;
    2. prepend the learnable class token ``cls_token`` ``(1, 1, d_model)``: ``(B, N + 1, d_model)``;
    3. add the learned position embeddings ``pos_embed`` ``(1, N + 1, d_model)``
       (position 0 is the class token's), then ``dropout``;
    4. ``blocks``: ``depth`` pre-LN ``EncoderBlock``s with GELU;
    5. ``norm`` (the final layer norm that pre-LN needs), take the class token ``[:, 0]``;
    6. ``head``: an MLP ``Linear(d_model, d_model) -> GELU -> Linear(d_model, num_classes)``
       (``mlp_head=False``: one ``Linear``).

    Set ``block.keep_weights = True`` on the blocks to keep their attention weights.
    """

    def __init__(
        self,
        image_size: int = 8,
        patch_size: int = 2,
        in_channels: int = 1,
        num_classes: int = 10,
        d_model: int = 64,
        depth: int = 2,
        num_heads: int = 4,
        d_ff: int | None = None,
        dropout: float = 0.0,
        mlp_head: bool = True,
    ) -> None:
        super().__init__()
        _check_divisible(image_size, image_size, patch_size)
        self.image_size = image_size
        self.patch_size = patch_size
        self.grid_size = image_size // patch_size
        self.num_patches = self.grid_size**2
        self.patch_embed = ImagePatchEmbedding(in_channels, patch_size, d_model)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.num_patches + 1, d_model))
        self.dropout = nn.Dropout(dropout)
        d_ff = d_ff if d_ff is not None else 2 * d_model
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first=True, activation="gelu") for _ in range(depth)
        )
        self.norm = nn.LayerNorm(d_model)
        if mlp_head:
            self.head: nn.Module = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.Linear(d_model, num_classes))
        else:
            self.head = nn.Linear(d_model, num_classes)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)

    def tokens(self, images: Tensor) -> Tensor:
        """Steps 1 to 3: images ``(B, C, H, W)`` -> tokens ``(B, N + 1, d_model)`` entering the blocks."""
        patches = self.patch_embed(images)  # (B, N, d_model)
        cls = self.cls_token.expand(patches.shape[0], -1, -1)  # (B, 1, d_model)
        x = torch.cat([cls, patches], dim=1)  # (B, N + 1, d_model)
        return self.dropout(x + self.pos_embed)  # (B, N + 1, d_model)

    def forward(self, images: Tensor) -> Tensor:
        x = self.tokens(images)  # (B, N + 1, d_model)
        for block in self.blocks:
            x = block(x)  # (B, N + 1, d_model)
        x = self.norm(x)  # (B, N + 1, d_model)
        return self.head(x[:, 0])  # (B, num_classes)

    def keep_attention(self, keep: bool = True) -> None:
        """Make every block keep (or stop keeping) its attention weights ``(B, heads, N + 1, N + 1)``."""
        for block in self.blocks:
            block.keep_weights = keep
            if not keep:
                block.attn_weights = None


#: The name the ViT paper's readers expect; ``helpers.models.PatchEmbedding`` is notebook 07's 1-D version.
PatchEmbedding = ImagePatchEmbedding


def vit_forward(model: VisionTransformer, images: Tensor) -> Tensor:
    """The ViT forward pass written out from the model's submodules (the notebook's exercise).

    images ``(B, C, H, W)`` -> logits ``(B, num_classes)``; equals ``model(images)``.
    """
    patches = model.patch_embed(images)  # (B, N, d_model)
    cls = model.cls_token.expand(images.shape[0], -1, -1)  # (B, 1, d_model)
    x = torch.cat([cls, patches], dim=1) + model.pos_embed  # (B, N + 1, d_model)
    x = model.dropout(x)
    for block in model.blocks:
        x = block(x)  # (B, N + 1, d_model)
    x = model.norm(x)  # (B, N + 1, d_model)
    return model.head(x[:, 0])  # (B, num_classes)


class SmallCNN(nn.Module):
    """The convolutional baseline: two 3 x 3 convolutions, max-pooling, a linear classifier.

    ``(B, 1, 8, 8)`` -> conv 3x3 (``channels``) -> ReLU -> conv 3x3 (``2 * channels``)
    -> ReLU -> max-pool 2 -> ``(B, 2 * channels, 4, 4)`` -> flatten -> linear -> ``(B, num_classes)``.
    """

    def __init__(self, in_channels: int = 1, num_classes: int = 10, channels: int = 16, image_size: int = 8) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, 2 * channels, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(2 * channels * (image_size // 2) ** 2, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        return self.classifier(self.features(images).flatten(1))  # (B, num_classes)


@torch.no_grad()
def attention_rollout(model: VisionTransformer, images: Tensor, residual: float = 0.5) -> Tensor:
    """Attention rollout (Abnar and Zuidema, 2020) from the class token to the patches.

    For each block, average the attention weights over heads, mix in the
    residual connection (``residual * I + (1 - residual) * A``), renormalise the
    rows, and multiply the layers' matrices in order. Returns the class token's
    row over the patches, renormalised to sum to 1, as a grid
    ``(B, H / p, W / p)``. The model is put in eval mode; its blocks' ``keep_weights``
    are restored afterwards.
    """
    model.eval()
    kept = [block.keep_weights for block in model.blocks]
    model.keep_attention(True)
    try:
        model(images)
        rollout = None
        for block in model.blocks:
            weights = block.attn_weights.mean(dim=1)  # (B, N + 1, N + 1)
            eye = torch.eye(weights.shape[-1], dtype=weights.dtype, device=weights.device)
            mixed = residual * eye + (1 - residual) * weights  # (B, N + 1, N + 1)
            mixed = mixed / mixed.sum(dim=-1, keepdim=True)
            rollout = mixed if rollout is None else mixed @ rollout  # later layers on the left
    finally:
        for block, keep in zip(model.blocks, kept, strict=True):
            block.keep_weights = keep
    cls_to_patches = rollout[:, 0, 1:]  # (B, N)
    cls_to_patches = cls_to_patches / cls_to_patches.sum(dim=-1, keepdim=True)
    return cls_to_patches.reshape(-1, model.grid_size, model.grid_size)  # (B, H/p, W/p)


@torch.no_grad()
def position_similarity(model: VisionTransformer) -> Tensor:
    """Cosine similarity between the patches' learned position embeddings (the reference of notebook 08's exercise 8.4).

    Returns ``(N, grid, grid)``: entry ``[n, i, j]`` is the similarity of patch
    ``n``'s embedding with the patch in row ``i``, column ``j`` of the grid. The
    class token's position (index 0) is left out.
    """
    pos = model.pos_embed[0, 1:]  # (N, d_model)
    pos = F.normalize(pos, dim=-1)
    sim = pos @ pos.T  # (N, N)
    return sim.reshape(model.num_patches, model.grid_size, model.grid_size)


def augmented_step(max_shift: int = 0, label_smoothing: float = 0.0, seed: int = 0, mixup_alpha: float = 0.0):
    """A ``step_fn`` for ``helpers.training.fit``: shift and mix each batch randomly, then a label-smoothed step.

    Each image of a batch ``(B, C, H, W)`` is moved by a whole number of pixels
    in ``[-max_shift, max_shift]`` in each direction (``helpers.data.random_shift``,
    zeros coming in). With ``mixup_alpha > 0`` the batch is then blended with a
    shuffled copy of itself (``helpers.data.mixup``) and the loss is the same blend
    of the losses against both images' labels. Shifts and blends are drawn from
    generators seeded with ``seed``, so a run is reproducible. The loss is
    cross-entropy with ``label_smoothing``; with no shift, no mixup and no smoothing
    this is ``helpers.training.train_step``. Returns ``step(model, optimizer, xb, yb) -> loss``.
    """
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)

    def step(model: nn.Module, optimizer: torch.optim.Optimizer, xb: Tensor, yb: Tensor) -> float:
        if max_shift:
            xb = random_shift(xb, max_shift, generator)  # (B, C, H, W)
        model.train()
        optimizer.zero_grad()
        if mixup_alpha > 0:
            mixed, perm, lam = mixup(xb, mixup_alpha, rng)  # (B, C, H, W), (B,), weight of the first image
            logits = model(mixed)  # (B, num_classes)
            loss = lam * F.cross_entropy(logits, yb, label_smoothing=label_smoothing) + (1.0 - lam) * F.cross_entropy(
                logits, yb[perm], label_smoothing=label_smoothing
            )
        else:
            loss = F.cross_entropy(model(xb), yb, label_smoothing=label_smoothing)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step
