"""Checks of notebook 16 (a real chat model from its GGUF file): the Q8_0 and Q4_1 dequantizers, llama.cpp's
permutation of the query and key rows, SmolLM2's chat template, the Q4_0 quantizer.

The dequantizers are compared with ``gguf``'s own (``gguf.quants.dequantize``) bit for bit, on blocks made to show the
usual slips: negative codes (a signed byte read unsigned), scales whose two bytes differ (read in the wrong order, or
as bfloat16), minimums far from zero, codes whose low and high nibbles differ. The permutation is compared with
llama.cpp's converter on matrices of several head counts; the chat template with the file's own Jinja template,
rendered as transformers renders it; the quantizer with ggml's (``helpers.chat.quant``, equal to ``gguf``'s byte for
byte), up to the ties that another correct rounding breaks the other way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from helpers.chat import quant
from helpers.chat.chat import DEFAULT_SYSTEM, IM_END, IM_START, render_template
from helpers.chat.chat import chat_prompt as _chat_prompt
from helpers.chat.gguf import gguf_module
from helpers.chat.model import halves_to_pairs as _halves_to_pairs
from helpers.chat.model import pairs_to_halves as _pairs_to_halves
from helpers.checks._core import ExerciseFailed, call_attempt, exercise, expect_close, expect_tensor

call = call_attempt  # code left before the stub's raise is partial work, a named failure, not "not attempted"

__all__ = ["check_dequantize_q8_0", "check_dequantize_q4_1", "check_halves_to_pairs", "check_chat_prompt", "check_quantize_q4_0"]


# ---------------------------------------------------------------- the test blocks


def _q8_0_blocks(n: int = 48) -> Tensor:
    """Q8_0 blocks of weights from 1e-3 to 10 in size, both signs, with the codes -128 and 127 and a zero block."""
    gen = torch.Generator().manual_seed(0)
    scale = 10 ** torch.empty(n, 1).uniform_(-3, 1, generator=gen)  # (n, 1)
    x = torch.randn(n, quant.BLOCK, generator=gen) * scale  # (n, 32)
    x[-1] = 0.0  # a zero block: scale 0
    blocks = quant.quantize_q8_0(x)  # (n, 34)
    blocks[0, 2] = 0x80  # the code -128 (a valid byte, which ggml's quantizer never writes)
    return blocks


def _q4_1_blocks(n: int = 48) -> Tensor:
    """Q4_1 blocks: scales 1e-3..1, minimums of both signs and far from zero, every code 0..15 with distinct nibbles."""
    gen = torch.Generator().manual_seed(1)
    d = (10 ** torch.empty(n, 1).uniform_(-3, 0, generator=gen)).half()  # (n, 1)
    m = (torch.randn(n, 1, generator=gen) * 4).half()  # (n, 1)
    codes = torch.randint(0, 16, (n, quant.BLOCK), generator=gen, dtype=torch.uint8)  # (n, 32)
    codes[0] = torch.arange(16, dtype=torch.uint8).repeat(2)  # every code, low and high nibbles differing
    return torch.cat([d.view(torch.uint8), m.view(torch.uint8), quant.pack_nibbles(codes)], dim=1)  # (n, 20)


def _gguf_dequantize(blocks: Tensor, kind: str) -> Tensor:
    gguf = gguf_module()
    values = gguf.quants.dequantize(blocks.numpy(), gguf.GGMLQuantizationType[kind])
    return torch.from_numpy(np.ascontiguousarray(values)).reshape(-1, quant.BLOCK)


def _f16(blocks: Tensor, offset: int, dtype: torch.dtype = torch.float16, swap: bool = False) -> Tensor:
    pair = blocks[:, offset : offset + 2]
    if swap:
        pair = pair.flip(1)
    return pair.contiguous().view(dtype).float()  # (n, 1)


_SHAPE_HINTS = {
    "Q8_0": {
        30: "the scale was read as 4 bytes (float32?): it is float16, the first 2 bytes, then 32 one-byte codes",
        34: "every byte became a code: the first 2 bytes are the float16 scale, the 32 after them the codes",
        33: "the scale took 1 byte: it is float16, 2 bytes",
        31: "the codes started at byte 3: the scale is bytes 0-1, and the 32 codes are bytes 2-33, blocks[:, 2:]",
        32: None,
        16: "each byte was read as two 4-bit codes: Q8_0's codes are whole signed bytes (int8), one per weight",
        64: "each byte was read as two 4-bit codes: Q8_0's codes are whole signed bytes (int8), one per weight",
    },
    "Q4_1": {
        24: "the scale and the minimum were read as 4 bytes each (float32?): they are float16, 2 bytes each",
        16: "each byte gave one code: a byte holds two 4-bit codes, the low nibble and the high nibble",
        40: "all 20 bytes were unpacked into nibbles: the first 4 bytes are the float16 scale and minimum, only the "
        "16 after them hold codes",
        36: "the minimum's 2 bytes were unpacked as codes: the scale and the minimum (2 bytes each) come first",
        20: "each byte gave one code: a byte holds two 4-bit codes, and the first 4 bytes are the scale and minimum",
        18: "the codes were read from byte 2 on, and the minimum's bytes with them: the scale and the minimum are bytes 0-3, "
        "the codes bytes 4-19",
        32: None,
    },
}


_NONFINITE = {
    "Q8_0": "some weights are infinite or NaN: the scale is a float16 (.view(torch.float16) on bytes 0-1); read as "
    "another type, some byte pairs mean inf or NaN",
    "Q4_1": "some weights are infinite or NaN: the scale and the minimum are float16 (.view(torch.float16) on bytes "
    "0-1 and 2-3); read as another type, some byte pairs mean inf or NaN",
}


def _codes_right_scale_wrong(actual: Tensor, codes: Tensor, expected: Tensor, with_minimum: bool) -> bool:
    """True when every block of ``actual`` is ``a * codes (+ b)`` for numbers a (and b) of its own, though not the file's:
    the codes are read right, the scale (or the minimum) is not."""
    a = actual.detach().cpu().double()
    q = codes.double()
    if a.shape != q.shape or not bool(torch.isfinite(a).all()):
        return False
    x = torch.stack([q, torch.ones_like(q)], dim=-1) if with_minimum else q[..., None]  # (n, 32, 1 or 2)
    fit = torch.linalg.lstsq(x, a[..., None]).solution  # (n, 1 or 2, 1)
    rebuilt = (x @ fit)[..., 0]  # (n, 32)
    scale = a.abs().amax(1, keepdim=True).clamp_min(1e-30)  # (n, 1)
    return bool(((rebuilt - a).abs() <= 1e-5 * scale + 1e-12).all()) and not torch.allclose(a, expected.double())


def _expect_dequantized(
    answer: object, expected: Tensor, blocks: Tensor, kind: str, mistakes: dict[str, Tensor], codes: Tensor
) -> None:
    name = f"your {kind} weights"
    actual = expect_tensor(answer, name)
    n = blocks.shape[0]
    if actual.dim() == 1 and actual.numel() == n * quant.BLOCK:  # the weights in order, not cut into blocks: fine
        actual = actual.reshape(n, quant.BLOCK)
    if actual.dim() == 2 and actual.shape[0] == n and _SHAPE_HINTS[kind].get(actual.shape[1]):
        raise ExerciseFailed(f"{name} have shape {tuple(actual.shape)} for {n} blocks: {_SHAPE_HINTS[kind][actual.shape[1]]}")
    if tuple(actual.shape) == (quant.BLOCK, n):
        raise ExerciseFailed(
            f"{name} have shape {tuple(actual.shape)}, the blocks along the columns: return one block per row, "
            f"({n}, 32) (no .T: the scale of each block broadcasts along its row, d of shape (n, 1))"
        )
    if actual.numel() == n * quant.BLOCK and tuple(actual.shape) != (n, quant.BLOCK):
        raise ExerciseFailed(
            f"{name} have shape {tuple(actual.shape)}: return ({n}, 32), one block of 32 weights per row "
            "(.reshape(n, 32) or drop the extra axis)"
        )
    if not actual.is_floating_point():
        raise ExerciseFailed(
            f"{name} are {str(actual.dtype).replace('torch.', '')}: the weights are floats, the scale times the codes; "
            "convert the codes with .float() before multiplying"
        )
    if actual.dtype in (torch.float16, torch.bfloat16):
        raise ExerciseFailed(
            f"{name} are {str(actual.dtype).replace('torch.', '')}: the scale is stored in float16, but the weights are "
            "computed in float32 (`.float()` on the scale before multiplying): float16 arithmetic rounds each product"
        )
    try:
        expect_close(actual, expected, name, atol=1e-6, rtol=1e-5, mistakes=mistakes, nonfinite_hint=_NONFINITE[kind])
    except ExerciseFailed as err:
        if "differs from the reference" in str(err) and _codes_right_scale_wrong(actual, codes, expected, kind == "Q4_1"):
            what = "scale (and minimum)" if kind == "Q4_1" else "scale"
            where = "bytes 0-1 (d) and 2-3 (m)" if kind == "Q4_1" else "bytes 0-1"
            raise ExerciseFailed(
                f"{name} follow the codes, but each block's {what} is wrong: the codes are read right; the {what} "
                f"is {where} read as float16, blocks[:, 0:2].contiguous().view(torch.float16).float() (not a byte, "
                "an integer or another float type)"
            ) from None
        raise
    exact = actual.detach().cpu().double()
    if not torch.equal(exact, expected.double()):
        largest = (exact - expected.double()).abs().max().item()
        raise ExerciseFailed(
            f"{name} agree with gguf's only to rounding (largest difference {largest:.2g}), not bit for bit: every "
            "weight is one float32 product (and, in Q4_1, one sum) of exactly representable numbers; convert the float16 "
            "scale to float32 first, and do not compute in float16 or go through a division"
        )


# ---------------------------------------------------------------- Exercise: Q8_0


@exercise("dequantize Q8_0")
def check_dequantize_q8_0(dequantize_q8_0) -> None:
    """``dequantize_q8_0(blocks)``: uint8 ``(n, 34)`` -> float32 ``(n, 32)``, equal to gguf's bit for bit."""
    blocks = _q8_0_blocks()
    expected = _gguf_dequantize(blocks, "Q8_0")
    answer = call(dequantize_q8_0, blocks.clone(), what=f"Q8_0 blocks, a uint8 tensor of shape {tuple(blocks.shape)}")
    d, codes = _f16(blocks, 0), blocks[:, 2:].contiguous().view(torch.int8).float()  # (n, 1), (n, 32)
    mistakes = {
        "the codes were read as unsigned bytes (uint8, 0..255): they are signed, int8, -128..127; view them with "
        ".view(torch.int8) before .float()": d * blocks[:, 2:].float(),
        "the scale was read as bfloat16: its 2 bytes are a float16 (IEEE half precision), .view(torch.float16)": _f16(
            blocks, 0, torch.bfloat16
        )
        * codes,
        "the scale's two bytes were read in the wrong order: GGUF is little-endian, and .view(torch.float16) on the "
        "two bytes as they are reads it right": _f16(blocks, 0, swap=True) * codes,
        "the scale is missing: each weight is the scale times its code, d * q": codes,
        "the codes were divided by the scale: each weight is the scale times its code, d * q": codes / d,
        "the scale was taken from the last 2 bytes and the codes from the first 32: the scale comes first, bytes 0-1, "
        "then the 32 codes": _f16(blocks, 32) * blocks[:, :32].contiguous().view(torch.int8).float(),
        "the codes were read as unsigned bytes minus 128 (offset binary): they are two's-complement int8, so the byte "
        "0xff is -1, not 127; .view(torch.int8)": d * (blocks[:, 2:].float() - 128),
        "the codes lost their sign (abs?): a code is a signed byte, -128..127, .view(torch.int8)": d * codes.abs(),
        "the weights were computed in float16 and converted to float32 afterwards: float16 arithmetic rounds each "
        "product; convert the scale and the codes with .float() first": (
            blocks[:, :2].contiguous().view(torch.float16) * blocks[:, 2:].contiguous().view(torch.int8).half()
        ).float(),
    }
    _expect_dequantized(answer, expected, blocks, "Q8_0", mistakes, codes)


