"""Notebook 16: a GGUF file read with the ``gguf`` package: its settings, its tensors' bytes, its tokenizer.

A GGUF file (llama.cpp's format) holds, in one file: key-value metadata (the architecture's sizes, the tokenizer's
tokens and merges, the chat template) and the tensors, each with its name, its type (``F32``, ``Q8_0``, ``Q4_1``...)
and its shape. ``gguf.GGUFReader`` maps the file into memory and gives each tensor's bytes; nothing is dequantized
here (``helpers.chat.quant`` does that).

Shapes: GGUF lists a tensor's dimensions fastest-varying first (ggml's ``ne``), so a matrix that PyTorch's
``nn.Linear`` stores as ``(out, in)`` is listed ``[in, out]``; ``TensorInfo.shape`` is the PyTorch order
(``ne`` reversed), ``TensorInfo.gguf_shape`` the file's.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from helpers.chat.quant import BLOCK, BLOCK_BYTES, DEQUANTIZERS, blocks_of
from helpers.data.common import DataError
from helpers.data.tokenizer_files import smollm2_gguf_path
from helpers.runtime.packages import PackageMissing, package_dir
from helpers.tokenizers.bpe import SMOLLM_PATTERNS, BPETokenizer

__all__ = ["GGUF_REQUIREMENT", "LlamaConfig", "TensorInfo", "GGUFFile", "open_smollm2", "gguf_module"]

GGUF_REQUIREMENT = "gguf==0.19.0"


def gguf_module():
    """The ``gguf`` package (installed without its dependencies on Colab if missing), or a clear error."""
    try:
        return importlib.import_module("gguf")
    except ImportError:
        try:
            package_dir("gguf", GGUF_REQUIREMENT, "the reader of GGUF files")
        except PackageMissing as err:
            raise DataError(str(err)) from None
        return importlib.import_module("gguf")


@dataclass(frozen=True)
class LlamaConfig:
    """A llama-architecture model's sizes, as the file's metadata gives them."""

    layers: int
    d_model: int
    heads: int
    kv_heads: int
    d_ff: int
    vocab: int
    context: int
    rope_base: float
    norm_eps: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of the file: its name, type, PyTorch shape, the file's shape, its bytes (``(rows, bytes per row)``)."""

    name: str
    kind: str
    shape: tuple[int, ...]
    gguf_shape: tuple[int, ...]
    raw: np.ndarray

    @property
    def count(self) -> int:
        """How many numbers the tensor holds."""
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        """Its size in the file."""
        return int(self.raw.nbytes)

    def bytes_tensor(self) -> Tensor:
        """The raw bytes as a uint8 tensor, shaped ``(n_blocks, bytes per block)`` for a quantized type."""
        raw = torch.from_numpy(self.raw.reshape(-1).view(np.uint8))  # the file's bytes (a copy-on-write map)
        return blocks_of(raw, self.kind) if self.kind in BLOCK_BYTES else raw


