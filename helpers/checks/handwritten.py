"""Checks of notebook 14 (a transformer written by hand): each part of the weights on its own.

Every exercise is a function that writes one part of the weights into a course module whose weights start at zero
(``helpers.handwritten.program.hand_block``): ``fn(attn, layout, scale)`` for a selector (``w_q``, ``w_k``), ``fn(attn,
layout)`` for the value path (``w_v``, ``w_o``), ``fn(ff, layout)`` for the count table (``linear1``, ``linear2``),
``fn(unembed, slot)`` for the output map. A check calls the function on fresh modules, then measures what that part
does on its own, so that a wrong answer is named by its part (the selector, the value path, the lookup table, the
output map) and by its mistake (the wrong target position, the scale, a transposed ``nn.Linear`` weight, the wrong
slot, misaligned hidden units...):

- a selector: the attention scores on real residual streams (float64, from the learner's float32 weights): each
  query's top keys must be its targets, with equal scores, and the runner-up must trail by ``scale`` (the notebook's
  contract, after ``MultiHeadAttention``'s division by ``sqrt(d_k)``);
- the value path: the map ``w_o w_v`` from residual features to residual features, which must carry ``tok`` to
  ``out`` by the identity and nothing else;
- the output map: ``unembed.weight``, the identity on the given slot;
- the count table: the feed-forward layer's output on ``frac = 1/(1 + c)`` and a little off it (the leak of a finite
  scale), which must be ``count`` one-hot at c and nothing else.

Each check runs the function again with another ``scale`` and in a layout whose slots come in another order
(``SHUFFLED``), so that an answer with a number where ``scale`` or ``layout.pos`` belongs is named as such.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from helpers.attention import MultiHeadAttention
from helpers.blocks import FeedForward
from helpers.checks._core import ExerciseFailed, call, exercise
from helpers.handwritten.program import (
    D_FF,
    LAYOUT,
    LENGTH,
    SCALE,
    VOCAB,
    Layout,
    build_sort,
    embed,
    hand_block,
    table_values,
)

# The references (write_reverse_selector, ...) live in helpers.handwritten.program: exported here, a star import would
# overwrite a learner's function of the same name.
__all__ = [
    "check_reverse_selector",
    "check_copy_value",
    "check_output_map",
    "check_same_token_selector",
    "check_count_table",
    "check_target_selector",
]

#: The same slots in another order: an answer that uses numbers instead of ``layout.pos`` fails here.
SHUFFLED = Layout.make(("out", "pos2", "count", "tok", "frac", "one", "bos", "pos"))
#: A second scale the selectors are asked for: an answer that ignores ``scale`` fails here.
OTHER_SCALE = 7.5
_N = LENGTH + 1  # positions: BOS, then the tokens

_LINEAR_LAYOUT = (
    "nn.Linear stores its weight as (out_features, in_features): the row is the feature it writes (a query, key or "
    "value coordinate, a hidden unit), the column the feature it reads"
)


# ---------------------------------------------------------------- calling the learner's writer


def _write(fn: Callable[..., object], module: nn.Module, *args: object, what: str, part: str) -> None:
    """Call ``fn(module, *args)``; explain the usual errors of writing into parameters, naming the ``part``."""
    try:
        call(fn, module, *args, what=what, inplace_ok=True)
    except ExerciseFailed as err:
        message = str(err)
        if "leaf Variable" in message or "requires grad" in message:
            message += (
                ". A parameter cannot be changed in place while autograd records it: write the weights inside "
                "`with torch.no_grad():`"
            )
        elif "IndexError" in message or "out of bounds" in message or "must match" in message:
            message += f". Is an index transposed? {_LINEAR_LAYOUT}"
        raise ExerciseFailed(f"{part}: {message}") from None


def _expect_shapes(module: nn.Module, shapes: dict[str, tuple[int, ...]], part: str) -> None:
    own = dict(module.named_parameters())
    for name, shape in shapes.items():
        if name not in own:
            raise ExerciseFailed(f"{part}: the module has no parameter `{name}` any more; write into its entries instead")
        got = tuple(own[name].shape)
        if got != shape:
            extra = "; that is the transpose" if got == shape[::-1] else ""
            raise ExerciseFailed(
                f"{part}: `{name}` now has shape {got}; it must stay {shape}{extra}. {_LINEAR_LAYOUT}; write into the "
                "entries of the existing weight rather than replacing it"
            )


def _written(module: nn.Module) -> set[str]:
    """The parameters of a module (all zero before) that now hold something nonzero."""
    return {name for name, p in module.named_parameters() if bool((p.detach() != 0).any())}


def _expect_only(module: nn.Module, allowed: set[str], part: str, others: str) -> None:
    extra = sorted(_written(module) - allowed)
    if extra:
        raise ExerciseFailed(
            f"{part}: your function also writes {', '.join(f'`{e}`' for e in extra)}; this exercise writes only "
            f"{', '.join(f'`{a}`' for a in sorted(allowed) if not a.endswith('bias'))}, {others}"
        )


def _slot_of(index: int, layout: Layout) -> str:
    for name in layout.order:
        place = layout.slot(name)
        if place.start <= index < place.stop:
            return name
    return "?"


# ---------------------------------------------------------------- selectors


def _scores(attn: MultiHeadAttention, x: Tensor, transpose_q: bool = False, transpose_k: bool = False) -> Tensor:
    """Scores ``(batch, n, n)`` of a one-head attention on residual streams ``x``, in float64 (after / sqrt(d_k))."""
    a = copy.deepcopy(attn).double()
    with torch.no_grad():
        if transpose_q:
            a.w_q.weight.copy_(a.w_q.weight.T.clone())
        if transpose_k:
            a.w_k.weight.copy_(a.w_k.weight.T.clone())
        q, k = a.w_q(x.double()), a.w_k(x.double())  # (batch, n, d_model) each
    return q @ k.transpose(-2, -1) / math.sqrt(a.d_k)  # (batch, n, n)


def _pattern_ok(scores: Tensor, targets: Tensor, tol: float) -> bool:
    """For every query 1..n-1: the targets score equally (within tol) and above every other key."""
    s, t = scores[:, 1:], targets[:, 1:]  # (batch, n - 1, n)
    top = s.masked_fill(~t, -math.inf).amax(-1)
    low = s.masked_fill(~t, math.inf).amin(-1)
    rest = s.masked_fill(t, -math.inf).amax(-1)
    return bool(((top - low) <= tol).all() and (low > rest).all())


def _gap(scores: Tensor, targets: Tensor) -> float:
    """The smallest lead of a query's lowest target over its best other key (queries 1..n-1 with another key)."""
    s, t = scores[:, 1:], targets[:, 1:]
    low = s.masked_fill(~t, math.inf).amin(-1)
    rest = s.masked_fill(t, -math.inf).amax(-1)
    lead = (low - rest)[torch.isfinite(rest)]
    return float(lead.min()) if lead.numel() else math.inf