# ---------------------------------------------------------------- Exercise: Q4_1


@exercise("dequantize Q4_1")
def check_dequantize_q4_1(dequantize_q4_1) -> None:
    """``dequantize_q4_1(blocks)``: uint8 ``(n, 20)`` -> float32 ``(n, 32)``, equal to gguf's bit for bit."""
    blocks = _q4_1_blocks()
    expected = _gguf_dequantize(blocks, "Q4_1")
    answer = call(dequantize_q4_1, blocks.clone(), what=f"Q4_1 blocks, a uint8 tensor of shape {tuple(blocks.shape)}")
    d, m = _f16(blocks, 0), _f16(blocks, 2)  # (n, 1) each
    packed = blocks[:, 4:]  # (n, 16)
    low, high = (packed & 0x0F).float(), (packed >> 4).float()  # (n, 16) each
    q = torch.cat([low, high], dim=1)  # (n, 32)
    mistakes = {
        "the scale and the minimum are swapped: the first float16 is the scale d, the second the minimum m, and each "
        "weight is d * q + m": m * q + d,
        "the nibbles are unpacked in the wrong order: byte j holds code j in its low nibble and code j + 16 in its high "
        "nibble, so the 16 low nibbles are the first half of the block and the 16 high ones the second half "
        "(torch.cat([low, high], dim=1)), not neighbours": d * torch.stack([low, high], dim=-1).flatten(1) + m,
        "the high nibbles come first: the low nibbles (byte & 0x0F) are codes 0-15, the high ones (byte >> 4) codes 16-31": d
        * torch.cat([high, low], dim=1)
        + m,
        "the high and low nibbles are interleaved with the high one first: the 16 low nibbles are codes 0-15, the 16 "
        "high ones codes 16-31": d * torch.stack([high, low], dim=-1).flatten(1) + m,
        "the minimum is subtracted: each weight is d * q + m (m is the block's smallest weight, usually negative)": d * q - m,
        "the codes are centred (q - 8), as in Q4_0: Q4_1's codes 0..15 count up from the minimum, d * q + m": d * (q - 8) + m,
        "the minimum is missing: each weight is d * q + m": d * q,
        "the high nibble was not shifted down: byte >> 4 (or (byte >> 4) & 0x0F) gives codes 0..15, byte & 0xF0 gives "
        "16 times them": d * torch.cat([low, (packed & 0xF0).float()], dim=1) + m,
        "the scale and minimum were read as bfloat16: they are float16 (IEEE half precision), .view(torch.float16)": _f16(
            blocks, 0, torch.bfloat16
        )
        * q
        + _f16(blocks, 2, torch.bfloat16),
        "the two bytes of the scale and of the minimum were read in the wrong order: GGUF is little-endian, and "
        ".view(torch.float16) on the two bytes as they are reads it right": _f16(blocks, 0, swap=True) * q
        + _f16(blocks, 2, swap=True),
        "the minimum is added before scaling: each weight is d * q + m, not d * (q + m)": d * (q + m),
        "the packed bytes were read as signed (int8), so byte >> 4 keeps the sign bit and a high nibble of 8..15 comes "
        "out negative: shift the uint8 bytes as they are (blocks[:, 4:] >> 4), or mask, (byte >> 4) & 0x0F": d
        * torch.cat([(packed.view(torch.int8) & 0x0F).float(), (packed.view(torch.int8) >> 4).float()], dim=1)
        + m,
        "the high nibble was divided by 16 as a float, keeping a fraction (byte / 16): drop the low nibble with an "
        "integer shift or division, byte >> 4 or byte // 16": d * torch.cat([low, packed.float() / 16], dim=1) + m,
        "the low nibbles were used twice: codes 16-31 are the high nibbles, byte >> 4": d * torch.cat([low, low], dim=1) + m,
        "the high nibbles were used twice: codes 0-15 are the low nibbles, byte & 0x0F": d * torch.cat([high, high], dim=1) + m,
        "the codes were read from byte 2 on (the minimum's bytes taken as codes): the codes are bytes 4-19, after the "
        "scale (0-1) and the minimum (2-3)": d
        * torch.cat([blocks[:, 2:] & 0x0F, blocks[:, 2:] >> 4], dim=1)[:, : quant.BLOCK].float()
        + m,
    }
    _expect_dequantized(answer, expected, blocks, "Q4_1", mistakes, q)


