"""Notebook 16: SmolLM2's file mapped onto notebook 11's 2025 model (``helpers.models.lm.DecoderLM``).

The file is notebook 11's block at real size: RMSNorm before each sub-layer, grouped-query attention with RoPE, a
SwiGLU feed-forward, no biases, a final RMSNorm and a head tied to the token embedding. Three things connect the
two:

- **names** (``NAME_MAP``, ``file_name``): ``blk.3.attn_q.weight`` is ``blocks.3.attn.w_q.weight``, ``ffn_gate`` is
  the SwiGLU's gate ``ff.w1``, ``ffn_up`` its ``ff.w3``, ``ffn_down`` its ``ff.w2``;
- **shapes**: the file lists ``[in, out]`` (ggml's order), PyTorch stores ``(out, in)``: the same bytes, the
  dimensions read in reverse (``helpers.chat.gguf.TensorInfo.shape``), no transpose of the data;
- **RoPE's pairs**: notebook 11 rotates neighbouring features ``(2i, 2i+1)`` of each head (the paper's pairs, and
  llama.cpp's); the checkpoint that SmolLM2 was trained as (Hugging Face's Llama) rotates feature i with feature
  ``i + d/2`` (``rotate_half``). llama.cpp's converter therefore permuted the rows of the query and key matrices,
  head by head (``halves_to_pairs``), so that the file's rows suit neighbouring pairs: they go into notebook 11's
  block as they are, and transformers un-permutes them when it loads the file (``pairs_to_halves``).

``smollm2_model(file)`` builds the model (float32, 134.5M parameters); ``apply_rope_halves`` is the other pairing,
for showing what the permutation does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from helpers.chat.gguf import GGUFFile, LlamaConfig
from helpers.models.lm import DecoderLM, Parts, RMSNorm, evaluate_lm
from helpers.runtime.smoke import capped

__all__ = [
    "NAME_MAP",
    "file_name",
    "halves_to_pairs",
    "pairs_to_halves",
    "apply_rope_halves",
    "build_model",
    "smollm2_model",
    "state_from_file",
    "requantize",
    "text_loss",
]

#: The file's name of each of a block's tensors -> its name in ``DecoderLM.blocks[i]`` (``NAME_MAP[...]``).
NAME_MAP = {
    "attn_norm.weight": "norm1.weight",
    "attn_q.weight": "attn.w_q.weight",
    "attn_k.weight": "attn.w_k.weight",
    "attn_v.weight": "attn.w_v.weight",
    "attn_output.weight": "attn.w_o.weight",
    "ffn_norm.weight": "norm2.weight",
    "ffn_gate.weight": "ff.w1.weight",
    "ffn_up.weight": "ff.w3.weight",
    "ffn_down.weight": "ff.w2.weight",
}
_TOP = {"token_embd.weight": "embed.weight", "output_norm.weight": "norm.weight"}
_INVERSE = {ours: theirs for theirs, ours in NAME_MAP.items()}


def file_name(name: str) -> str:
    """``DecoderLM``'s parameter name -> the file's tensor name: ``blocks.3.attn.w_q.weight`` -> ``blk.3.attn_q.weight``."""
    for theirs, ours in _TOP.items():
        if name == ours:
            return theirs
    found = re.fullmatch(r"blocks\.(\d+)\.(.+)", name)
    if not found or found.group(2) not in _INVERSE:
        raise KeyError(f"{name!r} is not a parameter of the 2025 DecoderLM")
    return f"blk.{found.group(1)}.{_INVERSE[found.group(2)]}"


def _check_rows(w: Tensor, heads: int) -> int:
    if w.dim() < 1 or w.shape[0] % heads or (w.shape[0] // heads) % 2:
        raise ValueError(f"{tuple(w.shape)}: the rows must split into {heads} heads of an even width")
    return w.shape[0] // heads


def halves_to_pairs(w: Tensor, heads: int) -> Tensor:
    """llama.cpp's permutation of a query or key matrix ``(heads * d, ...)``: in each head, rows ``[0 .. d/2)`` and
    ``[d/2 .. d)`` (the halves that ``rotate_half`` pairs) are interleaved, ``0, d/2, 1, d/2 + 1, ...``, so that the
    pairs become neighbours (notebook 11's RoPE)."""
    d = _check_rows(w, heads)
    return w.reshape(heads, 2, d // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def pairs_to_halves(w: Tensor, heads: int) -> Tensor:
    """The inverse of ``halves_to_pairs`` (what transformers applies when it loads a GGUF file)."""
    d = _check_rows(w, heads)
    return w.reshape(heads, d // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def apply_rope_halves(x: Tensor, angles: Tensor) -> Tensor:
    """RoPE with Hugging Face's pairing: feature i rotates with feature ``i + d/2`` (``rotate_half``).

    x ``(..., n, d)``, angles ``(n, d/2)`` -> ``(..., n, d)``, in x's dtype.
    """
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)  # (n, d/2)
    first, second = x.chunk(2, dim=-1)  # (..., n, d/2) each
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)  # (..., n, d)


def build_model(config: LlamaConfig, parts: Parts | None = None, device: torch.device | str | None = None) -> DecoderLM:
    """An empty (uninitialised) ``DecoderLM`` of the file's sizes, with its RoPE base and RMSNorm's eps."""
    with torch.device("meta"):
        model = DecoderLM(
            config.vocab,
            d_model=config.d_model,
            num_heads=config.heads,
            num_layers=config.layers,
            d_ff=config.d_ff,
            max_len=config.context,
            style="2025",
            kv_heads=config.kv_heads,
            parts=parts,
        )
    model = model.to_empty(device=device or "cpu")
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.eps = config.norm_eps
    for block in model.blocks:
        block.attn.base = config.rope_base
    return model


def state_from_file(
    file: GGUFFile,
    dequantize: Mapping[str, Callable[[Tensor], Tensor]] | None = None,
    transform: Callable[[str, Tensor], Tensor] | None = None,
) -> dict[str, Tensor]:
    """``DecoderLM``'s state dict from the file: every tensor dequantized (``dequantize``: ``{kind: function}``, the
    course's by default) and renamed; ``transform(file_name, tensor)``, when given, changes each on the way (a
    re-quantization, say)."""
    state = {}
    for name in file.tensors:
        top = _TOP.get(name)
        if top is None:
            found = re.fullmatch(r"blk\.(\d+)\.(.+)", name)
            if not found or found.group(2) not in NAME_MAP:
                raise KeyError(f"the file's tensor {name!r} has no place in the 2025 DecoderLM")
            top = f"blocks.{found.group(1)}.{NAME_MAP[found.group(2)]}"
        value = file.tensor(name, dict(dequantize) if dequantize else None)
        state[top] = transform(name, value) if transform is not None else value
    return state


def smollm2_model(
    file: GGUFFile,
    dequantize: Mapping[str, Callable[[Tensor], Tensor]] | None = None,
    parts: Parts | None = None,
    device: torch.device | str | None = None,
    transform: Callable[[str, Tensor], Tensor] | None = None,
) -> DecoderLM:
    """SmolLM2 from its file as notebook 11's 2025 ``DecoderLM``, float32, in eval mode, on ``device``."""
    model = build_model(file.config, parts, device)
    state = state_from_file(file, dequantize, transform)
    model.load_state_dict({k: v.to(device or "cpu") for k, v in state.items()}, strict=True)
    return model.eval()


@torch.no_grad()
def requantize(
    model: DecoderLM,
    file: GGUFFile,
    fake_quant: Callable[[Tensor], Tensor] | None,
    include_embedding: bool = False,
) -> int:
    """Set every matrix of the blocks (the file's 210 Q4_1 tensors) to ``fake_quant(weights)``: the file's weights
    rounded by another quantizer and read back (``None``: the file's own weights again). The embedding (and tied head)
    keeps the file's Q8_0 values unless ``include_embedding``; the norms stay float32. Returns how many weights
    changed format."""
    count = 0
    for name, param in model.named_parameters():
        if param.dim() != 2 or (name == "embed.weight" and not include_embedding):
            continue
        original = file.tensor(file_name(name))  # (out, in), the file's values
        value = original if fake_quant is None else fake_quant(original).reshape(original.shape)
        param.copy_(value.to(param.device))
        count += param.numel()
    return count


def text_loss(model: DecoderLM, ids: Tensor, window: int) -> float:
    """Mean next-token loss (nats per token) over consecutive windows of ``window + 1`` tokens of ``ids``
    (``helpers.models.lm.evaluate_lm``; each window starts without context). A smoke run reads one window of 16."""
    window = capped(window, 16)
    ids = ids[: capped(len(ids), window + 1)]
    return evaluate_lm(model, ids.to(model.embed.weight.device), context=window, batch_size=1)