def _leak(scores: Tensor, targets: Tensor) -> float:
    """The most softmax weight a query 1..n-1 gives to keys that are not its targets."""
    weights = torch.softmax(scores[:, 1:], dim=-1)
    return float(weights.masked_fill(targets[:, 1:], 0.0).sum(-1).max())


def _tol(scores: Tensor, scale: float) -> float:
    return 1e-3 * scale + 1e-6 * float(scores.abs().max())


def _judge_gap(gap: float, scale: float, d_k: int, leak: float, part: str) -> None:
    """The pattern is right; the runner-up must trail by ``scale`` (0.1 % tolerance)."""
    if abs(gap - scale) <= 1e-3 * scale:
        return
    root = math.sqrt(d_k)
    if gap < scale:
        if abs(gap * root - scale) <= 1e-2 * scale:
            raise ExerciseFailed(
                f"{part}: every query picks the right keys, but they lead by only {gap:.4g} instead of scale = {scale:g} "
                f"({leak:.2g} of the attention leaks elsewhere): MultiHeadAttention divides every score by "
                f"sqrt(d_k) = sqrt({d_k}) = {root:.4g}; multiply your query (or key) weights by scale * sqrt(attn.d_k)"
            )
        raise ExerciseFailed(
            f"{part}: every query picks the right keys, but they lead the runner-up by only {gap:.4g} instead of "
            f"scale = {scale:g}, so the attention is soft: up to {leak:.2g} of it leaks to other keys (at the asked "
            "scale it would be a few times e^-scale). Multiply the query weights by scale * sqrt(attn.d_k)"
        )
    if abs(gap - scale * root) <= 1e-2 * scale * root:
        raise ExerciseFailed(
            f"{part}: the right keys lead by {gap:.4g} instead of scale = {scale:g}, sqrt(d_k) = {root:.4g} times too "
            "much: MultiHeadAttention divides the scores by sqrt(d_k) once; did you multiply by d_k instead of sqrt(d_k)?"
        )
    raise ExerciseFailed(
        f"{part}: the right keys lead the runner-up by {gap:.4g}, not by scale = {scale:g}: that selects the right keys, "
        "but the notebook sweeps `scale` and needs the gap to be exactly it (query weights times scale * sqrt(attn.d_k))"
    )


SelectorCase = tuple[Tensor, Tensor, Tensor]  # residual streams (batch, n, d), targets (batch, n, n) bool, tokens (batch, LENGTH)


def _layout_label(layout: Layout) -> str:
    """How a check's message names the residual layout it used."""
    return "the standard layout" if layout is LAYOUT else f"a layout with the slots in another order {layout.order}"


def _raise_if_transposed(attn: nn.Module, x: Tensor, targets: Tensor, scale: float, part: str) -> None:
    """Name a w_q or w_k written as (in, out): with its transpose the selector would be right."""
    for tq, tk, which in (
        (True, False, "w_q.weight"),
        (False, True, "w_k.weight"),
        (True, True, "w_q.weight and w_k.weight"),
    ):
        flipped = _scores(attn, x, tq, tk)
        if torch.isfinite(flipped).all() and _pattern_ok(flipped, targets, _tol(flipped, scale)):
            raise ExerciseFailed(
                f"{part}: {which} look(s) transposed: with .T the selector would be right. {_LINEAR_LAYOUT}: "
                "`attn.w_q.weight[coordinate, layout.pos] = ...`"
            )