# ---------------------------------------------------------------- Exercise: the rows of Q and K


def _rows_case(heads: int, head_dim: int, columns: int, seed: int) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(heads * head_dim, columns, dtype=torch.float64, generator=gen)


@exercise("the rows of Q and K")
def check_halves_to_pairs(halves_to_pairs) -> None:
    """``halves_to_pairs(w, heads)``: llama.cpp's converter's permutation of the query or key rows, head by head."""
    for heads, head_dim, columns in ((3, 8, 5), (9, 4, 3), (1, 6, 6), (2, 12, 12)):
        w = _rows_case(heads, head_dim, columns, seed=heads * 100 + head_dim)
        expected = _halves_to_pairs(w, heads)
        answer = call(halves_to_pairs, w.clone(), heads, what=f"a ({heads} heads x {head_dim}, {columns}) matrix, heads={heads}")
        name = f"your permutation of a ({heads * head_dim}, {columns}) matrix of {heads} heads of {head_dim} rows"
        actual = expect_tensor(answer, name)
        if actual.dtype != w.dtype:
            raise ExerciseFailed(
                f"{name} is {str(actual.dtype).replace('torch.', '')}, the matrix {str(w.dtype).replace('torch.', '')}: a "
                "permutation only moves rows, so return the same dtype (no .float() or torch.tensor(...) on the way)"
            )
        if actual.dim() == 4 and actual.numel() == w.numel():
            raise ExerciseFailed(
                f"{name} has shape {tuple(actual.shape)}: after regrouping the rows, reshape back to w.shape, {tuple(w.shape)}"
            )
        if actual.shape == w.shape and torch.equal(actual.detach().cpu(), w):
            raise ExerciseFailed(
                f"{name} returns the rows unchanged: inside each head, rows 0 .. d/2 - 1 and d/2 .. d - 1 (the halves "
                "that rotate together in transformers' RoPE) must become neighbours, 0, d/2, 1, d/2 + 1, ..."
            )
        halves = w.reshape(heads, 2, head_dim // 2, columns)  # (heads, 2, d/2, columns)
        whole = w.reshape(1, 2, -1, columns).transpose(1, 2).reshape(w.shape) if heads > 1 else None
        fixed = {
            k: w.reshape(k, 2, -1, columns).transpose(1, 2).reshape(w.shape)
            for k in (2, 3, 9)
            if k != heads and w.shape[0] % (2 * k) == 0
        }
        mistakes = {
            "this is the inverse permutation (what transformers applies when it reads the file): here the halves of "
            "each head are interleaved, w.reshape(heads, 2, d // 2, ...).transpose(1, 2)": _pairs_to_halves(w, heads)
            if head_dim > 4
            else None,
            "the two halves are interleaved in the wrong order (d/2, 0, d/2 + 1, 1, ...): row 0 of the head stays "
            "first, then its partner d/2": halves.flip(1).transpose(1, 2).reshape(w.shape),
            "the halves of each head are swapped instead of interleaved: row i and row i + d/2 become neighbours, "
            "0, d/2, 1, d/2 + 1, ...": halves.flip(1).reshape(w.shape),
            "the whole matrix was permuted as one head: the permutation works head by head, "
            "w.reshape(heads, 2, d // 2, ...) with d = rows // heads": whole,
            "the heads were mixed: the rows of different heads became neighbours; keep the head axis first, "
            "(heads, d // 2, 2, columns), so that each head's rows stay together": halves.permute(2, 0, 1, 3).reshape(w.shape)
            if heads > 1
            else None,
        }
        for k, wrong in fixed.items():
            mistakes[
                f"the rows were split into {k} head{'s' if k > 1 else ''}, not `heads` = {heads}: use the heads "
                "argument (the keys have fewer heads than the queries)"
            ] = wrong
        if heads * head_dim == columns:
            mistakes["the columns were permuted instead of the rows: each row is one output feature of the projection"] = (
                _halves_to_pairs(w.T, heads).T
            )
        expect_close(actual, expected, name, atol=0.0, rtol=0.0, mistakes=mistakes)


# ---------------------------------------------------------------- Exercise: the chat template

_CONVERSATIONS: tuple[tuple[str, list[dict[str, str]], bool], ...] = (
    ("one question", [{"role": "user", "content": "What is 2 + 2?"}], True),
    (
        "a conversation with its own system message",
        [{"role": "system", "content": "Answer in French."}, {"role": "user", "content": "Hello!"}],
        True,
    ),
    (
        "three turns",
        [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another?"},
        ],
        True,
    ),
    ("add_generation_prompt=False", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}], False),
    (
        "a message with spaces and newlines around its content",
        [{"role": "user", "content": " Fix this:\ndef f(x):\n    return x\n"}],
        True,
    ),
)


