"""Notebook 16: GGUF's block quantizations, read and written with torch (the exercises' references).

A quantized matrix is stored row by row in **blocks of 32 weights**; each block keeps a float16 scale (and, in the
``_1`` types, a float16 minimum) and one small integer code per weight:

====== ===== ============================================================== =========================
type   bytes layout of one block                                           weight i of the block
====== ===== ============================================================== =========================
Q8_0   34    scale d (float16), 32 signed bytes q                            ``d * q[i]``
Q4_0   18    scale d (float16), 16 bytes of two 4-bit codes each             ``d * (q[i] - 8)``
Q4_1   20    scale d (float16), minimum m (float16), 16 bytes of 4-bit codes ``d * q[i] + m``
====== ===== ============================================================== =========================

In the 4-bit types, byte j of the 16 holds code j in its **low** nibble and code j + 16 in its **high** nibble
(ggml's order: the first half of the block in the low nibbles, the second half in the high ones).

Blocks are ``uint8`` tensors ``(n_blocks, bytes)``; weights come out as float32 ``(n_blocks, 32)``. Every dequantizer
here equals ``gguf.quants.dequantize`` bit for bit, and ``quantize_q8_0`` and ``quantize_q4_0`` equal
``gguf.quants.quantize`` byte for byte (``tests/test_chat.py``). ``quantize_symmetric`` and
``dequantize_symmetric`` generalise Q4_0 to k bits (k = 2 .. 8: ``Q4_0`` at k = 4) for the size-against-quality
curve; they are the course's, not a format of the file.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

__all__ = [
    "BLOCK",
    "BLOCK_BYTES",
    "BITS_PER_WEIGHT",
    "blocks_of",
    "float16_field",
    "dequantize_q8_0",
    "dequantize_q4_0",
    "dequantize_q4_1",
    "quantize_q8_0",
    "quantize_q4_0",
    "quantize_q4_0_codes",
    "pack_nibbles",
    "unpack_nibbles",
    "quantize_symmetric",
    "dequantize_symmetric",
    "round_half_away",
    "DEQUANTIZERS",
]

#: Weights per block, in every type of this module.
BLOCK = 32
#: Bytes per block of each type.
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}
#: Bits per weight, scales and minimums included (``8 * bytes / 32``); float32 and float16 for comparison.
BITS_PER_WEIGHT = {"F32": 32.0, "F16": 16.0, "Q8_0": 8.5, "Q4_1": 5.0, "Q4_0": 4.5}


def _blocks(blocks: Tensor, kind: str) -> Tensor:
    """``blocks`` as ``(n, bytes)`` uint8, or a clear error."""
    size = BLOCK_BYTES[kind]
    if not isinstance(blocks, Tensor) or blocks.dtype != torch.uint8:
        raise TypeError(
            f"{kind} blocks are a uint8 tensor (n_blocks, {size}), got {type(blocks).__name__} {getattr(blocks, 'dtype', '')}"
        )
    if blocks.dim() != 2 or blocks.shape[1] != size:
        raise ValueError(f"{kind} blocks are (n_blocks, {size}) bytes, got shape {tuple(blocks.shape)}")
    return blocks


def blocks_of(raw: Tensor, kind: str) -> Tensor:
    """A quantized tensor's bytes ``(rows, bytes per row)`` (or flat) -> its blocks ``(n_blocks, bytes per block)``."""
    size = BLOCK_BYTES[kind]
    if raw.numel() % size:
        raise ValueError(f"{raw.numel()} bytes are not a whole number of {kind} blocks of {size} bytes")
    return raw.reshape(-1, size)


def float16_field(blocks: Tensor, offset: int) -> Tensor:
    """The float16 number at bytes ``offset, offset + 1`` of each block (little-endian), as float32 ``(n, 1)``."""
    return blocks[:, offset : offset + 2].contiguous().view(torch.float16).float()  # (n, 1)


def unpack_nibbles(packed: Tensor) -> Tensor:
    """16 bytes of codes ``(n, 16)`` -> the 32 codes ``(n, 32)`` (uint8, 0..15): low nibbles first, then high ones."""
    return torch.cat([packed & 0x0F, packed >> 4], dim=1)  # (n, 32)


def pack_nibbles(codes: Tensor) -> Tensor:
    """32 codes ``(n, 32)`` (0..15) -> 16 bytes ``(n, 16)``: code j in the low nibble of byte j, code j + 16 in its high one."""
    codes = codes.to(torch.uint8)
    return codes[:, :16] | (codes[:, 16:] << 4)  # (n, 16)


def dequantize_q8_0(blocks: Tensor) -> Tensor:
    """Q8_0 blocks ``(n, 34)`` uint8 -> weights ``(n, 32)`` float32: ``d * q``."""
    blocks = _blocks(blocks, "Q8_0")
    d = float16_field(blocks, 0)  # (n, 1)
    q = blocks[:, 2:].contiguous().view(torch.int8).float()  # (n, 32)
    return d * q