def _check_selector(
    fn: Callable[..., object],
    part: str,
    cases: Callable[[Layout], SelectorCase],
    name_mistake: Callable[[Tensor, SelectorCase, Layout], str | None],
    position_only: bool = False,
) -> None:
    """The common run of a selector check: standard layout, another scale, the shuffled layout."""
    runs = ((LAYOUT, SCALE, "standard"), (LAYOUT, OTHER_SCALE, "scale"), (SHUFFLED, SCALE, "shuffled"))
    for layout, scale, run in runs:
        block = hand_block(layout)
        attn = block.self_attn
        label = _layout_label(layout)
        _write(
            fn, attn, layout, scale, what=f"a fresh block's self_attn (every weight zero), {label}, scale={scale:g}", part=part
        )
        d = layout.d_model
        _expect_shapes(attn, {f"w_{p}.weight": (d, d) for p in "qkvo"}, part)
        _expect_only(attn, {"w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias"}, part, "the selector")
        if not _written(attn):
            raise ExerciseFailed(f"{part}: w_q and w_k are still zero: every score is 0, so every query averages all keys")
        x, targets, tokens = cases(layout)
        scores = _scores(attn, x)
        if not torch.isfinite(scores).all():
            raise ExerciseFailed(f"{part}: the scores hold NaN or inf; check the numbers written into w_q and w_k")
        tol = _tol(scores, scale)

        if position_only:
            centred = scores - scores.mean(-1, keepdim=True)
            spread = (centred - centred[:1]).abs().max()
            if spread > tol:
                # a transposed weight reads the residual's first slots, often the tokens
                _raise_if_transposed(attn, x, targets, scale, part)
                raise ExerciseFailed(
                    f"{part}: the scores change with the tokens (by up to {float(spread):.3g}): w_q or w_k reads "
                    "layout.tok; the query and the key should read only the positions (layout.one, layout.pos, layout.pos2)"
                )
        ok = _pattern_ok(scores, targets, tol)
        if not ok:
            _raise_if_transposed(attn, x, targets, scale, part)
            if run == "shuffled":
                raise ExerciseFailed(
                    f"{part}: right in the standard layout, wrong when the slots come in another order: your function uses "
                    "numbers for the residual's indices; index with layout.tok, layout.one, layout.pos, ... instead"
                )
            named = name_mistake(scores, (x, targets, tokens), layout)
            raise ExerciseFailed(f"{part}: {named}")
        gap = _gap(scores, targets)
        if run == "scale" and abs(gap - SCALE) <= 1e-3 * SCALE:
            raise ExerciseFailed(
                f"{part}: asked for scale={OTHER_SCALE:g}, the right keys still lead by {SCALE:g}: use the `scale` "
                "argument instead of a fixed number"
            )
        if gap < scale * (1 - 1e-3) and not bool(targets[:, 1:, 0].any()):
            others_gap = _gap(scores.clone().index_fill_(-1, torch.tensor([0]), -math.inf), targets)  # BOS left out
            if abs(others_gap - scale) <= 1e-3 * scale:
                raise ExerciseFailed(
                    f"{part}: every query picks the right key, and the other tokens trail by scale = {scale:g}, but BOS "
                    f"trails by only {gap:.4g}: BOS's penalty (through layout.bos) must be at least scale"
                )
        _judge_gap(gap, scale, attn.d_k, _leak(scores, targets), part)


def _top_keys(scores: Tensor, b: int, i: int, tol: float) -> list[int]:
    row = scores[b, i]
    return [j for j in range(row.numel()) if float(row.max() - row[j]) <= tol]


def _tokens_label(tokens: Tensor, b: int) -> str:
    return "[BOS, " + ", ".join(str(t) for t in tokens[b].tolist()) + "]"


# reverse ---------------------------------------------------------------------------


def _reverse_cases(layout: Layout) -> SelectorCase:
    generator = torch.Generator().manual_seed(14)
    tokens = torch.cat([torch.tensor([[3, 1, 4, 1, 5], [0, 0, 0, 0, 0]]), torch.randint(VOCAB, (6, LENGTH), generator=generator)])
    x = embed(tokens, layout)  # (8, 6, d)
    targets = torch.zeros(len(tokens), _N, _N, dtype=torch.bool)
    for i in range(1, _N):
        targets[:, i, LENGTH + 1 - i] = True
    return x, targets, tokens