def _template_variant(
    default_system: bool | str = True,
    always_system: bool = False,
    generation: str | None = "assistant\n",
    always_generation: bool = False,
    end: str = IM_END,
    after_end: str = "\n",
    after_role: str = "\n",
    role: Callable[[str], str] = lambda r: r,
) -> Callable[[Sequence[dict[str, str]], bool], str]:
    """SmolLM2's template with one detail changed: the wrong answers the check names."""

    def render(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        text = ""
        system = DEFAULT_SYSTEM if default_system is True else default_system
        if system and messages and (always_system or messages[0]["role"] != "system"):
            text += f"{IM_START}{role('system')}{after_role}{system}{end}{after_end}"
        for m in messages:
            text += f"{IM_START}{role(m['role'])}{after_role}{m['content']}{end}{after_end}"
        if generation is not None and (add_generation_prompt or always_generation):
            text += f"{IM_START}{generation}"
        return text

    return render


_TEMPLATE_MISTAKES: dict[str, Callable] = {
    "the default system message is missing: when the conversation does not start with a system message, SmolLM2's "
    f"template puts one first, {IM_START}system\\n{DEFAULT_SYSTEM}{IM_END}\\n": _template_variant(default_system=False),
    "the default system message is added even when the conversation has its own: it comes first only when the first "
    "message is not a system message": _template_variant(always_system=True),
    "the assistant's opening is missing: with add_generation_prompt=True the prompt ends with "
    f"{IM_START}assistant\\n, so that the model writes the assistant's turn": _template_variant(generation=None),
    "the assistant's opening is added even with add_generation_prompt=False: add it only when asked": _template_variant(
        always_generation=True
    ),
    f"the assistant's opening lacks its newline: it is {IM_START}assistant\\n, like every role line": _template_variant(
        generation="assistant"
    ),
    "each message ends with <|endoftext|>: ChatML ends a message with <|im_end|> (<|endoftext|> ends a document)": (
        _template_variant(end="<|endoftext|>")
    ),
    f"a newline is missing after {IM_END}: each message is {IM_START}role\\ncontent{IM_END}\\n": _template_variant(after_end=""),
    f"the role is not followed by a newline: each message is {IM_START}role\\ncontent{IM_END}\\n": _template_variant(
        after_role=""
    ),
    "the role is followed by a colon: each message is <|im_start|>role\\ncontent<|im_end|>\\n, the role alone on its "
    "line": _template_variant(after_role=":\n"),
    "the roles are capitalised: they are written as the messages give them, lower case (system, user, assistant)": (
        _template_variant(role=str.capitalize)
    ),
    "every message is written with the role user: write each message's own role, m['role']": _template_variant(
        role=lambda r: r if r == "system" else "user"
    ),
    f"the default system message is not SmolLM2's: it is exactly {DEFAULT_SYSTEM!r}": _template_variant(
        default_system="You are a helpful assistant."
    ),
}


def _reference(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    return _chat_prompt(messages, add_generation_prompt)


def _default_twice(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    first = f"{IM_START}system\n{DEFAULT_SYSTEM}{IM_END}\n" if messages and messages[0]["role"] != "system" else ""
    return first + _reference(messages, add_generation_prompt)


def _system_last(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    if not messages or messages[0]["role"] == "system":
        return _reference(messages, add_generation_prompt)
    text = _reference([{"role": "system", "content": ""}, *messages], False).split(f"{IM_END}\n", 1)[1]
    return text + f"{IM_START}system\n{DEFAULT_SYSTEM}{IM_END}\n" + (f"{IM_START}assistant\n" if add_generation_prompt else "")


def _stripped(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    return _reference([{"role": m["role"], "content": m["content"].strip()} for m in messages], add_generation_prompt)


def _joined(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    text = _reference(messages, False).removesuffix("\n")
    return text + (f"\n{IM_START}assistant\n" if add_generation_prompt else "")


def _renamed(messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
    names = {"user": "human", "assistant": "bot"}
    text = _reference([{"role": names.get(m["role"], m["role"]), "content": m["content"]} for m in messages], False)
    return text + (f"{IM_START}bot\n" if add_generation_prompt else "")


_MORE_TEMPLATE_MISTAKES: dict[str, Callable] = {
    "the default system message appears twice: put it in once, before the messages, and only when the first message "
    "is not a system message": _default_twice,
    "the default system message comes last: it comes first, before the conversation's messages": _system_last,
    "the messages' content was changed (stripped of its spaces and newlines?): write each content exactly as given": (_stripped),
    'the last message lacks its newline: every message, the last one too, ends with <|im_end|>\\n (a "\\n".join '
    "puts newlines only between them)": _joined,
    f"the messages are separated by a blank line: each message is {IM_START}role\\ncontent{IM_END}\\n, and the next "
    f"starts right after it": _template_variant(after_end="\n\n"),
    f"there is a space after {IM_START}: the role follows it directly, {IM_START}user": _template_variant(
        role=lambda r: " " + r, generation=" assistant\n"
    ),
    "the roles were renamed (human, bot): write each message's role as it is given, and assistant for the generation "
    "prompt": _renamed,
    f"the assistant's opening is {IM_START}user\\n: the model writes the assistant's turn, {IM_START}assistant\\n": (
        _template_variant(generation="user\n")
    ),
    f"the assistant's turn is closed right away ({IM_START}assistant\\n{IM_END}): the prompt ends open, "
    f"{IM_START}assistant\\n, so that the model writes the turn and closes it itself": _template_variant(
        generation=f"assistant\n{IM_END}\n"
    ),
    "only the last message was written: the prompt holds the whole conversation, every message in order": lambda m, g=True: (
        _reference(m[-1:], g)
    ),
    "the prompt ends with <|endoftext|>: nothing follows the assistant's opening (or, without it, the last message's "
    "newline)": lambda m, g=True: _reference(m, g) + "<|endoftext|>",
    "the prompt starts with <|endoftext|>: SmolLM2's template starts with the first message, no start-of-text token": (
        lambda m, g=True: "<|endoftext|>" + _reference(m, g)
    ),
}


def _first_difference(got: str, want: str) -> str:
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    start = max(0, i - 30)
    return f"they first differ at character {i}: you wrote {got[start : i + 30]!r}, expected {want[start : i + 30]!r}"


@exercise("the chat template")
def check_chat_prompt(chat_prompt) -> None:
    """``chat_prompt(messages, add_generation_prompt=True) -> str``: the file's ChatML template, written in Python."""
    try:
        from helpers.chat.gguf import open_smollm2

        template = open_smollm2().chat_template
    except Exception:  # the file is not installed: the course's own rendering stands in for it
        template = None
    answers, expected = [], []
    for label, messages, generation in _CONVERSATIONS:
        given = [dict(m) for m in messages]
        answer = call(chat_prompt, given, generation, what=f"{label} ({len(messages)} messages)")
        if given != [dict(m) for m in messages]:
            raise ExerciseFailed(
                "chat_prompt changed the list of messages it was given (insert, append or an edited dict): the caller's "
                "conversation would grow a system message; build the text, or work on a copy, list(messages)"
            )
        if not isinstance(answer, str):
            extra = " (token ids? return the text; the tokenizer encodes it afterwards)" if isinstance(answer, list) else ""
            raise ExerciseFailed(f"chat_prompt returned {type(answer).__name__}{extra}: return the prompt as one str")
        answers.append(answer)
        want = render_template(template, messages, generation) if template else _chat_prompt(messages, generation)
        expected.append(want)
    if answers == expected:
        return
    for message, variant in {**_TEMPLATE_MISTAKES, **_MORE_TEMPLATE_MISTAKES}.items():
        if answers == [variant(messages, generation) for _, messages, generation in _CONVERSATIONS]:
            raise ExerciseFailed(message)
    k = next(i for i, (a, b) in enumerate(zip(answers, expected, strict=True)) if a != b)
    label = _CONVERSATIONS[k][0]
    raise ExerciseFailed(
        f"for {label} your prompt differs from the file's template: {_first_difference(answers[k], expected[k])}"
    )


# ---------------------------------------------------------------- Exercise: the Q4_0 quantizer


def _q4_0_inputs() -> Tensor:
    """Blocks whose weight of largest magnitude is positive (even rows) or negative (odd rows), two with a weight on the
    other side nearly as large (code 16 unless clamped), and a block of zeros."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(64, quant.BLOCK, generator=gen) * 10 ** torch.empty(64, 1).uniform_(-2, 0, generator=gen)  # (64, 32)
    x[::2, 5] = x[::2].abs().amax(1) * 1.5
    x[1::2, 7] = -x[1::2].abs().amax(1) * 1.5
    x[2:4, 9] = -0.99 * x[2:4].gather(1, x[2:4].abs().argmax(1, keepdim=True))[:, 0]  # code 16 unless clamped
    x[-1] = 0.0  # scale 0: ggml gives every weight the code 8
    return x


def _codes(answer: object, n: int) -> Tensor:
    q = expect_tensor(answer, "your codes q").detach().cpu()
    if q.shape != (n, quant.BLOCK):
        if q.numel() == n * quant.BLOCK // 2:
            raise ExerciseFailed(
                f"your codes have shape {tuple(q.shape)}: return one code per weight, (n, 32), before packing two to a byte"
            )
        raise ExerciseFailed(f"your codes have shape {tuple(q.shape)}, expected ({n}, 32): one code per weight")
    if q.is_floating_point():
        if not bool(torch.isfinite(q).all()):
            zero_block_only = bool(torch.isfinite(q[:-1]).all())
            raise ExerciseFailed(
                "the block of zeros got NaN codes: its scale is 0, and x / d is 0 / 0; ggml multiplies by 1 / d taken as 0 "
                "when d is 0 (torch.where), so every weight of such a block gets the code 8"
                if zero_block_only
                else "some codes are NaN or infinite: divide by the scale only where it is not 0"
            )
        if not torch.equal(q, q.round()):
            raise ExerciseFailed("your codes are not whole numbers: round each to an integer (torch.trunc(x / d + 8.5))")
    return q.long()


@exercise("a Q4_0 quantizer")
def check_quantize_q4_0(quantize_q4_0) -> None:
    """``quantize_q4_0(x)``: float32 ``(n, 32)`` -> the scale ``d`` ``(n, 1)`` and the codes ``q`` ``(n, 32)`` in 0..15, as
    ggml computes them, up to ties (a code that another correct rounding puts one step away)."""
    x = _q4_0_inputs()
    n = x.shape[0]
    answer = call(quantize_q4_0, x.clone(), what=f"weights of shape {tuple(x.shape)}")
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise ExerciseFailed(f"quantize_q4_0 should return two tensors, (d, q), got {type(answer).__name__}")
    d_answer, q_answer = answer
    d_tensor = expect_tensor(d_answer, "your scale d")
    if d_tensor.numel() == n * quant.BLOCK and isinstance(q_answer, Tensor) and q_answer.numel() == n:
        raise ExerciseFailed("quantize_q4_0 returned (q, d): return the scale first, then the codes, `return d, q`")
    if d_tensor.numel() != n:
        raise ExerciseFailed(f"your scale d has {d_tensor.numel()} values for {n} blocks: one scale per block, shape (n, 1)")
    if tuple(d_tensor.shape) != (n, 1):
        raise ExerciseFailed(
            f"your scale d has shape {tuple(d_tensor.shape)}: keep it a column, ({n}, 1) (keepdim=True), so that d * (q - 8) "
            "multiplies each block's 32 codes by that block's scale"
        )
    d = d_tensor.detach().cpu().double().reshape(-1)
    d_ref, q_ref = quant.quantize_q4_0_codes(x)  # (n, 1), (n, 32)
    ref = d_ref.double().reshape(-1)
    amax = x.abs().amax(1).double()
    scale_mistakes = {
        "the scale is positive in every block, max|x| / 8: divide the weight of largest magnitude with its sign by "
        "-8, so that it gets code 0 and the 16 codes reach it on its own side": amax / 8,
        "the scale is negative in every block, -max|x| / 8: divide the weight of largest magnitude with its sign by -8 "
        "(a block whose extreme weight is negative gets a positive scale)": -amax / 8,
        "the scale is the smallest weight divided by -8, not the weight of largest magnitude: take the weight whose |x| "
        "is largest, with its sign (x.gather(1, x.abs().argmax(1, keepdim=True)))": (x.amin(1) / -8).double(),
        "the scale is divided by -7: Q4_0's codes stand for -8..7, and the weight of largest magnitude gets -8 (code 0), "
        "so d = m / -8": ref * 8 / 7,
        "the scale is divided by -15 (or 15): the codes stand for -8..7 around zero, so the weight of largest magnitude "
        "is -8 steps, d = m / -8": ref * 8 / 15,
        "the scale is max|x| / 7, a symmetric -7..7: Q4_0 divides the weight of largest magnitude, with its sign, by -8, "
        "which uses all 16 codes": amax / 7,
        "the scale is divided by 8, not by -8: the weight of largest magnitude must get code 0 (x / d + 8.5 = 0.5), so "
        "d = m / -8": -ref,
        "this scale is Q4_1's, (max - min) / 15: Q4_0 has no minimum; d = m / -8 with m the weight of largest magnitude": (
            (x.amax(1) - x.amin(1)) / 15
        ).double(),
        "the scale is the inverse, -8 / m: d = m / -8, and the codes are x / d": -8 / torch.where(ref == 0, 1, ref * -8),
        "the scale is the largest weight, not the one of largest magnitude: take the weight whose |x| is largest, with "
        "its sign (x.gather(1, x.abs().argmax(1, keepdim=True)))": (x.amax(1) / -8).double(),
    }
    close = torch.isclose(d, ref, rtol=1e-6, atol=0) | (d == ref.float().half().double())
    if not bool(close.all()):
        nonzero = ref != 0
        for message, wrong in scale_mistakes.items():
            if torch.allclose(d[nonzero], wrong[nonzero], rtol=1e-5, atol=1e-12):
                raise ExerciseFailed(message)
        k = int((~close).nonzero()[0])
        raise ExerciseFailed(
            f"your scale of block {k} is {d[k].item():.6g}, expected {ref[k].item():.6g}: d = m / -8, where m is the block's "
            "weight of largest magnitude with its sign" + (" (a block of zeros has the scale 0)" if ref[k] == 0 else "")
        )
    q_tensor = expect_tensor(q_answer, "your codes q")
    if tuple(q_tensor.shape) == (quant.BLOCK, n):
        raise ExerciseFailed(f"your codes have shape {tuple(q_tensor.shape)}: return one block per row, ({n}, 32), no .T")
    q = _codes(q_answer, n)
    inverse = torch.where(ref == 0, 0, 1 / torch.where(ref == 0, 1, ref))[:, None]  # (n, 1): 1 / d, 0 for d = 0
    scaled = x.double() * inverse + 8.5  # (n, 32)
    near_tie = (scaled - scaled.round()).abs() < 1e-3  # another correct rounding may land one code away

    near_step = (x.double() * inverse - (x.double() * inverse).round()).abs() < 1e-3  # where ceil and floor may flip

    def same(a: Tensor, b: Tensor, rows: slice = slice(None), loose: bool = False) -> bool:
        """Equal codes in ``rows``, up to a step where the weight sits on a tie (or, ``loose``, on a level)."""
        diff = (a[rows] - b[rows]).abs()
        free = near_tie[rows] | near_step[rows] if loose else near_tie[rows]
        return not bool(((diff > 1) | ((diff == 1) & ~free)).any())

    if same(q, q_ref.long()):
        return
    if int(q.max()) > 15:
        raise ExerciseFailed(
            f"a code is {int(q.max())}: 4 bits hold 0..15; clamp the codes (the largest positive weight can reach "
            "x / d + 8.5 = 16.5)"
        )
    if int(q.min()) < 0:
        raise ExerciseFailed(
            f"a code is {int(q.min())}: a 4-bit code is 0..15, so store the rounded x / d plus 8 (trunc(x / d + 8.5))"
        )
    if same(q, q_ref.long(), slice(-1)):
        raise ExerciseFailed(
            "the block of zeros got the codes "
            f"{sorted(set(q[-1].tolist()))}: its scale is 0, and x / d is 0 / 0 (NaN); ggml multiplies by 1 / d taken as 0 "
            "when d is 0, so every weight of such a block gets the code 8"
        )
    code_mistakes = {
        "the offset 8 is missing: a code stores the rounded x / d plus 8, so that -8..7 becomes 0..15, trunc(x / d + 8.5)": (
            torch.round(x.double() * inverse).clamp(0, 15).long()
        ),
        "the offset 8 was subtracted: a code stores the rounded x / d plus 8, trunc(x / d + 8.5), so that -8..7 becomes "
        "0..15": torch.trunc(x.double() * inverse - 7.5).clamp(0, 15).long(),
        "the codes are rounded up, one step too high for most weights (ceil(x / d) + 8, or round(x / d + 8.5), which "
        "rounds twice): the nearest code is ggml's trunc(x / d + 8.5), or round(x / d) + 8": (
            torch.ceil(x.double() * inverse) + 8
        )
        .clamp(0, 15)
        .long(),
        "the codes are truncated without rounding (trunc(x / d + 8), or floor(x / d) + 8): add 8.5, not 8, so that "
        "truncating rounds to the nearest code": torch.trunc(x.double() * inverse + 8).clamp(0, 15).long(),
        "the codes are rounded from x * d, not x / d: the scale d is the size of one step, so the code counts steps, "
        "x / d": torch.trunc(x.double() * ref[:, None] + 8.5).clamp(0, 15).long(),
    }
    for message, wrong in code_mistakes.items():
        if same(q, wrong, slice(-1), loose=True):
            raise ExerciseFailed(message)
    bad = ((q - q_ref.long()).abs() > 1) | (((q - q_ref.long()).abs() == 1) & ~near_tie)
    k, j = (int(i) for i in bad.nonzero()[0])
    raise ExerciseFailed(
        f"{int(bad.sum())} of {q.numel()} codes differ from ggml's; e.g. block {k}, weight {j} ({x[k, j].item():.6g}, "
        f"scale {ref[k].item():.6g}): you gave {int(q[k, j])}, expected {int(q_ref[k, j])} = trunc(x / d + 8.5) clamped to 0..15"
    )