def dequantize_q4_0(blocks: Tensor) -> Tensor:
    """Q4_0 blocks ``(n, 18)`` uint8 -> weights ``(n, 32)`` float32: ``d * (q - 8)``."""
    blocks = _blocks(blocks, "Q4_0")
    d = float16_field(blocks, 0)  # (n, 1)
    q = unpack_nibbles(blocks[:, 2:]).float() - 8  # (n, 32)
    return d * q


def dequantize_q4_1(blocks: Tensor) -> Tensor:
    """Q4_1 blocks ``(n, 20)`` uint8 -> weights ``(n, 32)`` float32: ``d * q + m``."""
    blocks = _blocks(blocks, "Q4_1")
    d, m = float16_field(blocks, 0), float16_field(blocks, 2)  # (n, 1) each
    q = unpack_nibbles(blocks[:, 4:]).float()  # (n, 32)
    return d * q + m


#: The dequantizer of each type a GGUF file of this course holds (F32 is read as it is).
DEQUANTIZERS: dict[str, Callable[[Tensor], Tensor]] = {
    "Q8_0": dequantize_q8_0,
    "Q4_0": dequantize_q4_0,
    "Q4_1": dequantize_q4_1,
}


def _weights(x: Tensor) -> Tensor:
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"quantize takes a float tensor, got {type(x).__name__} {getattr(x, 'dtype', '')}")
    if x.numel() % BLOCK:
        raise ValueError(f"{x.numel()} weights are not a whole number of blocks of {BLOCK}")
    return x.float().reshape(-1, BLOCK)  # (n, 32)


def round_half_away(x: Tensor) -> Tensor:
    """Round to the nearest integer, halves away from zero (C's ``roundf``, ggml's; ``torch.round`` rounds them to even)."""
    return torch.sign(x) * torch.floor(x.abs() + 0.5)


def _inverse(d: Tensor) -> Tensor:
    return torch.where(d == 0, torch.zeros_like(d), 1 / torch.where(d == 0, torch.ones_like(d), d))


def quantize_q8_0(x: Tensor) -> Tensor:
    """Weights (any shape, a multiple of 32 values) -> Q8_0 blocks ``(n, 34)`` uint8, as ggml (and ``gguf``) write them.

    Per block: ``d = max |x| / 127``, ``q = roundf(x / d)`` (computed as ``x * (1 / d)`` in float32), ``d`` stored as
    float16.
    """
    x = _weights(x)
    d = x.abs().amax(dim=1, keepdim=True) / 127  # (n, 1)
    q = round_half_away(x * _inverse(d)).to(torch.int8)  # (n, 32)
    return torch.cat([d.half().view(torch.uint8), q.view(torch.uint8)], dim=1)  # (n, 34)


def quantize_q4_0_codes(x: Tensor) -> tuple[Tensor, Tensor]:
    """Q4_0's scale and codes for weights ``(n, 32)``: ``d`` float32 ``(n, 1)`` and ``q`` uint8 ``(n, 32)`` in 0..15.

    ``d = m / -8``, where m is the weight of largest magnitude **with its sign**, so that m itself gets code 0 and the
    16 codes -8 .. 7 (stored as 0 .. 15) span ``[-|m|, +7/8 |m|]`` on m's side; ``q = trunc(x / d + 8.5)``, clamped
    to 0..15 (ggml's ``quantize_row_q4_0_ref``). The file stores ``d`` in float16.
    """
    x = _weights(x)
    index = x.abs().argmax(dim=1, keepdim=True)  # (n, 1): the first weight of largest magnitude
    d = x.gather(1, index) / -8  # (n, 1)
    q = torch.trunc(x * _inverse(d) + 8.5).clamp(0, 15).to(torch.uint8)  # (n, 32)
    return d, q


def quantize_q4_0(x: Tensor) -> Tensor:
    """Weights -> Q4_0 blocks ``(n, 18)`` uint8, as ggml writes them: the float16 scale, then the packed codes."""
    d, q = quantize_q4_0_codes(x)
    return torch.cat([d.half().view(torch.uint8), pack_nibbles(q)], dim=1)  # (n, 18)


def quantize_symmetric(x: Tensor, bits: int) -> tuple[Tensor, Tensor]:
    """Q4_0's rule at ``bits`` bits (2..8): ``d = m / -2**(bits-1)``, codes ``trunc(x / d + 2**(bits-1) + 0.5)`` in
    ``0 .. 2**bits - 1``. Returns the scale as float16 values ``(n, 1)`` (float32 tensor) and the codes ``(n, 32)`` int64."""
    if not 2 <= bits <= 8:
        raise ValueError(f"bits must be between 2 and 8, got {bits}")
    x = _weights(x)
    half = 2 ** (bits - 1)
    index = x.abs().argmax(dim=1, keepdim=True)  # (n, 1)
    d = x.gather(1, index) / -half  # (n, 1)
    q = torch.trunc(x * _inverse(d) + half + 0.5).clamp(0, 2 * half - 1).long()  # (n, 32)
    return d.half().float(), q


def dequantize_symmetric(d: Tensor, q: Tensor, bits: int) -> Tensor:
    """The weights ``(n, 32)`` float32 of ``quantize_symmetric``: ``d * (q - 2**(bits-1))``."""
    return d * (q - 2 ** (bits - 1)).float()