def _name_reverse(scores: Tensor, case: SelectorCase, layout: Layout) -> str:
    picked = scores[0].argmax(-1)[1:].tolist()  # positions attended by queries 1..5 (the first sequence)
    queries = range(1, _N)
    want = [LENGTH + 1 - i for i in queries]
    known = {
        "each query attends to its own position (target t = i); reverse needs t = 6 - i": list(queries),
        "off by one: query i attends to position 5 - i (mirrored around 2.5, so position 5 reads BOS); the tokens sit "
        "at positions 1..5 with BOS at 0, so the mirror image of i is 6 - i": [LENGTH - i for i in queries],
        "off by one: query i attends to position 7 - i (mirrored around 3.5); the tokens sit at positions 1..5 with BOS "
        "at 0, so the mirror image of i is 6 - i": [min(LENGTH + 2 - i, LENGTH) for i in queries],
        "query i attends to the previous position i - 1 (notebook 13's previous-token head); reverse needs 6 - i": [
            i - 1 for i in queries
        ],
        "the j² term has the wrong sign: each query attends to the position *farthest* from 6 - i; the key reads "
        "[j, j²] and the query is c [2t, -1]": [max(range(_N), key=lambda j, t=t: ((j - t) ** 2, -j)) for t in want],
    }
    for message, pattern in known.items():
        if picked == pattern:
            return message
    if set(picked) <= {0, LENGTH}:
        return (
            f"the queries attend only to the ends ({picked}): a score linear in j always peaks at an end; the key needs "
            "j² (layout.pos2) and the query -c times it, so that the score c (2 t j - j²) peaks at j = t"
        )
    if len(set(picked)) == 1:
        return (
            f"every query attends to position {picked[0]}: the target must move with the query's position, "
            "t = 6 - i, which w_q builds from layout.one and layout.pos"
        )
    return f"query i = 1..5 attends most to positions {picked}; reverse needs {want} (t = 6 - i)"


@exercise("the selector of reverse")
def check_reverse_selector(write_reverse_selector) -> None:
    """Check ``write_reverse_selector(attn, layout, scale)``: query i attends to position 6 - i, by ``scale``."""
    _check_selector(write_reverse_selector, "the selector (w_q, w_k)", _reverse_cases, _name_reverse, position_only=True)


# same token ------------------------------------------------------------------------


def _same_token_cases(layout: Layout) -> SelectorCase:
    generator = torch.Generator().manual_seed(15)
    fixed = torch.tensor([[3, 3, 1, 3, 7], [2, 5, 2, 5, 9], [0, 0, 0, 0, 0], [1, 2, 3, 4, 5], [9, 8, 9, 8, 8]])
    tokens = torch.cat([fixed, torch.randint(4, (6, LENGTH), generator=generator)])
    x = embed(tokens, layout)
    targets = torch.zeros(len(tokens), _N, _N, dtype=torch.bool)
    targets[:, 1:, 1:] = tokens[:, :, None] == tokens[:, None, :]
    targets[:, 1:, 0] = True  # BOS
    return x, targets, tokens


def _name_same_token(scores: Tensor, case: SelectorCase, layout: Layout) -> str:
    _, targets, tokens = case
    tol = _tol(scores, SCALE)
    same = tokens[:, :, None] == tokens[:, None, :]  # (batch, 5, 5)
    differ = ~same
    if all(
        set(_top_keys(scores, b, i + 1, tol)) - {0} == {j + 1 for j in range(LENGTH) if differ[b, i, j]}
        for b in range(len(tokens))
        for i in range(LENGTH)
        if differ[b, i].any()
    ):
        return "the queries pick the keys with a *different* token; the selector should pick the same token (q = c tok, k = tok)"
    if all(_top_keys(scores, b, i, tol) == [i] for b in range(len(tokens)) for i in range(1, _N)):
        return "each query attends only to its own position: compare the tokens (layout.tok in both w_q and w_k), not positions"
    bos = scores[:, 1:, 0]  # (batch, 5)
    keys = scores[:, 1:, 1:]  # (batch, 5, 5)
    match_low = keys.masked_fill(~same, math.inf).amin(-1)  # (batch, 5)
    match_high = keys.masked_fill(~same, -math.inf).amax(-1)
    other = keys.masked_fill(same, -math.inf).amax(-1)  # (batch, 5): -inf where every key matches
    matches_lead = bool(((match_low - other) > tol).all()) and float((match_high - match_low).max()) <= tol
    diff = bos - match_low
    if matches_lead and float(diff.abs().min()) > tol and float(diff.max() - diff.min()) <= tol:
        d = float(diff.mean())
        if d < 0:
            return (
                f"BOS scores {-d:.4g} below the keys with the query's token: the weight BOS gets must be 1 / (1 + count), "
                "so BOS must score exactly as high as a matching token (a query coordinate fed by layout.one whose key "
                "reads layout.bos)"
            )
        return (
            f"BOS scores {d:.4g} above the keys with the query's token; it must score exactly as high, so that it gets "
            "1 / (1 + count) of the weight"
        )
    b, i = 0, 1
    picked = _top_keys(scores, b, i, tol)
    want = [j for j in range(_N) if targets[b, i, j]]
    return (
        f"for {_tokens_label(tokens, b)} the query at position {i} (token {int(tokens[b, i - 1])}) puts its top score on "
        f"positions {picked}; it should be BOS and every position holding its token, {want}, all with the same score"
    )


@exercise("the selector of the histogram")
def check_same_token_selector(write_same_token_selector) -> None:
    """Check ``write_same_token_selector(attn, layout, scale)``: BOS and the keys with the query's token, by ``scale``."""
    _check_selector(write_same_token_selector, "the selector (w_q, w_k)", _same_token_cases, _name_same_token)


# sort: the target selector ---------------------------------------------------------