class GGUFFile:
    """A GGUF file's metadata, tensors and tokenizer. ``GGUFFile(path)``; ``open_smollm2()`` opens the course's model.

    - ``metadata``: ``{key: value}`` for every key but the tokenizer's long lists;
    - ``config``: a ``LlamaConfig``; ``chat_template``: the Jinja template the file ships;
    - ``tensors``: ``{name: TensorInfo}`` in the file's order; ``tensor(name, dequantize=None)``: a float32 tensor in
      PyTorch's shape, dequantized by ``dequantize[kind]`` (``helpers.chat.quant.DEQUANTIZERS`` by default);
    - ``tokens``, ``token_types``, ``merges``; ``tokenizer()``: notebook 15's ``BPETokenizer`` built from them.
    """

    def __init__(self, path: str | Path) -> None:
        gguf = gguf_module()
        self.path = Path(path)
        try:
            self.reader = gguf.GGUFReader(self.path, mode="c")  # copy-on-write: writable arrays, the file untouched
        except (OSError, ValueError) as err:
            raise DataError(f"{self.path} could not be read as a GGUF file ({type(err).__name__}: {err})") from None
        self.tensors: dict[str, TensorInfo] = {}
        for t in self.reader.tensors:
            gguf_shape = tuple(int(n) for n in t.shape)
            self.tensors[t.name] = TensorInfo(t.name, t.tensor_type.name, gguf_shape[::-1], gguf_shape, t.data)

    def _field(self, key: str):
        field = self.reader.fields.get(key)
        if field is None:
            raise KeyError(f"the file has no metadata key {key!r}")
        return field.contents()

    @cached_property
    def metadata(self) -> dict[str, object]:
        skip = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
        return {key: self._field(key) for key in self.reader.fields if key not in skip}

    @cached_property
    def config(self) -> LlamaConfig:
        arch = self._field("general.architecture")
        if arch != "llama":
            raise DataError(f"{self.path.name} holds a {arch!r} model; this reader maps the llama architecture only")

        def get(key: str):
            return self._field(f"llama.{key}")

        return LlamaConfig(
            layers=int(get("block_count")),
            d_model=int(get("embedding_length")),
            heads=int(get("attention.head_count")),
            kv_heads=int(get("attention.head_count_kv")),
            d_ff=int(get("feed_forward_length")),
            vocab=int(get("vocab_size")),
            context=int(get("context_length")),
            rope_base=float(get("rope.freq_base")),
            norm_eps=float(np.float32(get("attention.layer_norm_rms_epsilon"))),
        )

    @property
    def chat_template(self) -> str:
        return str(self._field("tokenizer.chat_template"))

    @cached_property
    def tokens(self) -> list[str]:
        return list(self._field("tokenizer.ggml.tokens"))

    @cached_property
    def token_types(self) -> list[int]:
        return [int(t) for t in self._field("tokenizer.ggml.token_type")]

    @cached_property
    def merges(self) -> list[str]:
        return list(self._field("tokenizer.ggml.merges"))

    def special_tokens(self) -> dict[str, int]:
        """The control tokens (type 3): ``{"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, ...}``."""
        return {token: i for i, (token, kind) in enumerate(zip(self.tokens, self.token_types, strict=True)) if kind == 3}

    def tokenizer(self) -> BPETokenizer:
        """Notebook 15's byte-level BPE with this file's tokens, merges and control tokens, and SmolLM2's
        pre-tokenization (``tokenizer.ggml.pre = "smollm"``: ``SMOLLM_PATTERNS``)."""
        pre = self._field("tokenizer.ggml.pre")
        if self._field("tokenizer.ggml.model") != "gpt2" or pre != "smollm":
            raise DataError(f"this reader knows SmolLM2's byte-level BPE (gpt2, smollm), not {pre!r}")
        return BPETokenizer.from_gpt2_strings(self.tokens, self.merges, SMOLLM_PATTERNS, self.special_tokens())

    def tensor(self, name: str, dequantize: dict | None = None) -> Tensor:
        """The tensor ``name`` as float32, in PyTorch's shape; quantized types through ``dequantize[kind](blocks)``."""
        if name not in self.tensors:
            raise KeyError(f"the file has no tensor {name!r}; it has {list(self.tensors)[:4]} ... ({len(self.tensors)})")
        info = self.tensors[name]
        if info.kind == "F32":
            return info.bytes_tensor().view(torch.float32).reshape(info.shape)
        table = DEQUANTIZERS if dequantize is None else {**DEQUANTIZERS, **dequantize}
        if info.kind not in table:
            raise DataError(f"{name} is {info.kind}, which this reader cannot dequantize (it knows {sorted(table)})")
        values = table[info.kind](info.bytes_tensor())  # (n_blocks, 32), or the same weights flat
        if values.numel() != info.count or values.dim() not in (1, 2) or (values.dim() == 2 and values.shape[1] != BLOCK):
            raise ValueError(
                f"dequantizing {name} ({info.kind}, {info.count // BLOCK:,} blocks) gave shape {tuple(values.shape)}, "
                f"not ({info.count // BLOCK:,}, {BLOCK})"
            )
        return values.reshape(info.shape)


_OPENED: dict[str, GGUFFile] = {}


def open_smollm2() -> GGUFFile:
    """SmolLM2-135M-Instruct's file (checked by size and SHA-256), opened once per process."""
    path = smollm2_gguf_path()
    key = str(path)
    if key not in _OPENED:
        _OPENED[key] = GGUFFile(path)
    return _OPENED[key]
