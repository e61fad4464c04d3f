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
    table_thresholds,
    table_values,
    write_one_hot,
    write_steps,
)

# The references (write_reverse_selector, ...) live in helpers.handwritten.program: exported here, a star import would
# overwrite a learner's function of the same name.
__all__ = [
    "check_reverse_selector",
    "check_copy_value",
    "check_output_map",
    "check_same_token_selector",
    "check_count_steps",
    "check_count_one_hot",
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
    if abs(gap - scale * scale * root) <= 1e-2 * scale * scale * root:
        raise ExerciseFailed(
            f"{part}: the right keys lead by {gap:.4g} = scale² sqrt(d_k) instead of scale = {scale:g}: the gain "
            f"c = scale * sqrt(d_k) is written into both w_q and w_k, so every score gets it twice (c²). Put it in one "
            "of them (the query, say) and leave the other's entries at 1"
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
    name_mistake: Callable[[Tensor, SelectorCase, Layout, MultiHeadAttention], str | None],
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
            named = name_mistake(scores, (x, targets, tokens), layout, attn)
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


def _parabola(values: Tensor, xs: Tensor) -> tuple[float, float, float]:
    """Least-squares fit ``a x² + b x + c`` of ``values`` at ``xs`` (float64): ``(a, b, largest residual)``."""
    design = torch.stack([xs**2, xs, torch.ones_like(xs)], dim=-1)
    solution = torch.linalg.lstsq(design, values[:, None]).solution[:, 0]
    residual = float((design @ solution - values).abs().max())
    return float(solution[0]), float(solution[1]), residual


def _peaks(rows: list[Tensor], xs: Tensor) -> tuple[str, list[float]]:
    """Where each row of scores peaks as a quadratic in ``xs``: ``("concave", peaks)``, ``"convex"``, ``"linear"`` or
    ``"other"`` (not a quadratic)."""
    fits = [_parabola(row, xs) for row in rows]
    spread = max(float(row.abs().max()) for row in rows) + 1e-12
    if any(residual > 1e-6 * spread for _, _, residual in fits):
        return "other", []
    if all(abs(a) <= 1e-9 * spread for a, _, _ in fits):
        return "linear", []
    if all(a > 0 for a, _, _ in fits):
        return "convex", [-b / (2 * a) for a, b, _ in fits]
    if all(a < 0 for a, _, _ in fits):
        return "concave", [-b / (2 * a) for a, b, _ in fits]
    return "other", []


def _reads(weight: Tensor, layout: Layout) -> set[str]:
    """The slots whose columns a weight ``(rows, d_model)`` reads."""
    columns = torch.nonzero(weight.detach().abs().sum(0) > 0).flatten().tolist()
    return {_slot_of(int(j), layout) for j in columns}


def _matches(peaks: list[float], targets: list[float]) -> bool:
    return all(abs(p - t) <= 1e-3 for p, t in zip(peaks, targets, strict=True))


def _name_reverse(scores: Tensor, case: SelectorCase, layout: Layout, attn: MultiHeadAttention) -> str:
    queries = list(range(1, _N))
    want = [LENGTH + 1 - i for i in queries]
    keys_read = _reads(attn.w_k.weight, layout)
    shape, peaks = _peaks([scores[0, i] for i in queries], torch.arange(_N, dtype=torch.float64))
    if shape == "convex":
        return (
            "the parabola opens upwards: the j² term has the wrong sign, so each query attends to the position *farthest* "
            "from its target instead of the target. The key reads [j, j²] and the query is c [2t, -1]: the query's "
            "coordinate paired with pos2 must be -c (from layout.one)"
        )
    if shape == "linear":
        if "pos2" in keys_read:
            return (
                "every score is linear in j, so each query attends to an end of the sequence: your key reads j² "
                "(layout.pos2), but the query gives that coordinate no weight; it must be -c (fed by layout.one)"
            )
        return (
            "the queries attend only to the ends: a score linear in j always peaks at an end; the key needs j² "
            "(layout.pos2) and the query -c times it, so that the score c (2 t j - j²) peaks at j = t"
        )
    if shape == "concave":
        known = {
            "each query attends to its own position (target t = i); reverse needs t = 6 - i": [float(i) for i in queries],
            "off by one: query i attends to position 5 - i (mirrored around 2.5, so position 5 reads BOS); the tokens "
            "sit at positions 1..5 with BOS at 0, so the mirror image of i is 6 - i": [LENGTH - i for i in queries],
            "off by one: query i attends to position 7 - i (mirrored around 3.5); the tokens sit at positions 1..5 with "
            "BOS at 0, so the mirror image of i is 6 - i": [LENGTH + 2 - i for i in queries],
            "query i attends to the previous position i - 1 (notebook 13's previous-token head); reverse needs 6 - i": [
                i - 1 for i in queries
            ],
            "the factor 2 is missing: the query's first coordinate is c t where it must be 2 c t. The score c (t j - j²) "
            "peaks at j = t / 2, so query i looks at (6 - i) / 2; c (2 t j - j²) = c t² - c (j - t)² peaks at t": [
                t / 2 for t in want
            ],
            "the factor 2 is doubled: the score c (4 t j - j²) peaks at j = 2 t; the query's first coordinate is 2 c t": [
                2 * t for t in want
            ],
        }
        for message, pattern in known.items():
            if _matches(peaks, [float(v) for v in pattern]):
                return message
        if max(peaks) - min(peaks) <= 1e-3:
            return (
                f"every query attends to position {peaks[0]:.3g}: the target must move with the query's position, "
                "t = 6 - i, which w_q builds from layout.one and layout.pos"
            )
        return (
            f"query i = 1..5 attends most to positions {[round(v, 2) for v in peaks]} (where each query's parabola peaks); "
            f"reverse needs {want}: the query is c [2 t, -1] with t = 6 - i = 6 one - pos"
        )
    picked = scores[0].argmax(-1)[1:].tolist()
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


def _shared_bos_coordinate(attn: MultiHeadAttention, layout: Layout) -> str | None:
    """Name a BOS coordinate (a query/key coordinate whose key reads layout.bos) that a token uses too."""
    w_q, w_k = attn.w_q.weight.detach(), attn.w_k.weight.detach()
    tok = layout.slot("tok")
    for row in torch.nonzero(w_k[:, layout.bos] != 0).flatten().tolist():
        tokens = sorted(
            set(torch.nonzero(w_k[row, tok] != 0).flatten().tolist()) | set(torch.nonzero(w_q[row, tok] != 0).flatten().tolist())
        )
        if tokens:
            which = ", ".join(str(t) for t in tokens)
            return (
                f"BOS shares query/key coordinate {row} with token {which}: that coordinate's key reads layout.bos and "
                f"the token one-hot, so every query also scores the keys holding token {which} (and a query holding it "
                "scores its matches twice). Give BOS a coordinate of its own, one that no token uses (row 10, after the "
                "ten token coordinates)"
            )
    return None


def _name_same_token(scores: Tensor, case: SelectorCase, layout: Layout, attn: MultiHeadAttention) -> str:
    _, targets, tokens = case
    tol = _tol(scores, SCALE)
    shared = _shared_bos_coordinate(attn, layout)
    if shared:
        return shared
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


def _name_target(scores: Tensor, case: SelectorCase, layout: Layout, attn: MultiHeadAttention) -> str:
    _, targets, tokens = case
    ranks = (tokens[:, None, :] < tokens[:, :, None]).sum(-1)
    picked = scores[:, 1:].argmax(-1)  # (batch, 5): key position per query
    tol = _tol(scores, SCALE)
    ranks_bos = torch.cat([torch.full((len(tokens), 1), -1), ranks], dim=1)  # BOS's "rank" -1 for lookup
    got = ranks_bos.gather(1, picked)  # (batch, 5): the count of the attended key
    queries = torch.arange(1, _N)[None, :]
    keys_read = _reads(attn.w_k.weight, layout)
    if bool((picked == queries).all()):
        return (
            "each query attends to its own position: the key must read the count (layout.count), which says where the "
            "token belongs, not layout.pos, which says where it is"
        )
    if "count" not in keys_read:
        instead = ", ".join(f"layout.{r}" for r in sorted(keys_read - {"bos"})) or "nothing but layout.bos"
        return (
            f"the key reads {instead}, not layout.count: the key must say where its token belongs in sorted order, its "
            "count of smaller tokens (one-hot in layout.count), paired with query coordinate m for count m"
        )
    ties = [_top_keys(scores, b, 1, tol) for b in range(len(tokens))]
    if all(0 in t and len(t) > 1 for t in ties):
        return (
            "query 1 ties BOS with the smallest token: BOS attends only to itself in layer 1, so its count is 0, like the "
            "smallest token's; give BOS a penalty (a query coordinate fed by -c layout.one whose key reads layout.bos)"
        )
    # each query's score as a function of the key's count m (sequence 0 holds every count 0..4 once)
    order = ranks[0].argsort()  # key positions - 1, by count
    rows = [scores[0, i, 1:][order] for i in range(1, _N)]
    shape, peaks = _peaks(rows, torch.arange(LENGTH, dtype=torch.float64))
    if shape == "convex":
        return (
            "the parabola opens upwards: each query scores the count farthest from i - 1 highest. Query coordinate m "
            "is c (2 t i - t²) with t = m + 1, i.e. -c (i - t)² plus a constant per query: mind the signs"
        )
    if shape == "concave":
        known = {
            "off by one: query i attends to the token with count i (i smaller tokens); position i holds the token with "
            "i - 1 smaller ones (positions count from 1, counts from 0): query coordinate m belongs to target t = m + 1": [
                float(i) for i in range(1, _N)
            ],
            "off by one: query i attends to the token with count i - 2; position i holds the token with i - 1 smaller "
            "ones: query coordinate m belongs to target t = m + 1": [float(i - 2) for i in range(1, _N)],
            "the factor 2 is missing: query coordinate m is c (t i - t²) where it must be c (2 t i - t²) (t = m + 1); that "
            "peaks at t = i / 2 instead of t = i": [i / 2 - 1 for i in range(1, _N)],
            "the order is reversed: query i attends to the token with count 5 - i (largest first); sort ascending, so "
            "query i wants count i - 1": [float(LENGTH - i) for i in range(1, _N)],
        }
        for message, want in known.items():
            if _matches(peaks, want):
                return message
    if bool((picked == 0).any()):
        return "some queries attend to BOS, which holds no token; BOS must score below every token (through layout.bos)"
    known_picks = {
        "off by one: query i attends to the token with count i (i smaller tokens); position i holds the token with "
        "i - 1 smaller ones (positions count from 1, counts from 0)": queries.clamp(max=LENGTH - 1),
        "the order is reversed: query i attends to the token with count 5 - i (largest first); sort ascending, so "
        "query i wants count i - 1": LENGTH - queries,
    }
    for message, want in known_picks.items():
        if bool((got[:, : LENGTH - 1] == want[:, : LENGTH - 1]).all()):
            return message
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
            if torch.allclose(block, torch.diag(torch.ones(VOCAB - 1, dtype=torch.float64), -shift), atol=1e-5):
                lost = VOCAB - 1 if shift > 0 else 0
                return (
                    f"off by one: the identity sits one row {'late' if shift > 0 else 'early'} in w_v or w_o, so token a "
                    f"arrives in out slot a {'+' if shift > 0 else '-'} 1 and token {lost} is lost; w_v's value "
                    "coordinates and w_o's columns must be the same ones, in the same order"
                )
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
    runs = ((LAYOUT, "out"), (SHUFFLED, "out"), (LAYOUT, "count"))
    for run, (layout, name) in enumerate(runs):
        slot = layout.slot(name)
        width = slot.stop - slot.start
        unembed = nn.Linear(layout.d_model, width, bias=False)
        with torch.no_grad():
            unembed.weight.zero_()
        what = f"a fresh nn.Linear({layout.d_model}, {width}, bias=False) of zeros and slot={slot} (layout.{name})"
        try:
            _write(write_output_map, unembed, slot, what=what, part=part)
        except ExerciseFailed as err:
            message = str(err).removeprefix(part + ": ")
            if name == "count":
                raise ExerciseFailed(
                    f"{part}: right for layout.out (10 wide), but not for layout.count ({width} wide): {message}. Make the "
                    "identity as wide as the slot, torch.eye(slot.stop - slot.start)"
                ) from None
            if "broadcast" in message or "shape mismatch" in message or "must match" in message:
                raise ExerciseFailed(
                    f"{part}: {message}. The block unembed.weight[:, slot] is exactly (width, width), the slot's own "
                    "columns: is your slice shifted by one, or wider than the slot?"
                ) from None
            raise
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
        if run > 0:
            which = "layout.count" if name == "count" else "the same slot in another order of the slots"
            raise ExerciseFailed(
                f"{part}: right for layout.out in the standard layout, wrong for slot={slot} ({which}): your function "
                "ignores its `slot` argument (a fixed slice such as 21:31 instead of `slot`); write the identity into "
                "unembed.weight[:, slot]"
            )
        raise ExerciseFailed(f"{part}: {_name_output_map(weight, layout, name, slot)}")


def _name_output_map(weight: Tensor, layout: Layout, name: str, slot: slice) -> str:
    width = slot.stop - slot.start
    eye = torch.eye(width, dtype=torch.float64)
    for other in layout.order:
        place = layout.slot(other)
        if other != name and place.stop - place.start == width:
            wrong = torch.zeros_like(weight)
            wrong[:, place] = eye
            if torch.allclose(weight, wrong, atol=1e-6):
                echo = ", so the model would return its input unchanged" if other == "tok" else ""
                return f"it decodes layout.{other}, not the slot it is given (layout.{name}){echo}"
    for shift, words in ((-1, "early"), (1, "late")):
        start = slot.start + shift
        if 0 <= start and start + width <= layout.d_model:
            wrong = torch.zeros_like(weight)
            wrong[:, start : start + width] = eye
            if torch.allclose(weight, wrong, atol=1e-6):
                return (
                    f"the identity starts one feature {words}, at column {start} instead of {slot.start}: logit k reads "
                    f"feature {'k - 1' if shift < 0 else 'k + 1'} of the slot. Write it into unembed.weight[:, slot], "
                    "the slot's own columns"
                )
    block = weight[:, slot]
    outside = [j for j in range(layout.d_model) if not slot.start <= j < slot.stop]
    if float(weight[:, outside].abs().max()) <= 1e-6:
        for roll in (1, -1):
            if torch.allclose(block, eye.roll(roll, dims=0), atol=1e-6):
                return f"off by one: feature k of the slot becomes logit k {'+' if roll > 0 else '-'} 1"
        if torch.allclose(block, -eye, atol=1e-6):
            return "the identity is negated: argmax would pick the smallest feature"
        if torch.allclose(block, eye.flip(0), atol=1e-6):
            return f"the identity is flipped: feature k becomes logit {width - 1} - k"
        if float((block - block.flatten()[0]).abs().max()) <= 1e-6:
            return (
                "every logit reads every feature of the slot (the whole block filled with one number): all logits are "
                "equal, so the argmax cannot choose; logit k must read feature k alone, torch.eye(width)"
            )
        factor = float(block.trace()) / width
        if abs(factor) > 1e-9 and torch.allclose(block, factor * eye, atol=1e-6):
            return f"logit k is {factor:.4g} times feature k; write the identity (factor 1)"
    read = sorted({_slot_of(int(j), layout) for j in torch.nonzero(weight.abs().sum(0) > 1e-6)})
    return (
        f"unembed.weight reads {', '.join(f'layout.{r}' for r in read)}; logit k should be feature k of "
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


def _steps(ff: FeedForward, x: Tensor) -> Tensor:
    """The steps ``h[2k] - h[2k+1]`` of the hidden units (after the ReLU): ``(rows, LENGTH)`` float64."""
    with torch.no_grad():
        hidden = torch.relu(ff.linear1(x.to(ff.linear1.weight.dtype))).double()  # (rows, D_FF)
    return hidden[:, 0::2] - hidden[:, 1::2]


def _expected_steps(counts: Tensor) -> Tensor:
    """Step k is 1 exactly when the count exceeds k: ``(rows, LENGTH)``."""
    return (counts[:, None] > torch.arange(LENGTH)[None, :]).double()


def _frac_grid(layout: Layout, points: int = 4001) -> tuple[Tensor, Tensor]:
    """Residual vectors with only ``frac`` set, on a fine grid from 0.05 to 1.2: ``(points, d)``, and the grid."""
    grid = torch.linspace(0.05, 1.2, points, dtype=torch.float64)
    x = torch.zeros(points, layout.d_model, dtype=torch.float64)
    x[:, layout.frac] = grid
    return x, grid


def _crossing(step: Tensor, grid: Tensor) -> float | None:
    """Where a step crosses 1/2 on the grid (the first crossing), or None."""
    above = step >= 0.5
    change = torch.nonzero(above[1:] != above[:-1]).flatten()
    return None if change.numel() == 0 else float(grid[int(change[0])])


def _name_steps(ff: FeedForward, layout: Layout) -> str:
    """Name what is wrong with ``linear1``'s steps (units 2k and 2k + 1 make step k)."""
    read = _reads(ff.linear1.weight, layout)
    if "frac" not in read:
        return (
            f"the hidden units read {', '.join(f'layout.{r}' for r in sorted(read)) or 'nothing'}: they must read "
            "layout.frac (the weight the selector gave BOS), with weight -SHARPNESS"
        )
    x, grid = _frac_grid(layout)
    with torch.no_grad():
        hidden = torch.relu(ff.linear1(x.to(ff.linear1.weight.dtype))).double()  # (points, D_FF)
    steps = hidden[:, 0::2] - hidden[:, 1::2]  # (points, LENGTH)
    thresholds = table_thresholds().tolist()
    if float(hidden[:, 1::2].abs().max()) <= 1e-9 and float(hidden[:, 0::2].abs().max()) > 0:
        return (
            "one ReLU per threshold: unit 2k alone, relu(u + 1/2), keeps growing as frac falls below the threshold, so "
            "it is no step; subtract a second ReLU, unit 2k + 1 = relu(u - 1/2): their difference rises from 0 to 1 "
            "and stays there"
        )
    w1, b1 = ff.linear1.weight.detach(), ff.linear1.bias.detach()
    same = [torch.equal(w1[2 * k], w1[2 * k + 1]) and bool(b1[2 * k] == b1[2 * k + 1]) for k in range(LENGTH)]
    if any(same) and float(steps.abs().max()) <= 1e-6:
        return (
            "your two ReLUs cancel: units 2k and 2k + 1 have the same weight and bias, so their difference, the step, is 0 "
            "for every frac; unit 2k is relu(u + 1/2) (bias SHARPNESS * threshold + 1/2), unit 2k + 1 relu(u - 1/2) "
            "(bias SHARPNESS * threshold - 1/2)"
        )
    if float(steps.max()) <= 1e-6 and float(steps.min()) < -0.9:
        return (
            "each step is upside down, 0 or -1: units 2k and 2k + 1 are swapped; unit 2k must be relu(u + 1/2) (the "
            "larger bias, + 1/2) and unit 2k + 1 relu(u - 1/2)"
        )
    if float(steps.max()) > 1.01:
        return (
            f"a step rises above 1 (to {float(steps.max()):.3g}): the two ReLUs of a pair must have the same slope, "
            "-SHARPNESS on frac, and biases 1 apart, so that their difference levels off at 1"
        )
    rising = [float(steps[-1, k]) > float(steps[0, k]) for k in range(LENGTH)]  # 1 at large frac: inverted
    if all(rising):
        return (
            "your steps are inverted: step k is 1 when frac is *above* its threshold (the count is at most k) and 0 "
            "below; with u = SHARPNESS (threshold - frac), the weight on frac is -SHARPNESS and the bias "
            "SHARPNESS * threshold +- 1/2"
        )
    crossings = [_crossing(steps[:, k], grid) for k in range(LENGTH)]
    if any(c is None for c in crossings):
        missing = [k for k, c in enumerate(crossings) if c is None]
        return (
            f"step {missing[0]} never switches between 0 and 1 for frac in 0.05..1.2: its bias puts the switch far from "
            f"the threshold {thresholds[missing[0]]:.4g}; the biases are SHARPNESS * threshold_k + 1/2 and - 1/2"
        )
    values = table_values().tolist()

    def near(points: list[float], targets: list[float]) -> bool:
        return all(abs(p - t) <= 4e-3 for p, t in zip(points, targets, strict=True))

    if near(crossings, thresholds[::-1]):
        return (
            "the thresholds are reversed: step k switches at table_thresholds()[4 - k]; table_thresholds() is "
            "decreasing, and step k belongs to thresholds[k], between 1/(k+1) and 1/(k+2) (units 2k and 2k + 1)"
        )
    if near(crossings[:-1], thresholds[1:]) or near(crossings[1:], thresholds[:-1]):
        return (
            "misaligned by one: step k switches at the threshold of step k +- 1; units 2k and 2k + 1 belong to "
            "table_thresholds()[k]"
        )
    if near(crossings, values[1:]) or near(crossings, values[:-1]):
        return (
            "some steps sit on a table value instead of halfway between two: there frac is exactly on the ramp and "
            "the step reads 1/2; the thresholds are table_thresholds(), halfway between neighbouring values"
        )
    widths = []
    for k in range(LENGTH):
        ramp = (steps[:, k] > 0.01) & (steps[:, k] < 0.99)
        widths.append(float(grid[ramp].max() - grid[ramp].min()) if bool(ramp.any()) else 0.0)
    if max(widths) > 0.02:
        return (
            f"the ramps are too gentle (up to {max(widths):.3g} wide in frac): neighbouring table values are only 1/30 "
            "apart, so a step must rise within about 0.01: a slope of SHARPNESS = 100 on frac"
        )
    return (
        f"step k switches at frac = {[round(c, 4) for c in crossings]}; it must switch at the thresholds "
        f"{[round(t, 4) for t in thresholds]} (table_thresholds()), falling from 1 to 0 as frac rises"
    )


def _name_one_hot(ff: FeedForward, layout: Layout) -> str:
    """Name what is wrong with ``linear2`` (reading right steps): count c must land in count slot c, one-hot."""
    count = layout.slot("count")
    x, counts = _table_inputs(layout, (0.0,), junk=False)
    y = _table_output(ff, x)  # (6, d)
    rows = "; ".join(f"c={c}: {[round(v, 2) for v in y[c, count].tolist()]}" for c in range(LENGTH + 1))
    for shift in (1, -1):
        features = count.start + counts + shift
        if bool(((features >= 0) & (features < layout.d_model)).all()):
            moved = torch.zeros_like(y)
            moved[torch.arange(len(counts)), features] = 1.0
            if torch.allclose(y, moved, atol=1e-3):
                edge = count.stop if shift > 0 else count.start - 1
                return (
                    f"one slot too {'far' if shift > 0 else 'early'}: count c lands in count slot c {'+' if shift > 0 else '-'} 1, "
                    f"and count {LENGTH if shift > 0 else 0} in feature {edge} (layout.{_slot_of(edge, layout)}); one-hot c is "
                    f"linear2's row layout.count.start + c"
                )
    outside = [j for j in range(layout.d_model) if not count.start <= j < count.stop]
    stray = y[:, outside].abs().amax(0)
    if float(stray.max()) > 1e-3:
        slots = sorted({_slot_of(outside[int(j)], layout) for j in torch.nonzero(stray > 1e-3)})
        return f"it writes into {', '.join(f'layout.{s}' for s in slots)}; the table's answer goes into layout.count only"
    table = y[:, count]  # (6 counts, 6 slots)
    nonzero = table.abs() > 1e-3
    if int(nonzero.any(0).sum()) == 1 and torch.allclose(table.sum(-1), counts.double(), atol=1e-3):
        return (
            "you wrote the count as a number (the sum of the steps) into one feature: the output map reads a one-hot, "
            "count slot c is 1 and the others 0; one-hot c = step c-1 - step c, so step k goes with -1 into slot k and "
            "+1 into slot k + 1"
        )
    eye = torch.eye(LENGTH + 1, dtype=torch.float64)
    if torch.allclose(table, eye.flip(1), atol=1e-3):
        return f"reversed: count c lands in slot 5 - c; frac = 1/(1+c) is large when the count is small. Your table: {rows}"
    missing = torch.zeros_like(table)
    missing[:, 0] = 1.0
    if torch.allclose(table + missing, eye, atol=1e-3):
        return (
            "count 0 never gets its 1 (and the other counts get a -1 in slot 0): count 0's one-hot is 1 minus step 0, "
            "and that 1 comes from linear2's bias"
        )
    if bool((table < -0.5).any()):
        return (
            "some entries are -1: the signs in linear2 are swapped. Step k (unit 2k minus unit 2k + 1) *leaves* count "
            f"slot k (-1) and *enters* count slot k + 1 (+1). Your table: {rows}"
        )
    clear = table.amax(-1) > 0.9
    shifts = {(int(table[c].argmax()) - c) % (LENGTH + 1) for c in range(LENGTH + 1) if clear[c]}
    if int(clear.sum()) >= LENGTH - 1 and shifts in ({1}, {LENGTH}):
        shift = 1 if shifts == {1} else -1
        return (
            f"misaligned by one: count c lands in count slot c {'+' if shift > 0 else '-'} 1 (the steps' units are "
            f"paired with the wrong rows of linear2). Your table: {rows}"
        )
    return f"for frac = 1/(1+c) it writes count slots {rows}; expected one-hot c (c = 0..5)"


def _name_table(ff: FeedForward, layout: Layout) -> str:
    """The whole table: name the steps (linear1) if they are wrong, else the one-hot (linear2)."""
    x, counts = _table_inputs(layout, (-0.004, 0.0, 0.004), junk=False)
    if torch.allclose(_steps(ff, x), _expected_steps(counts), atol=1e-3):
        return _name_one_hot(ff, layout)
    reference = hand_block(layout).ff
    write_one_hot(reference, layout)
    if torch.allclose(ff.linear2.weight.detach().double(), reference.linear2.weight.detach().double()) and torch.allclose(
        ff.linear2.bias.detach().double(), reference.linear2.bias.detach().double()
    ):
        return _name_steps(ff, layout)
    # another pairing of units: judge the output
    y = _table_output(ff, x)
    expected = _expected_table(layout, counts)
    exact_x, exact_counts = _table_inputs(layout, (0.0,), junk=False)
    if torch.allclose(_table_output(ff, exact_x), _expected_table(layout, exact_counts), atol=1e-3):
        worst = float((y - expected).abs().max())
        return (
            f"exact at frac = 1/(1+c), but 0.004 away from it (the leak of a soft selector) an output moves by {worst:.2g}: "
            "the steps are not flat there"
        )
    named = _name_one_hot(ff, layout)
    if not named.startswith("for frac"):
        return named
    return _name_steps(ff, layout) + f" (the table's output: {named.removeprefix('for frac = 1/(1+c) it writes count slots ')})"


def _fresh_ff(layout: Layout) -> FeedForward:
    return hand_block(layout).ff


def _check_ff_part(ff: FeedForward, layout: Layout, part: str) -> None:
    d = layout.d_model
    _expect_shapes(
        ff, {"linear1.weight": (D_FF, d), "linear1.bias": (D_FF,), "linear2.weight": (d, D_FF), "linear2.bias": (d,)}, part
    )
    if not all(torch.isfinite(p).all() for p in ff.parameters()):
        raise ExerciseFailed(f"{part}: the weights hold NaN or inf")


@exercise("the steps of the count table")
def check_count_steps(write_steps) -> None:
    """Check ``write_steps(ff, layout)``: ``linear1`` only; ``relu(h[2k]) - relu(h[2k+1])`` is 1 exactly when the count
    exceeds k (``frac = 1/(1+c)``, and 0.004 off it)."""
    part = "the steps (ff.linear1)"
    for layout in (LAYOUT, SHUFFLED):
        ff = _fresh_ff(layout)
        label = _layout_label(layout)
        _write(
            write_steps,
            ff,
            layout,
            what=f"a fresh block's ff = FeedForward({layout.d_model}, {D_FF}) of zeros, {label}",
            part=part,
        )
        _check_ff_part(ff, layout, part)
        written = _written(ff)
        if not written:
            raise ExerciseFailed(f"{part}: linear1 is still zero: every hidden unit is relu(0) = 0, so every step is 0")
        if written - {"linear1.weight", "linear1.bias"}:
            raise ExerciseFailed(
                f"{part}: your function also writes linear2; this exercise writes only linear1 (the hidden units), the next "
                "one linear2"
            )
        x, counts = _table_inputs(layout, (-0.004, 0.0, 0.004), junk=False)
        if torch.allclose(_steps(ff, x), _expected_steps(counts), atol=1e-3):
            junk_x, junk_counts = _table_inputs(layout, (-0.004, 0.0, 0.004), junk=True)
            if not torch.allclose(_steps(ff, junk_x), _expected_steps(junk_counts), atol=1e-3):
                read = sorted(_reads(ff.linear1.weight, layout) - {"frac"})
                raise ExerciseFailed(
                    f"{part}: right on clean inputs, but the steps change with {', '.join(f'layout.{r}' for r in read)}: "
                    "linear1 should read layout.frac only"
                )
            continue
        if layout is SHUFFLED:
            raise ExerciseFailed(
                f"{part}: right in the standard layout, wrong when the slots come in another order: your function uses "
                "numbers for the residual's indices; index with layout.frac instead"
            )
        raise ExerciseFailed(f"{part}: {_name_steps(ff, layout)}")


@exercise("the one-hot count")
def check_count_one_hot(write_one_hot) -> None:
    """Check ``write_one_hot(ff, layout)``: on the reference steps in ``linear1``, ``linear2`` (weight and bias) turns them
    into ``count`` one-hot at c."""
    part = "the one-hot (ff.linear2)"
    for layout in (LAYOUT, SHUFFLED):
        ff = _fresh_ff(layout)
        write_steps(ff, layout)
        before = {name: p.detach().clone() for name, p in ff.linear1.named_parameters()}
        label = _layout_label(layout)
        _write(
            write_one_hot,
            ff,
            layout,
            what=f"a block's ff = FeedForward({layout.d_model}, {D_FF}) whose linear1 holds the steps, {label}",
            part=part,
        )
        _check_ff_part(ff, layout, part)
        if any(not torch.equal(p.detach(), before[name]) for name, p in ff.linear1.named_parameters()):
            raise ExerciseFailed(
                f"{part}: your function changes linear1, which already holds the steps (the previous exercise); write "
                "only linear2's weight and bias"
            )
        if not (_written(ff) - {"linear1.weight", "linear1.bias"}):
            raise ExerciseFailed(f"{part}: linear2 is still zero: the layer adds nothing to the residual stream")
        x, counts = _table_inputs(layout, (-0.004, 0.0, 0.004), junk=False)
        if torch.allclose(_table_output(ff, x), _expected_table(layout, counts), atol=1e-3):
            continue
        if layout is SHUFFLED:
            raise ExerciseFailed(
                f"{part}: right in the standard layout, wrong when the slots come in another order: your function uses "
                "numbers for the residual's indices; index with layout.count instead"
            )
        raise ExerciseFailed(f"{part}: {_name_one_hot(ff, layout)}")


@exercise("the feed-forward lookup table")
def check_count_table(write_count_table) -> None:
    """Check ``write_count_table(ff, layout)``: ``frac = 1/(1+c)`` (and 0.004 off it) -> ``count`` one-hot at c."""
    part = "the lookup table (ff.linear1, ff.linear2)"
    for layout in (LAYOUT, SHUFFLED):
        ff = _fresh_ff(layout)
        label = _layout_label(layout)
        _write(
            write_count_table,
            ff,
            layout,
            what=f"a fresh block's ff = FeedForward({layout.d_model}, {D_FF}) of zeros, {label}",
            part=part,
        )
        _check_ff_part(ff, layout, part)
        if not _written(ff):
            raise ExerciseFailed(f"{part}: linear1 and linear2 are still zero: the layer writes nothing")
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
        raise ExerciseFailed(f"{part}: {_name_table(ff, layout)}")