def _target_cases(layout: Layout) -> SelectorCase:
    generator = torch.Generator().manual_seed(16)
    tokens = torch.stack([torch.randperm(VOCAB, generator=generator)[:LENGTH] for _ in range(8)])
    tokens = torch.cat([torch.tensor([[7, 2, 9, 0, 4], [0, 1, 2, 3, 4], [9, 8, 7, 6, 5]]), tokens])
    with torch.no_grad():
        x = build_sort(layout=layout).residuals(tokens)[1].double()  # the stream after layer 1: count holds the ranks
    ranks = (tokens[:, None, :] < tokens[:, :, None]).sum(-1)  # (batch, 5): smaller tokens in the sequence
    targets = torch.zeros(len(tokens), _N, _N, dtype=torch.bool)
    for i in range(1, _N):
        targets[:, i, 1:] = ranks == i - 1
    return x, targets, tokens


def _name_target(scores: Tensor, case: SelectorCase, layout: Layout) -> str:
    _, targets, tokens = case
    ranks = (tokens[:, None, :] < tokens[:, :, None]).sum(-1)
    picked = scores[:, 1:].argmax(-1)  # (batch, 5): key position per query
    tol = _tol(scores, SCALE)
    ranks_bos = torch.cat([torch.full((len(tokens), 1), -1), ranks], dim=1)  # BOS's "rank" -1 for lookup
    got = ranks_bos.gather(1, picked)  # (batch, 5): the count of the attended key
    queries = torch.arange(1, _N)[None, :]
    ties = [_top_keys(scores, b, 1, tol) for b in range(len(tokens))]
    if all(0 in t and len(t) > 1 for t in ties):
        return (
            "query 1 ties BOS with the smallest token: BOS attends only to itself in layer 1, so its count is 0, like the "
            "smallest token's; give BOS a penalty (a query coordinate fed by -c layout.one whose key reads layout.bos)"
        )
    if bool((picked == 0).any()):
        return "some queries attend to BOS, which holds no token; BOS must score below every token (through layout.bos)"
    known = {
        "off by one: query i attends to the token with count i (i smaller tokens); position i holds the token with "
        "i - 1 smaller ones (positions count from 1, counts from 0)": queries.clamp(max=LENGTH - 1),
        "the order is reversed: query i attends to the token with count 5 - i (largest first); sort ascending, so "
        "query i wants count i - 1": LENGTH - queries,
    }
    for message, want in known.items():
        if bool((got[:, : LENGTH - 1] == want[:, : LENGTH - 1]).all()):
            return message
    if bool((picked == queries).all()):
        return (
            "each query attends to its own position: the key must read the count (layout.count), which says where the "
            "token belongs, not layout.pos, which says where it is"
        )
    b = 0
    return (
        f"for {_tokens_label(tokens, b)} (counts of smaller tokens {ranks[b].tolist()}) queries 1..5 attend most to "
        f"positions {picked[b].tolist()}, whose counts are {got[b].tolist()}; query i should pick the token whose count "
        "is i - 1"
    )


@exercise("the selector of sort's second layer")
def check_target_selector(write_target_selector) -> None:
    """Check ``write_target_selector(attn, layout, scale)``: query i attends to the key with count i - 1, never BOS."""
    _check_selector(write_target_selector, "the selector (w_q, w_k)", _target_cases, _name_target)


# ---------------------------------------------------------------- value path


def _block_map(matrix: Tensor, layout: Layout, tol: float = 1e-5) -> list[tuple[str, str]]:
    """The (written slot, read slot) pairs where ``matrix`` (d_model, d_model) is nonzero."""
    pairs = []
    for out_name in layout.order:
        for in_name in layout.order:
            block = matrix[layout.slot(out_name), layout.slot(in_name)]
            if float(block.abs().max()) > tol:
                pairs.append((out_name, in_name))
    return pairs


def _name_copy(ov: Tensor, layout: Layout) -> str:
    tok, out = layout.slot("tok"), layout.slot("out")
    pairs = _block_map(ov, layout)
    eye = torch.eye(VOCAB, dtype=torch.float64)
    block = ov[out, tok]
    if pairs == [("tok", "tok")]:
        return (
            "it writes the token into layout.tok, the slot it reads: the residual connection adds it onto the input token "
            "(which then reads 2 at one token); write into layout.out"
        )
    if pairs and all(w == "out" for w, _ in pairs) and ("out", "tok") not in pairs:
        return f"it reads layout.{pairs[0][1]} instead of layout.tok: the token lives in layout.tok"
    if ("out", "tok") in pairs:
        for shift in (1, -1):
            if torch.allclose(block, eye.roll(shift, dims=0), atol=1e-5):
                return f"off by one: token a arrives in out slot a {'+' if shift > 0 else '-'} 1 (value coordinates misaligned)"
        if torch.allclose(block, eye.flip(0), atol=1e-5):
            return "token a arrives as 9 - a: the identity is flipped"
        extra = [f"{w} <- {r}" for w, r in pairs if (w, r) != ("out", "tok")]
        if extra and torch.allclose(block, eye, atol=1e-5):
            return f"it copies tok to out, but also writes {', '.join(extra)} (slot written <- slot read): only tok -> out"
        factor = float(block.trace()) / VOCAB
        if not extra and abs(factor) > 1e-6 and torch.allclose(block, factor * eye, atol=1e-5):
            return f"it copies the token with a factor {factor:.4g}; the output must be the token's one-hot itself (factor 1)"
    described = ", ".join(f"{w} <- {r}" for w, r in pairs) or "nothing"
    return f"w_o w_v maps {described} (slot written <- slot read); it should carry layout.tok to layout.out by the identity"


