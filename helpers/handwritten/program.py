"""A transformer whose weights are written by hand (notebook 14): the residual-stream layout, the blocks, and the
reference weights of three programs (reverse, histogram, sort).

Every program reads a sequence of ``LENGTH`` = 5 tokens from a vocabulary of ``VOCAB`` = 10, with a beginning-of-sequence
marker (BOS) in front: position 0 is BOS, positions 1..5 hold the tokens, and the answer is read at positions 1..5.

**The residual stream as memory.** Each position carries one vector of ``d_model`` = 31 features, split into named
slots (``Layout``):

=========  =====  =====================================================================
slot       width  holds
=========  =====  =====================================================================
``tok``    10     the token, one-hot (all zero at BOS)
``bos``    1      1 at BOS, 0 elsewhere
``one``    1      1 everywhere (a constant, so that a linear map can add a constant)
``pos``    1      the position i (0 at BOS)
``pos2``   1      i squared
``frac``   1      written by an attention layer: the weight it gave to BOS, 1 / (1 + count)
``count``  6      written by a feed-forward layer: the count 0..5, one-hot
``out``    10     written by an attention layer: the output token, one-hot
=========  =====  =====================================================================

**The blocks** are the course's ``helpers.blocks.EncoderBlock`` (pre-LN: ``x + attn(norm1(x))``, then
``x + ff(norm2(x))``) with one head, and with its two layer norms replaced by ``nn.Identity()`` (``hand_block``): a
layer norm divides each vector by its own spread, which here depends on the position number, so exact constructions
leave it out (Tracr, Lindner et al. 2023, the compiler from RASP to weights, builds its models without it). In a pre-LN block that is all it takes: the norms only
touch the input of each sub-layer, never the residual stream itself.

**The programs** (``build_reverse``, ``build_histogram``, ``build_sort``) take the functions that write each part of the
weights (the selector's ``w_q`` and ``w_k``, the value path's ``w_v`` and ``w_o``, the feed-forward lookup table, the
output map), so that a learner's own functions can replace the references below one by one. ``scale`` is the score
gap, after ``MultiHeadAttention``'s division by ``sqrt(d_k)``, between the key a query should pick and the runner-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from helpers.attention import MultiHeadAttention
from helpers.blocks import EncoderBlock, FeedForward

__all__ = [
    "VOCAB",
    "LENGTH",
    "D_FF",
    "SCALE",
    "SHARPNESS",
    "SLOT_WIDTHS",
    "Layout",
    "LAYOUT",
    "embed",
    "describe_rows",
    "hand_block",
    "zero_parameters",
    "HandTransformer",
    "table_values",
    "table_thresholds",
    "write_reverse_selector",
    "write_copy_value",
    "write_output_map",
    "write_same_token_selector",
    "write_smaller_selector",
    "write_bos_value",
    "write_steps",
    "write_one_hot",
    "count_table",
    "write_count_table",
    "write_target_selector",
    "build_reverse",
    "build_histogram",
    "build_sort",
    "reverse_of",
    "histogram_of",
    "sort_of",
]

#: Tokens 0..9.
VOCAB = 10
#: Tokens per sequence (BOS comes in front, at position 0).
LENGTH = 5
#: Hidden units of every feed-forward layer: two per threshold of the count table (5 thresholds).
D_FF = 2 * LENGTH
#: The score gap the programs use: the best key leads the runner-up by 20, so at most about 2 e^-20 of a selector's
#: weight leaks to other keys (below float32's resolution next to 1).
SCALE = 20.0
#: Slope of the count table's ramps: each step rises from 0 to 1 over 1 / SHARPNESS = 0.01 around its threshold.
SHARPNESS = 100.0
#: The slots of the residual stream and their widths, in the standard order.
SLOT_WIDTHS: dict[str, int] = {
    "tok": VOCAB,
    "bos": 1,
    "one": 1,
    "pos": 1,
    "pos2": 1,
    "frac": 1,
    "count": LENGTH + 1,
    "out": VOCAB,
}

Writer = Callable[..., object]


@dataclass(frozen=True)
class Layout:
    """Where each variable lives in the residual stream.

    Slots of width 1 are integer indices (``layout.pos``), wider ones slices (``layout.tok``), so
    ``weight[row, layout.tok]`` is a block of 10 columns and ``weight[row, layout.pos]`` one entry.
    ``Layout.make(order)`` places the same slots in another order (the checks use one to catch hard-coded indices).
    """

    tok: slice
    bos: int
    one: int
    pos: int
    pos2: int
    frac: int
    count: slice
    out: slice
    d_model: int
    order: tuple[str, ...] = field(default=tuple(SLOT_WIDTHS))

    @classmethod
    def make(cls, order: Sequence[str] | None = None) -> Layout:
        """The layout with the slots in ``order`` (default: ``SLOT_WIDTHS``'s order: tok, bos, one, pos, ..., out)."""
        order = tuple(order) if order is not None else tuple(SLOT_WIDTHS)
        if sorted(order) != sorted(SLOT_WIDTHS):
            raise ValueError(f"order must name each slot once: {sorted(SLOT_WIDTHS)}, got {list(order)}")
        places: dict[str, slice | int] = {}
        start = 0
        for name in order:
            width = SLOT_WIDTHS[name]
            places[name] = slice(start, start + width) if width > 1 else start
            start += width
        return cls(d_model=start, order=order, **places)  # type: ignore[arg-type]

    def slot(self, name: str) -> slice:
        """The slot ``name`` as a slice, whatever its width."""
        place = getattr(self, name)
        return place if isinstance(place, slice) else slice(place, place + 1)

    def labels(self) -> list[str]:
        """A label per feature, in residual order: ``tok 0`` .. ``tok 9``, ``bos``, ``one``, ``pos``, ``pos²``, ...."""
        names = {"pos2": "pos²"}
        labels = [""] * self.d_model
        for name in self.order:
            place = self.slot(name)
            for k, index in enumerate(range(place.start, place.stop)):
                labels[index] = f"{name} {k}" if SLOT_WIDTHS[name] > 1 else names.get(name, name)
        return labels


#: The layout every program of notebook 14 uses (d_model = 31).
LAYOUT = Layout.make()


def embed(tokens: Tensor, layout: Layout = LAYOUT, dtype: torch.dtype | None = None) -> Tensor:
    """The residual stream before the first block: tokens ``(batch, LENGTH)`` -> ``(batch, LENGTH + 1, d_model)``.

    Position 0 is BOS (``bos`` = 1, no token); position i = 1..LENGTH holds token ``tokens[:, i - 1]`` one-hot in
    ``tok``. Every position has ``one`` = 1, ``pos`` = i and ``pos2`` = i²; the other slots start at zero.
    """
    tokens = torch.as_tensor(tokens)
    if tokens.dim() != 2 or tokens.shape[1] != LENGTH:
        raise ValueError(f"tokens must be (batch, {LENGTH}), got shape {tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= VOCAB):
        raise ValueError(f"tokens must lie in 0..{VOCAB - 1}")
    batch, n = tokens.shape[0], LENGTH + 1
    dtype = dtype or torch.get_default_dtype()
    x = torch.zeros(batch, n, layout.d_model, dtype=dtype)  # (batch, 6, d_model)
    positions = torch.arange(n, dtype=dtype)  # (6,)
    x[:, :, layout.one] = 1.0
    x[:, :, layout.pos] = positions
    x[:, :, layout.pos2] = positions**2
    x[:, 0, layout.bos] = 1.0
    x[:, 1:, layout.tok] = nn.functional.one_hot(tokens.long(), VOCAB).to(dtype)  # (batch, 5, 10)
    return x


def zero_parameters(module: nn.Module) -> nn.Module:
    """Set every parameter of ``module`` to zero, in place (a blank page for hand-written weights)."""
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.zero_()
    return module


def hand_block(layout: Layout = LAYOUT, d_ff: int = D_FF) -> EncoderBlock:
    """A course ``EncoderBlock`` for hand-written weights: pre-LN, one head, no layer norms, every weight zero.

    ``norm1`` and ``norm2`` are ``nn.Identity()``, so the block computes ``x + attn(x)`` then ``x + ff(x)`` exactly
    (pre-LN normalises only the sub-layers' inputs). ``keep_weights`` is on: ``block.attn_weights``
    ``(batch, 1, n, n)`` holds the last attention pattern.
    """
    block = EncoderBlock(layout.d_model, num_heads=1, d_ff=d_ff, dropout=0.0, norm_first=True)
    block.norm1 = nn.Identity()  # type: ignore[assignment]
    block.norm2 = nn.Identity()  # type: ignore[assignment]
    block.keep_weights = True
    zero_parameters(block)
    return block.eval()


class HandTransformer(nn.Module):
    """``embed`` (fixed), ``num_layers`` hand blocks, and an output map ``unembed`` (``nn.Linear(d_model, n_out)``,
    no bias), every weight zero until written.

    ``forward(tokens)``: tokens ``(batch, LENGTH)`` -> logits ``(batch, LENGTH, n_out)``, read at positions 1..LENGTH.
    ``residuals(tokens)`` returns the stream after the embedding and after each block.
    """

    def __init__(self, num_layers: int, n_out: int, layout: Layout = LAYOUT, d_ff: int = D_FF) -> None:
        super().__init__()
        self.layout = layout
        self.blocks = nn.ModuleList(hand_block(layout, d_ff) for _ in range(num_layers))
        self.unembed = nn.Linear(layout.d_model, n_out, bias=False)
        zero_parameters(self.unembed)
        self.eval()

    def residuals(self, tokens: Tensor) -> list[Tensor]:
        """The residual stream ``(batch, LENGTH + 1, d_model)`` after the embedding, then after each block."""
        dtype = next(self.parameters()).dtype
        streams = [embed(tokens, self.layout, dtype)]
        for block in self.blocks:
            streams.append(block(streams[-1]))
        return streams

    def forward(self, tokens: Tensor) -> Tensor:
        return self.unembed(self.residuals(tokens)[-1][:, 1:])  # (batch, LENGTH, n_out)


def describe_rows(
    weight: Tensor, layout: Layout = LAYOUT, unit: float = 1.0, unit_name: str = "", name: str = "row"
) -> list[str]:
    """What each nonzero row of a weight ``(rows, d_model)`` reads, one line per row: ``row 0 = c (12 one - 2 pos)``.

    Entries are divided by ``unit`` (named ``unit_name``, e.g. ``"c"`` for ``scale * sqrt(d_k)``) and shown with at most
    4 significant digits; features by ``layout.labels()`` (``tok 3``, ``one``, ``pos``, ``pos²``...). Consecutive rows
    that each read one feature of one slot with the same factor (an identity block) share a line:
    ``rows 0-9 = c (tok 0 .. tok 9, one each)``.
    """
    labels = layout.labels()
    w = weight.detach().double().cpu() / unit
    lines: list[str] = []
    single: list[tuple[int, int, float]] = []  # a run of rows that read one feature each

    def flush() -> None:
        if not single:
            return
        if len(single) == 1:
            row, col, value = single[0]
            lines.append(f"{name} {row} = {_factor(value, unit_name)}{labels[col]}")
        else:
            (r0, c0, value), (r1, c1, _) = single[0], single[-1]
            block = f"{labels[c0]} .. {labels[c1]}, one each"
            lines.append(f"{name}s {r0}-{r1} = {_factor(value, unit_name)}" + (f"({block})" if unit_name else block))
        single.clear()

    for row in range(w.shape[0]):
        columns = torch.nonzero(w[row]).flatten().tolist()
        if not columns:
            flush()
            continue
        if len(columns) == 1:
            col, value = columns[0], float(w[row, columns[0]])
            same_slot = bool(single) and labels[col].split()[0] == labels[single[-1][1]].split()[0]
            if same_slot and (row, col) == (single[-1][0] + 1, single[-1][1] + 1) and math.isclose(value, single[-1][2]):
                single.append((row, col, value))
                continue
            flush()
            single.append((row, col, value))
            continue
        flush()
        terms = " ".join(f"{'-' if w[row, c] < 0 else '+'} {abs(float(w[row, c])):.4g} {labels[c]}" for c in columns)
        terms = terms[2:] if terms.startswith("+ ") else "-" + terms[2:]
        lines.append(f"{name} {row} = {unit_name + ' (' if unit_name else ''}{terms}{')' if unit_name else ''}")
    flush()
    return lines


def _factor(value: float, unit_name: str) -> str:
    """``c `` for 1, ``-c ``, ``2.5 c ``, or the bare number followed by a space without a unit."""
    one = math.isclose(value, 1.0, rel_tol=1e-6)
    if unit_name:
        if one:
            return f"{unit_name} "
        if math.isclose(value, -1.0, rel_tol=1e-6):
            return f"-{unit_name} "
        return f"{value:.4g} {unit_name} "
    return "" if one else f"{value:.4g} "


# ---------------------------------------------------------------- the count table's entries


def table_values(length: int = LENGTH) -> Tensor:
    """The values the ``frac`` slot can take, ``1 / (1 + c)`` for counts c = 0..length, ``(length + 1,)`` float64."""
    return 1.0 / (1.0 + torch.arange(length + 1, dtype=torch.float64))


def table_thresholds(length: int = LENGTH) -> Tensor:
    """The count table's thresholds, halfway between neighbouring values: ``(length,)`` float64, decreasing.

    ``frac < thresholds[k]`` exactly when the count exceeds k.
    """
    values = table_values(length)
    return (values[:-1] + values[1:]) / 2


# ---------------------------------------------------------------- reference weights
# Each writer fills entries of a module whose weights start at zero (hand_block) and leaves the rest alone.
# nn.Linear stores weight as (out_features, in_features): row = output feature, column = input feature.


def _gain(attn: MultiHeadAttention, scale: float) -> float:
    """The factor that survives MultiHeadAttention's division of the scores by sqrt(d_k) as ``scale``."""
    return scale * math.sqrt(attn.d_k)


def write_reverse_selector(attn: MultiHeadAttention, layout: Layout = LAYOUT, scale: float = SCALE) -> None:
    """Reference: query i attends to position ``t = LENGTH + 1 - i`` (reverse), from ``pos`` and ``pos2`` only.

    Query ``c [2t, -1]`` with ``t = (LENGTH + 1) one - pos``, key ``[pos, pos²]``: the score ``c (2 t j - j²)
    = c (t² - (j - t)²)`` peaks at ``j = t`` and drops by ``c`` for each neighbour; ``c = scale * sqrt(d_k)``.
    """
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[0, layout.one] = 2 * (LENGTH + 1) * c  # 2 t c = 2 (6 - i) c
        attn.w_q.weight[0, layout.pos] = -2 * c
        attn.w_q.weight[1, layout.one] = -c
        attn.w_k.weight[0, layout.pos] = 1.0  # j
        attn.w_k.weight[1, layout.pos2] = 1.0  # j²


def write_copy_value(attn: MultiHeadAttention, layout: Layout = LAYOUT) -> None:
    """Reference: the value path copies the attended token (``tok``) into the ``out`` slot, and nothing else.

    ``w_v`` reads ``tok`` into value coordinates 0..9, ``w_o`` writes them into ``out``: ``w_o w_v`` maps
    ``tok`` to ``out`` by the identity.
    """
    eye = torch.eye(VOCAB)
    with torch.no_grad():
        attn.w_v.weight[:VOCAB, layout.tok] = eye
        attn.w_o.weight[layout.out, :VOCAB] = eye


def write_output_map(unembed: nn.Linear, slot: slice) -> None:
    """Reference: logit k is feature k of ``slot`` (``unembed.weight[:, slot] = I``)."""
    with torch.no_grad():
        unembed.weight[:, slot] = torch.eye(slot.stop - slot.start)


def write_same_token_selector(attn: MultiHeadAttention, layout: Layout = LAYOUT, scale: float = SCALE) -> None:
    """Reference: every query scores ``scale`` on the keys with its own token and on BOS, 0 on the rest.

    Query ``c (tok + e_10 one)``, key ``tok + e_10 bos``; ``c = scale * sqrt(d_k)``.
    """
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[:VOCAB, layout.tok] = c * torch.eye(VOCAB)
        attn.w_q.weight[VOCAB, layout.one] = c
        attn.w_k.weight[:VOCAB, layout.tok] = torch.eye(VOCAB)
        attn.w_k.weight[VOCAB, layout.bos] = 1.0


def write_smaller_selector(attn: MultiHeadAttention, layout: Layout = LAYOUT, scale: float = SCALE) -> None:
    """Reference: a query with token a scores ``scale`` on the keys with a token b < a and on BOS, 0 on the rest.

    Query coordinate b gets ``c`` from every token a > b (a strictly upper triangular block), the key is the
    token one-hot, plus the BOS coordinate as in ``write_same_token_selector``.
    """
    c = _gain(attn, scale)
    with torch.no_grad():
        attn.w_q.weight[:VOCAB, layout.tok] = c * torch.ones(VOCAB, VOCAB).triu(1)  # row b, column a: b < a
        attn.w_q.weight[VOCAB, layout.one] = c
        attn.w_k.weight[:VOCAB, layout.tok] = torch.eye(VOCAB)
        attn.w_k.weight[VOCAB, layout.bos] = 1.0


def write_bos_value(attn: MultiHeadAttention, layout: Layout = LAYOUT) -> None:
    """Reference: the value is the ``bos`` feature, written into ``frac``: the output is the weight given to BOS."""
    with torch.no_grad():
        attn.w_v.weight[0, layout.bos] = 1.0
        attn.w_o.weight[layout.frac, 0] = 1.0


def write_steps(ff: FeedForward, layout: Layout = LAYOUT, sharpness: float = SHARPNESS) -> None:
    """Reference: the count table's first half, ``linear1``: two hidden units per threshold that make a step.

    Threshold k (halfway between 1/(k+1) and 1/(k+2), ``table_thresholds()``) gets hidden units ``2k``, reading
    ``relu(u + 1/2)``, and ``2k + 1``, reading ``relu(u - 1/2)``, with ``u = sharpness (threshold_k - frac)``. Their
    difference ``step_k = h[2k] - h[2k+1]`` is 1 when ``frac`` is below the threshold (the count exceeds k) and 0
    above it, flat except within ``1 / (2 sharpness)`` of the threshold.
    """
    with torch.no_grad():
        for k, threshold in enumerate(table_thresholds().tolist()):
            for unit, shift in ((2 * k, 0.5), (2 * k + 1, -0.5)):
                ff.linear1.weight[unit, layout.frac] = -sharpness
                ff.linear1.bias[unit] = sharpness * threshold + shift


def write_one_hot(ff: FeedForward, layout: Layout = LAYOUT) -> None:
    """Reference: the count table's second half, ``linear2``: the steps of ``write_steps`` into ``count`` one-hot.

    One-hot c is ``step_{c-1} - step_c`` with ``step_{-1} = 1`` (``linear2``'s bias on count slot 0) and no
    ``step_5``: step k (``h[2k] - h[2k+1]``) leaves count slot k and enters count slot k + 1.
    """
    first = layout.slot("count").start
    with torch.no_grad():
        for k in range(LENGTH):
            for unit, sign in ((2 * k, 1.0), (2 * k + 1, -1.0)):
                ff.linear2.weight[first + k, unit] = -sign
                ff.linear2.weight[first + k + 1, unit] = sign
        ff.linear2.bias[first] = 1.0


def count_table(steps: Writer = write_steps, one_hot: Writer = write_one_hot) -> Writer:
    """The count table as one writer ``fn(ff, layout)``: ``steps`` writes ``linear1``, then ``one_hot`` ``linear2``."""

    def write(ff: FeedForward, layout: Layout = LAYOUT) -> None:
        steps(ff, layout)
        one_hot(ff, layout)

    return write


def write_count_table(ff: FeedForward, layout: Layout = LAYOUT, sharpness: float = SHARPNESS) -> None:
    """Reference: the feed-forward layer as a lookup table, ``frac = 1 / (1 + c)`` -> ``count`` one-hot at c.

    ``write_steps`` (``linear1``: a step per threshold from two ReLUs), then ``write_one_hot`` (``linear2``: one-hot c
    is step c-1 minus step c; count 0's 1 is ``linear2``'s bias).
    """
    write_steps(ff, layout, sharpness)
    write_one_hot(ff, layout)


def write_target_selector(attn: MultiHeadAttention, layout: Layout = LAYOUT, scale: float = SCALE) -> None:
    """Reference: query i attends to the key whose ``count`` is i - 1 (its place in sorted order), never to BOS.

    Query coordinate m (for count m, target position m + 1) is ``c (2 (m + 1) pos - (m + 1)² one)`` and the key
    is the count one-hot: the score ``c (i² - (m + 1 - i)²)`` peaks at m = i - 1. BOS (whose count is 0, like the
    smallest token's) loses ``c`` more through coordinate LENGTH + 1 (query ``-c one``, key ``bos``).
    """
    c = _gain(attn, scale)
    count = layout.slot("count")
    with torch.no_grad():
        for m in range(LENGTH + 1):
            target = m + 1
            attn.w_q.weight[m, layout.pos] = 2 * target * c
            attn.w_q.weight[m, layout.one] = -(target**2) * c
            attn.w_k.weight[m, count.start + m] = 1.0
        attn.w_q.weight[LENGTH + 1, layout.one] = -c
        attn.w_k.weight[LENGTH + 1, layout.bos] = 1.0


# ---------------------------------------------------------------- the three programs


def build_reverse(
    scale: float = SCALE,
    *,
    selector: Writer = write_reverse_selector,
    value: Writer = write_copy_value,
    output: Writer = write_output_map,
    layout: Layout = LAYOUT,
) -> HandTransformer:
    """Reverse in one layer: the selector picks position 6 - i, the value path copies its token to ``out``,
    the output map reads ``out``. The feed-forward layer stays zero."""
    model = HandTransformer(num_layers=1, n_out=VOCAB, layout=layout)
    attn = model.blocks[0].self_attn
    selector(attn, layout, scale)
    value(attn, layout)
    output(model.unembed, layout.slot("out"))
    return model


def build_histogram(
    scale: float = SCALE,
    *,
    selector: Writer = write_same_token_selector,
    table: Writer = write_count_table,
    output: Writer = write_output_map,
    layout: Layout = LAYOUT,
) -> HandTransformer:
    """Histogram in one layer: attention to BOS and to the same tokens writes ``frac = 1 / (1 + count)``,
    the feed-forward table turns it into ``count`` one-hot, the output map reads ``count`` (classes 0..5)."""
    model = HandTransformer(num_layers=1, n_out=LENGTH + 1, layout=layout)
    block = model.blocks[0]
    selector(block.self_attn, layout, scale)
    write_bos_value(block.self_attn, layout)
    table(block.ff, layout)
    output(model.unembed, layout.slot("count"))
    return model


def build_sort(
    scale: float = SCALE,
    *,
    table: Writer = write_count_table,
    selector: Writer = write_target_selector,
    value: Writer = write_copy_value,
    output: Writer = write_output_map,
    layout: Layout = LAYOUT,
) -> HandTransformer:
    """Sort (distinct tokens) in two layers.

    Layer 1 counts, for each token, the smaller tokens (``write_smaller_selector`` and ``write_bos_value``, then
    the count table): that count is its place in sorted order. Layer 2's query i attends to the token whose count
    is i - 1 (``selector``) and copies it to ``out`` (``value``); the output map reads ``out``.
    """
    model = HandTransformer(num_layers=2, n_out=VOCAB, layout=layout)
    first, second = model.blocks
    write_smaller_selector(first.self_attn, layout, scale)
    write_bos_value(first.self_attn, layout)
    table(first.ff, layout)
    selector(second.self_attn, layout, scale)
    value(second.self_attn, layout)
    output(model.unembed, layout.slot("out"))
    return model


# ---------------------------------------------------------------- what each program should output


def reverse_of(tokens: Tensor) -> Tensor:
    """``(batch, LENGTH)`` -> the sequences reversed."""
    return tokens.flip(-1)


def histogram_of(tokens: Tensor) -> Tensor:
    """``(batch, LENGTH)`` -> at each position, how often its token occurs in the sequence (1..LENGTH)."""
    return (tokens[:, :, None] == tokens[:, None, :]).sum(-1)


def sort_of(tokens: Tensor) -> Tensor:
    """``(batch, LENGTH)`` -> the sequences sorted in increasing order."""
    return tokens.sort(dim=-1).values