@exercise("the value path")
def check_copy_value(write_copy_value) -> None:
    """Check ``write_copy_value(attn, layout)``: ``w_o w_v`` carries ``tok`` to ``out`` by the identity, nothing else."""
    part = "the value path (w_v, w_o)"
    for layout in (LAYOUT, SHUFFLED):
        attn = hand_block(layout).self_attn
        label = _layout_label(layout)
        _write(write_copy_value, attn, layout, what=f"a fresh block's self_attn (every weight zero), {label}", part=part)
        d = layout.d_model
        _expect_shapes(attn, {f"w_{p}.weight": (d, d) for p in "qkvo"}, part)
        _expect_only(attn, {"w_v.weight", "w_v.bias", "w_o.weight", "w_o.bias"}, part, "the value path")
        w_v, w_o = attn.w_v.weight.detach().double(), attn.w_o.weight.detach().double()
        if not _written(attn):
            raise ExerciseFailed(f"{part}: w_v and w_o are still zero: the attention adds nothing to the residual stream")
        if not bool(w_o.any()):
            raise ExerciseFailed(f"{part}: w_o is still zero: whatever w_v reads never reaches the residual stream")
        if not bool(w_v.any()):
            raise ExerciseFailed(f"{part}: w_v is still zero: w_o has nothing to write")
        expected = torch.zeros(d, d, dtype=torch.float64)
        expected[layout.slot("out"), layout.slot("tok")] = torch.eye(VOCAB, dtype=torch.float64)
        ov = w_o @ w_v  # (d, d): residual feature read -> residual feature written
        bias = w_o @ attn.w_v.bias.detach().double() + attn.w_o.bias.detach().double()  # (d,)
        if not torch.isfinite(ov).all():
            raise ExerciseFailed(f"{part}: w_v or w_o holds NaN or inf")
        if torch.allclose(ov, expected, atol=1e-5):
            if float(bias.abs().max()) > 1e-5:
                slots = sorted({_slot_of(int(i), layout) for i in torch.nonzero(bias.abs() > 1e-5)})
                raise ExerciseFailed(
                    f"{part}: it copies the token, but the biases add a constant to {', '.join(slots)} at every "
                    "position; leave the biases of w_v and w_o at zero"
                )
            continue
        for name, candidate in (
            ("w_v.weight", w_o @ w_v.T),
            ("w_o.weight", w_o.T @ w_v),
            ("w_v.weight and w_o.weight", w_o.T @ w_v.T),
        ):
            if torch.allclose(candidate, expected, atol=1e-5):
                raise ExerciseFailed(
                    f"{part}: {name} look(s) transposed: with .T the value path would be right. {_LINEAR_LAYOUT}: "
                    "`attn.w_v.weight[value coordinates, layout.tok]`, `attn.w_o.weight[layout.out, value coordinates]`"
                )
        if layout is SHUFFLED:
            raise ExerciseFailed(
                f"{part}: right in the standard layout, wrong when the slots come in another order: your function uses "
                "numbers for the residual's indices; index with layout.tok and layout.out instead"
            )
        raise ExerciseFailed(f"{part}: {_name_copy(ov, layout)}")


# ---------------------------------------------------------------- output map


@exercise("the output map")
def check_output_map(write_output_map) -> None:
    """Check ``write_output_map(unembed, slot)``: ``unembed.weight`` is the identity on ``slot``, zero elsewhere."""
    part = "the output map (unembed)"
    runs = ((LAYOUT, "out"), (LAYOUT, "count"), (SHUFFLED, "out"))
    for layout, name in runs:
        slot = layout.slot(name)
        width = slot.stop - slot.start
        unembed = nn.Linear(layout.d_model, width, bias=False)
        with torch.no_grad():
            unembed.weight.zero_()
        what = f"a fresh nn.Linear({layout.d_model}, {width}, bias=False) of zeros and slot={slot} (layout.{name})"
        try:
            _write(write_output_map, unembed, slot, what=what, part=part)
        except ExerciseFailed as err:
            if name != "count":
                raise
            raise ExerciseFailed(
                f"{part}: right for layout.out (10 wide), but not for layout.count ({width} wide): "
                f"{str(err).removeprefix(part + ': ')}. Make the identity as "
                "wide as the slot, torch.eye(slot.stop - slot.start)"
            ) from None
        _expect_shapes(unembed, {"weight": (width, layout.d_model)}, part)
        weight = unembed.weight.detach().double()
        expected = torch.zeros(width, layout.d_model, dtype=torch.float64)
        expected[:, slot] = torch.eye(width, dtype=torch.float64)
        if torch.allclose(weight, expected, atol=1e-6):
            if unembed.bias is not None and bool(unembed.bias.detach().any()):
                raise ExerciseFailed(f"{part}: it adds a bias; the logits must be the slot's features themselves")
            continue
        if not bool(weight.any()):
            raise ExerciseFailed(f"{part}: unembed.weight is still zero: every logit is 0")
        if name != "out" or layout is SHUFFLED:
            raise ExerciseFailed(
                f"{part}: right for layout.out in the standard layout, wrong for slot={slot} "
                f"({'layout.count' if name == 'count' else 'another order of the slots'}): your function ignores its "
                "`slot` argument; write the identity into unembed.weight[:, slot]"
            )
        for other in layout.order:
            place = layout.slot(other)
            if other != name and place.stop - place.start == width:
                wrong = torch.zeros_like(expected)
                wrong[:, place] = torch.eye(width, dtype=torch.float64)
                if torch.allclose(weight, wrong, atol=1e-6):
                    echo = ", so the model would return its input unchanged" if other == "tok" else ""
                    raise ExerciseFailed(f"{part}: it decodes layout.{other}, not the slot it is given (layout.{name}){echo}")
        block = weight[:, slot]
        eye = torch.eye(width, dtype=torch.float64)
        if float(weight[:, [j for j in range(layout.d_model) if not slot.start <= j < slot.stop]].abs().max()) <= 1e-6:
            for shift in (1, -1):
                if torch.allclose(block, eye.roll(shift, dims=0), atol=1e-6):
                    return_msg = f"off by one: feature k of the slot becomes logit k {'+' if shift > 0 else '-'} 1"
                    raise ExerciseFailed(f"{part}: {return_msg}")
            if torch.allclose(block, -eye, atol=1e-6):
                raise ExerciseFailed(f"{part}: the identity is negated: argmax would pick the smallest feature")
            if torch.allclose(block, eye.flip(0), atol=1e-6):
                raise ExerciseFailed(f"{part}: the identity is flipped: feature k becomes logit {width - 1} - k")
            factor = float(block.trace()) / width
            if abs(factor) > 1e-9 and torch.allclose(block, factor * eye, atol=1e-6):
                raise ExerciseFailed(f"{part}: logit k is {factor:.4g} times feature k; write the identity (factor 1)")
        read = sorted({_slot_of(int(j), layout) for j in torch.nonzero(weight.abs().sum(0) > 1e-6)})
        raise ExerciseFailed(
            f"{part}: unembed.weight reads {', '.join(f'layout.{r}' for r in read)}; logit k should be feature k of "
            f"layout.{name} (the identity in unembed.weight[:, slot], zero elsewhere)"
        )


# ---------------------------------------------------------------- the count table


def _table_inputs(layout: Layout, offsets: tuple[float, ...], junk: bool) -> tuple[Tensor, Tensor]:
    """Residual vectors ``(rows, d)`` with ``frac = 1/(1+c) + offset`` for c = 0..5, and their counts ``(rows,)``."""
    generator = torch.Generator().manual_seed(17)
    values = table_values()
    rows, counts = [], []
    for c, v in enumerate(values.tolist()):
        for offset in offsets:
            x = torch.zeros(layout.d_model, dtype=torch.float64)
            position = int(torch.randint(1, _N, (1,), generator=generator))
            x[layout.one] = 1.0
            x[layout.pos] = position
            x[layout.pos2] = position**2
            x[layout.slot("tok")] = nn.functional.one_hot(torch.randint(VOCAB, (1,), generator=generator), VOCAB)[0].double()
            if junk:
                x[layout.slot("out")] = torch.rand(VOCAB, generator=generator, dtype=torch.float64)
                x[layout.pos] = float(torch.randint(0, 30, (1,), generator=generator))
                x[layout.pos2] = float(torch.randint(0, 30, (1,), generator=generator))
            x[layout.frac] = v + offset
            rows.append(x)
            counts.append(c)
    return torch.stack(rows), torch.tensor(counts)


def _table_output(ff: FeedForward, x: Tensor) -> Tensor:
    with torch.no_grad():
        return ff(x.to(ff.linear1.weight.dtype)).double()  # (rows, d): computed in the module's own dtype (float32)


def _expected_table(layout: Layout, counts: Tensor) -> Tensor:
    expected = torch.zeros(len(counts), layout.d_model, dtype=torch.float64)
    expected[torch.arange(len(counts)), layout.slot("count").start + counts] = 1.0
    return expected


def _name_table(ff: FeedForward, layout: Layout) -> str:
    count = layout.slot("count")
    x, counts = _table_inputs(layout, (0.0,), junk=False)
    y = _table_output(ff, x)  # (6, d)
    outside = [j for j in range(layout.d_model) if not count.start <= j < count.stop]
    stray = y[:, outside].abs().amax(0)
    if float(stray.max()) > 1e-3:
        slots = sorted({_slot_of(outside[int(j)], layout) for j in torch.nonzero(stray > 1e-3)})
        return f"it writes into {', '.join(f'layout.{s}' for s in slots)}; the table's answer goes into layout.count only"
    table = y[:, count]  # (6 counts, 6 slots)
    if float((table - table[:1]).abs().max()) <= 1e-3:
        read = sorted({_slot_of(int(j), layout) for j in torch.nonzero(ff.linear1.weight.detach().abs().sum(0))})
        return (
            f"the output is the same for every frac (linear1 reads {', '.join(f'layout.{r}' for r in read) or 'nothing'}): "
            "the hidden units must read layout.frac"
        )
    eye = torch.eye(LENGTH + 1, dtype=torch.float64)
    rows = "; ".join(f"c={c}: {[round(v, 2) for v in table[c].tolist()]}" for c in range(LENGTH + 1))
    clear = table.amax(-1) > 0.9  # rows with a clear answer
    shifts = {(int(table[c].argmax()) - c) % (LENGTH + 1) for c in range(LENGTH + 1) if clear[c]}
    if int(clear.sum()) >= LENGTH - 1 and shifts in ({1}, {LENGTH}):
        shift = 1 if shifts == {1} else -1
        return (
            f"misaligned by one: count c lands in count slot c {'+' if shift > 0 else '-'} 1 (the hidden units or "
            f"thresholds are shifted by one against the table's rows). Your table: {rows}"
        )
    if torch.allclose(table, eye.flip(1), atol=1e-3):
        return f"reversed: count c lands in slot 5 - c; frac = 1/(1+c) is large when the count is small. Your table: {rows}"
    missing = torch.zeros_like(table)
    missing[:, 0] = 1.0
    if torch.allclose(table + missing, eye, atol=1e-3):
        return (
            "count 0 never gets its 1 (and the other counts get a -1 in slot 0): count 0's one-hot is 1 minus step 0, "
            "and that 1 comes from linear2's bias"
        )
    halves = (table - 0.5).abs() <= 1e-2
    if bool(halves.any()):
        return f"some entries are 1/2: a step sits on a table value instead of halfway between two values. Your table: {rows}"
    fractions = (table.abs() > 1e-2) & ((table - 1).abs() > 1e-2)
    if bool(fractions.any()):
        return (
            f"some entries are neither 0 nor 1: a step is not flat at the table's values. Put each threshold halfway "
            f"between two values and make the ramps steep (slope SHARPNESS = 100). Your table: {rows}"
        )
    return f"for frac = 1/(1+c) it writes count slots {rows}; expected one-hot c (c = 0..5)"


@exercise("the feed-forward lookup table")
def check_count_table(write_count_table) -> None:
    """Check ``write_count_table(ff, layout)``: ``frac = 1/(1+c)`` (and 0.004 off it) -> ``count`` one-hot at c."""
    part = "the lookup table (ff.linear1, ff.linear2)"
    for layout in (LAYOUT, SHUFFLED):
        ff = hand_block(layout).ff
        label = _layout_label(layout)
        _write(
            write_count_table,
            ff,
            layout,
            what=f"a fresh block's ff = FeedForward({layout.d_model}, {D_FF}) of zeros, {label}",
            part=part,
        )
        d = layout.d_model
        _expect_shapes(
            ff,
            {"linear1.weight": (D_FF, d), "linear1.bias": (D_FF,), "linear2.weight": (d, D_FF), "linear2.bias": (d,)},
            part,
        )
        if not _written(ff):
            raise ExerciseFailed(f"{part}: linear1 and linear2 are still zero: the layer writes nothing")
        if not all(torch.isfinite(p).all() for p in ff.parameters()):
            raise ExerciseFailed(f"{part}: the weights hold NaN or inf")
        x, counts = _table_inputs(layout, (-0.004, 0.0, 0.004), junk=False)
        y = _table_output(ff, x)
        expected = _expected_table(layout, counts)
        if torch.allclose(y, expected, atol=1e-3):
            noisy_x, noisy_counts = _table_inputs(layout, (-0.004, 0.0, 0.004), junk=True)
            moved = (_table_output(ff, noisy_x) - _expected_table(layout, noisy_counts)).abs().amax(0)
            if float(moved.max()) > 1e-3:
                probe = sorted({_slot_of(int(j), layout) for j in torch.nonzero(ff.linear1.weight.detach().abs().sum(0))})
                read = [s for s in probe if s != "frac"]
                raise ExerciseFailed(
                    f"{part}: right on clean inputs, but the output changes with {', '.join(f'layout.{s}' for s in read)}: "
                    "linear1 should read layout.frac only"
                )
            continue
        if layout is SHUFFLED:
            raise ExerciseFailed(
                f"{part}: right in the standard layout, wrong when the slots come in another order: your function uses "
                "numbers for the residual's indices; index with layout.frac and layout.count instead"
            )
        exact_x, exact_counts = _table_inputs(layout, (0.0,), junk=False)
        if torch.allclose(_table_output(ff, exact_x), _expected_table(layout, exact_counts), atol=1e-3):
            worst = float((y - expected).abs().max())
            raise ExerciseFailed(
                f"{part}: exact at frac = 1/(1+c), but 0.004 away from it (the leak of a soft selector) an output moves "
                f"by {worst:.2g}: the steps are not flat there. Put each threshold halfway between two table values and "
                f"make the ramps steep (slope SHARPNESS = 100: 1/100 wide, while neighbouring values are at least 1/30 apart)"
            )
        raise ExerciseFailed(f"{part}: {_name_table(ff, layout)}")
