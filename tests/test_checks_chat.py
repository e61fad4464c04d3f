"""The checks of notebook 16 pass the reference and other natural answers, spot the stub and name the typical mistakes
(the dequantizers, the Q/K row permutation, the chat template, the Q4_0 quantizer), each with its own message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.chat import quant
from helpers.chat.chat import DEFAULT_SYSTEM, chat_prompt
from helpers.chat.model import halves_to_pairs, pairs_to_halves
from helpers.checks.chat import (
    check_chat_prompt,
    check_dequantize_q4_1,
    check_dequantize_q8_0,
    check_halves_to_pairs,
    check_quantize_q4_0,
)
from tests.conftest import assert_caught, assert_not_attempted


def stub(*args, **kwargs):
    raise NotImplementedError("Exercise: fill in")


def f16(blocks, offset):
    return blocks[:, offset : offset + 2].contiguous().view(torch.float16).float()


def nibbles(packed):
    return packed & 0x0F, packed >> 4


# ---------------------------------------------------------------- Q8_0


def q8_struct(blocks):  # byte by byte with struct, as one would in plain Python
    import struct

    rows = []
    for row in blocks.tolist():
        raw = bytes(row)
        d = struct.unpack("<e", raw[:2])[0]
        rows.append([d * q for q in struct.unpack("<32b", raw[2:])])
    return torch.tensor(rows, dtype=torch.float32)


def q8_numpy(blocks):  # through numpy, as gguf does
    raw = blocks.numpy()
    d = raw[:, :2].copy().view(np.float16).astype(np.float32)
    return torch.from_numpy(d * raw[:, 2:].copy().view(np.int8).astype(np.float32))


Q8_RIGHT = [
    quant.dequantize_q8_0,
    lambda b: f16(b, 0) * b[:, 2:].contiguous().view(torch.int8).float(),
    lambda b: f16(b, 0).double() * b[:, 2:].contiguous().view(torch.int8).double(),  # float64, the same values
    lambda b: (b[:, 2:].contiguous().view(torch.int8).to(torch.float32) * f16(b, 0)).reshape(-1),  # flat: fine
    lambda b: torch.where(b[:, 2:] > 127, b[:, 2:].int() - 256, b[:, 2:].int()).float() * f16(b, 0),
    q8_numpy,
    lambda b: f16(b, 0) * b[:, 2:].to(torch.int8).float(),  # .to(int8) wraps 255 to -1, as a view does
    q8_struct,
    lambda b: (lambda s, q: s.contiguous().view(torch.float16).float() * q.contiguous().view(torch.int8).float())(
        *b.split([2, 32], dim=1)
    ),
]


@pytest.mark.parametrize("answer", Q8_RIGHT)
def test_q8_0_right_answers_pass(answer):
    assert check_dequantize_q8_0(answer) is True


def test_q8_0_stub_not_attempted(capsys):
    assert_not_attempted(check_dequantize_q8_0, stub, capsys)
    assert_not_attempted(check_dequantize_q8_0, ..., capsys)


def q8_partial(blocks):  # the scale read, the stub's raise still below it
    d = blocks[:, 0:2].contiguous().view(torch.float16).float()  # noqa: F841 (partial work)
    raise NotImplementedError("Exercise: replace this line with your code")


def chat_partial(messages, add_generation_prompt=True):
    text = f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"  # noqa: F841 (partial work)
    raise NotImplementedError("Exercise: replace this line with your code")


def test_partial_work_is_not_called_not_attempted():
    assert_caught(check_dequantize_q8_0, q8_partial, "partial work")
    assert_caught(check_chat_prompt, chat_partial, "partial work")


Q8_MISTAKES = [
    (lambda b: f16(b, 0) * b[:, 2:].float(), ["unsigned", "int8"]),
    (lambda b: b[:, :2].contiguous().view(torch.bfloat16).float() * b[:, 2:].contiguous().view(torch.int8).float(), ["bfloat16"]),
    (
        lambda b: b[:, [1, 0]].contiguous().view(torch.float16).float() * b[:, 2:].contiguous().view(torch.int8).float(),
        ["order", "little-endian"],
    ),
    (lambda b: b[:, 2:].contiguous().view(torch.int8).float(), ["scale is missing"]),
    (lambda b: b[:, 2:].contiguous().view(torch.int8).float() / f16(b, 0), ["divided by the scale"]),
    (lambda b: f16(b, 32) * b[:, :32].contiguous().view(torch.int8).float(), ["scale comes first"]),
    (
        lambda b: b[:, :4].contiguous().view(torch.float32) * b[:, 4:].contiguous().view(torch.int8).float(),
        ["4 bytes", "float16"],
    ),
    (lambda b: f16(b, 0) * b.contiguous().view(torch.int8).float(), ["every byte became a code"]),
    (
        lambda b: b[:, :2].contiguous().view(torch.float16) * b[:, 2:].contiguous().view(torch.int8).half(),
        ["float16", "computed in float32"],
    ),
    (lambda b: b[:, 2:].contiguous().view(torch.int8), ["int8", ".float()"]),
    (lambda b: torch.cat(nibbles(b[:, 2:]), dim=1).float() * f16(b, 0), ["two 4-bit codes"]),
    (lambda b: f16(b, 0) * b[:, 2:].contiguous().view(torch.int8).float() + 1, ["differs from the reference"]),
    (lambda b: (f16(b, 0) * b[:, 2:].contiguous().view(torch.int8).float()).numpy(), ["torch.Tensor", "from_numpy"]),
    (lambda b: f16(b, 0) * (b[:, 2:].float() - 128), ["minus 128", "int8"]),
    (lambda b: f16(b, 0) * b[:, 2:].contiguous().view(torch.int8).float().abs(), ["lost their sign"]),
    (lambda b: b[:, 0:1].float() * b[:, 2:].contiguous().view(torch.int8).float(), ["scale is wrong", "float16"]),
    (
        lambda b: b[:, :2].contiguous().view(torch.int16).float() * b[:, 2:].contiguous().view(torch.int8).float(),
        ["scale is wrong", "codes are read right"],
    ),
    (
        lambda b: b[:, 1:3].contiguous().view(torch.float16).float() * b[:, 3:].contiguous().view(torch.int8).float(),
        ["byte 3", "blocks[:, 2:]"],
    ),
    (lambda b: (f16(b, 0) * b[:, 2:].contiguous().view(torch.int8).float()).T, ["blocks along the columns", "no .T"]),
    (lambda b: (f16(b, 0) * b[:, 2:].contiguous().view(torch.int8).float())[:, None], ["(48, 1, 32)", "reshape"]),
    (
        lambda b: (b[:, :2].contiguous().view(torch.float16) * b[:, 2:].contiguous().view(torch.int8).half()).float(),
        ["computed in float16 and converted"],
    ),
]


@pytest.mark.parametrize("wrong, phrases", Q8_MISTAKES)
def test_q8_0_mistakes_are_named(wrong, phrases):
    assert_caught(check_dequantize_q8_0, wrong, *phrases)


# ---------------------------------------------------------------- Q4_1


def q4_1(b):
    low, high = nibbles(b[:, 4:])
    return f16(b, 0) * torch.cat([low, high], dim=1).float() + f16(b, 2)


def q4_1_loop(b):  # weight by weight, as a C loop would
    d, m = f16(b, 0), f16(b, 2)
    out = torch.empty(b.shape[0], 32)
    for j in range(16):
        out[:, j] = (d * (b[:, 4 + j] & 15).float().unsqueeze(1) + m).squeeze(1)
        out[:, j + 16] = (d * (b[:, 4 + j] >> 4).float().unsqueeze(1) + m).squeeze(1)
    return out


def q4_1_numpy(b):  # numpy views, as gguf's reader does
    raw = b.numpy()
    d = raw[:, 0:2].copy().view(np.float16).astype(np.float32)
    m = raw[:, 2:4].copy().view(np.float16).astype(np.float32)
    q = np.concatenate([raw[:, 4:] & 0x0F, raw[:, 4:] >> 4], axis=1).astype(np.float32)
    return torch.from_numpy(d * q + m)


Q4_RIGHT = [
    quant.dequantize_q4_1,
    q4_1,
    q4_1_loop,
    lambda b: torch.addcmul(f16(b, 2), f16(b, 0), torch.cat(nibbles(b[:, 4:]), dim=1).float()),  # fused: one rounding
    lambda b: (f16(b, 0).double() * torch.cat(nibbles(b[:, 4:]), dim=1).double() + f16(b, 2).double()).float(),
    lambda b: f16(b, 2) + torch.cat([b[:, 4:] % 16, b[:, 4:] // 16], dim=1).float() * f16(b, 0),
    lambda b: f16(b, 0) * torch.stack(nibbles(b[:, 4:]), dim=1).reshape(-1, 32).float() + f16(b, 2),
    q4_1_numpy,
    lambda b: f16(b, 0) * torch.cat([b[:, 4:].int() & 15, (b[:, 4:].int() >> 4) & 15], dim=1).float() + f16(b, 2),
]


@pytest.mark.parametrize("answer", Q4_RIGHT)
def test_q4_1_right_answers_pass(answer):
    assert check_dequantize_q4_1(answer) is True


def test_q4_1_stub_not_attempted(capsys):
    assert_not_attempted(check_dequantize_q4_1, stub, capsys)


def codes(b, order="cat", offset=4):
    low, high = nibbles(b[:, offset:])
    if order == "interleave":
        return torch.stack([low, high], dim=-1).flatten(1).float()
    if order == "high first":
        return torch.cat([high, low], dim=1).float()
    if order == "interleave high first":
        return torch.stack([high, low], dim=-1).flatten(1).float()
    return torch.cat([low, high], dim=1).float()


Q4_MISTAKES = [
    (lambda b: f16(b, 2) * codes(b) + f16(b, 0), ["scale and the minimum are swapped"]),
    (lambda b: f16(b, 0) * codes(b, "interleave") + f16(b, 2), ["nibbles are unpacked in the wrong order", "low nibble"]),
    (lambda b: f16(b, 0) * codes(b, "high first") + f16(b, 2), ["high nibbles come first"]),
    (lambda b: f16(b, 0) * codes(b, "interleave high first") + f16(b, 2), ["interleaved with the high one first"]),
    (lambda b: f16(b, 0) * codes(b) - f16(b, 2), ["minimum is subtracted"]),
    (lambda b: f16(b, 0) * (codes(b) - 8) + f16(b, 2), ["centred", "Q4_0"]),
    (lambda b: f16(b, 0) * codes(b), ["minimum is missing"]),
    (lambda b: f16(b, 0) * torch.cat([b[:, 4:] & 15, b[:, 4:] & 0xF0], dim=1).float() + f16(b, 2), ["not shifted"]),
    (
        lambda b: (
            b[:, :2].contiguous().view(torch.bfloat16).float() * codes(b) + b[:, 2:4].contiguous().view(torch.bfloat16).float()
        ),
        ["bfloat16"],
    ),
    (
        lambda b: (
            b[:, [1, 0]].contiguous().view(torch.float16).float() * codes(b)
            + b[:, [3, 2]].contiguous().view(torch.float16).float()
        ),
        ["wrong order", "little-endian"],
    ),
    (lambda b: f16(b, 0) * (codes(b) + f16(b, 2)), ["before scaling"]),
    (
        lambda b: (
            b[:, :4].contiguous().view(torch.float32) * torch.cat(nibbles(b[:, 8:]), dim=1).float()
            + b[:, 4:8].contiguous().view(torch.float32)
        ),
        ["4 bytes each", "float16"],
    ),
    (lambda b: f16(b, 0) * b[:, 4:].float() + f16(b, 2), ["two 4-bit codes"]),
    (lambda b: f16(b, 0) * torch.cat(nibbles(b), dim=1).float() + f16(b, 2), ["all 20 bytes"]),
    (
        lambda b: b[:, :2].contiguous().view(torch.float16) * codes(b).half() + b[:, 2:4].contiguous().view(torch.float16),
        ["float16"],
    ),
    (lambda b: f16(b, 0) * codes(b) + f16(b, 2) + 1e-3, ["scale (and minimum) is wrong"]),  # the minimum is off
    (lambda b: f16(b, 0) * codes(b) + f16(b, 2) + torch.arange(32) * 1e-3, ["differs from the reference"]),
    (
        lambda b: (
            f16(b, 0) * torch.cat([b[:, 4:].view(torch.int8) & 15, b[:, 4:].view(torch.int8) >> 4], dim=1).float() + f16(b, 2)
        ),
        ["signed (int8)", "sign bit"],
    ),
    (lambda b: f16(b, 0) * torch.cat([b[:, 4:] % 16, b[:, 4:] / 16], dim=1).float() + f16(b, 2), ["as a float", "// 16"]),
    (lambda b: f16(b, 0) * torch.cat([b[:, 4:] & 15, b[:, 4:] & 15], dim=1).float() + f16(b, 2), ["low nibbles were used twice"]),
    (
        lambda b: f16(b, 0) * torch.cat([b[:, 4:] >> 4, b[:, 4:] >> 4], dim=1).float() + f16(b, 2),
        ["high nibbles were used twice"],
    ),
    (lambda b: f16(b, 0) * codes(b, offset=2)[:, :32] + f16(b, 2), ["from byte 2 on"]),
    (lambda b: (f16(b, 0) * codes(b) + f16(b, 2)).T, ["blocks along the columns"]),
    (lambda b: b[:, 0:1].float() * codes(b) + b[:, 2:3].float(), ["scale (and minimum) is wrong"]),
]


@pytest.mark.parametrize("wrong, phrases", Q4_MISTAKES)
def test_q4_1_mistakes_are_named(wrong, phrases):
    assert_caught(check_dequantize_q4_1, wrong, *phrases)


# ---------------------------------------------------------------- the rows of Q and K


def by_index(w, heads):
    d = w.shape[0] // heads
    order = torch.arange(d).reshape(2, d // 2).T.reshape(-1)  # 0, d/2, 1, d/2 + 1, ...
    return w[(torch.arange(heads)[:, None] * d + order).reshape(-1)]


def by_stack(w, heads):
    rows = w.reshape(heads, -1, w.shape[1])  # (heads, d, columns)
    first, second = rows.chunk(2, dim=1)  # (heads, d/2, columns) each
    return torch.stack([first, second], dim=2).reshape(w.shape)


def by_loop(w, heads):  # row by row
    d = w.shape[0] // heads
    rows = []
    for h in range(heads):
        for i in range(d // 2):
            rows += [w[h * d + i], w[h * d + d // 2 + i]]
    return torch.stack(rows)


def by_numpy(w, heads):
    a = w.numpy()
    d = a.shape[0] // heads
    return torch.from_numpy(a.reshape(heads, 2, d // 2, -1).swapaxes(1, 2).reshape(a.shape).copy())


def by_slices(w, heads):  # even rows from the first half, odd rows from the second
    d = w.shape[0] // heads
    out = torch.empty_like(w)
    for h in range(heads):
        out[h * d : (h + 1) * d : 2] = w[h * d : h * d + d // 2]
        out[h * d + 1 : (h + 1) * d : 2] = w[h * d + d // 2 : (h + 1) * d]
    return out


PERMUTE_RIGHT = [
    halves_to_pairs,
    by_index,
    by_stack,
    by_loop,
    by_numpy,
    by_slices,
    lambda w, h: w.view(h, 2, -1, w.shape[-1]).permute(0, 2, 1, 3).reshape(w.shape),
]


@pytest.mark.parametrize("answer", PERMUTE_RIGHT)
def test_permutation_right_answers_pass(answer):
    assert check_halves_to_pairs(answer) is True


def test_permutation_stub_not_attempted(capsys):
    assert_not_attempted(check_halves_to_pairs, stub, capsys)


PERMUTE_MISTAKES = [
    (lambda w, h: w, ["unchanged"]),
    (lambda w, h: w.clone(), ["unchanged"]),
    (pairs_to_halves, ["inverse permutation", "transformers"]),
    (lambda w, h: w.reshape(h, 2, -1, w.shape[1]).flip(1).transpose(1, 2).reshape(w.shape), ["wrong order"]),
    (lambda w, h: w.reshape(h, 2, -1, w.shape[1]).flip(1).reshape(w.shape), ["swapped instead of interleaved"]),
    (lambda w, h: w.reshape(1, 2, -1, w.shape[1]).transpose(1, 2).reshape(w.shape), ["as one head"]),
    (lambda w, h: w.reshape(3, 2, -1, w.shape[1]).transpose(1, 2).reshape(w.shape), ["3 heads", "heads argument"]),
    (lambda w, h: halves_to_pairs(w.T, h).T if w.shape[0] == w.shape[1] else halves_to_pairs(w, h), ["columns"]),
    (lambda w, h: halves_to_pairs(w, h) * 1.001, ["differs from the reference"]),
    (lambda w, h: halves_to_pairs(w, h).numpy(), ["torch.Tensor"]),
    (lambda w, h: w.reshape(2, h, -1, w.shape[1]).permute(1, 2, 0, 3).reshape(w.shape), ["as one head"]),
    (lambda w, h: w.reshape(h, 2, -1, w.shape[1]).permute(2, 0, 1, 3).reshape(w.shape), ["heads were mixed"]),
    (lambda w, h: w.reshape(h, 2, -1, w.shape[1]).transpose(1, 2), ["reshape back to w.shape"]),
    (lambda w, h: w.reshape(h, 2, -1, w.shape[1]).transpose(1, 2).view(w.shape), [".reshape", "contiguous"]),
    (lambda w, h: halves_to_pairs(w, h).float(), ["float32", "same dtype"]),
    (lambda w, h: w.copy_(halves_to_pairs(w, h)), ["in place"]),
    (
        lambda w, h: torch.cat([w.reshape(h, -1, w.shape[1])[:, 0::2], w.reshape(h, -1, w.shape[1])[:, 1::2]], 1).reshape(
            w.shape
        ),
        ["inverse"],
    ),
]


@pytest.mark.parametrize("wrong, phrases", PERMUTE_MISTAKES)
def test_permutation_mistakes_are_named(wrong, phrases):
    assert_caught(check_halves_to_pairs, wrong, *phrases)


# ---------------------------------------------------------------- the chat template


def chat_join(messages, add_generation_prompt=True):
    if messages and messages[0]["role"] != "system":
        messages = [{"role": "system", "content": DEFAULT_SYSTEM}, *messages]
    parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages]
    return "".join(parts) + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def chat_lines(messages, add_generation_prompt=True):
    lines = []
    if messages[0]["role"] != "system":
        lines += ["<|im_start|>system", DEFAULT_SYSTEM + "<|im_end|>"]
    for m in messages:
        lines += [f"<|im_start|>{m['role']}", m["content"] + "<|im_end|>"]
    text = "\n".join(lines) + "\n"
    return text + "<|im_start|>assistant\n" * add_generation_prompt


def chat_copy_insert(messages, add_generation_prompt=True):  # a copy of the list, the system message inserted
    messages = list(messages)
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": DEFAULT_SYSTEM})
    parts = ["<|im_start|>" + m["role"] + "\n" + m["content"] + "<|im_end|>\n" for m in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def chat_jinja(messages, add_generation_prompt=True):  # the file's own template, rendered with jinja2
    import jinja2

    from helpers.chat.gguf import open_smollm2

    return jinja2.Template(open_smollm2().chat_template).render(messages=messages, add_generation_prompt=add_generation_prompt)


CHAT_RIGHT = [chat_prompt, chat_join, chat_lines, chat_copy_insert, chat_jinja]


@pytest.mark.parametrize("answer", CHAT_RIGHT)
def test_chat_template_right_answers_pass(answer):
    assert check_chat_prompt(answer) is True


def test_chat_template_stub_not_attempted(capsys):
    assert_not_attempted(check_chat_prompt, stub, capsys)


def variant(**changes):
    from helpers.checks.chat import _template_variant

    return _template_variant(**changes)


def chat_mutating(messages, add_generation_prompt=True):  # inserts the system message into the caller's list
    if messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": DEFAULT_SYSTEM})
    return chat_prompt(messages, add_generation_prompt)


def chat_joined(messages, add_generation_prompt=True):  # "\n".join: no newline after the last message
    if messages[0]["role"] != "system":
        messages = [{"role": "system", "content": DEFAULT_SYSTEM}, *messages]
    text = "\n".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>" for m in messages)
    return text + ("\n<|im_start|>assistant\n" if add_generation_prompt else "")


def chat_renamed(messages, add_generation_prompt=True):  # human and bot, as other chat formats name them
    names = {"user": "human", "assistant": "bot"}
    text = chat_prompt([{"role": names.get(m["role"], m["role"]), "content": m["content"]} for m in messages], False)
    return text + ("<|im_start|>bot\n" if add_generation_prompt else "")


def chat_system_last(messages, add_generation_prompt=True):  # the default system message after the conversation
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    if messages[0]["role"] != "system":
        text += f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")


CHAT_MISTAKES = [
    (variant(default_system=False), ["default system message is missing"]),
    (variant(always_system=True), ["even when the conversation has its own"]),
    (variant(generation=None), ["assistant's opening is missing"]),
    (variant(always_generation=True), ["even with add_generation_prompt=False"]),
    (variant(generation="assistant"), ["lacks its newline"]),
    (variant(end="<|endoftext|>"), ["<|endoftext|>", "<|im_end|>"]),
    (variant(after_end=""), ["newline is missing after <|im_end|>"]),
    (variant(after_role=""), ["not followed by a newline"]),
    (variant(after_role=":\n"), ["colon"]),
    (variant(role=str.capitalize), ["capitalised"]),
    (variant(role=lambda r: r if r == "system" else "user"), ["role user"]),
    (variant(default_system="You are a helpful assistant."), ["not SmolLM2's"]),
    (lambda messages, add_generation_prompt=True: chat_prompt(messages, add_generation_prompt).strip(), ["first differ"]),
    (lambda messages, add_generation_prompt=True: [1, 2, 3], ["token ids", "str"]),
    (lambda messages, add_generation_prompt=True: None, ["NoneType", "str"]),
    (
        lambda m, g=True: (
            ("<|im_start|>system\n" + DEFAULT_SYSTEM + "<|im_end|>\n" if m[0]["role"] != "system" else "") + chat_prompt(m, g)
        ),
        ["appears twice"],
    ),
    (chat_mutating, ["changed the list", "copy"]),
    (lambda m, g=True: chat_prompt([{"role": x["role"], "content": x["content"].strip()} for x in m], g), ["stripped"]),
    (lambda m, g=True: chat_prompt(m, False) + ("<|im_start|>assistant\n<|im_end|>\n" if g else ""), ["closed right away"]),
    (chat_joined, ["last message lacks its newline"]),
    (lambda m, g=True: chat_prompt(m, g).replace("<|im_end|>\n", "<|im_end|>\n\n"), ["blank line"]),
    (lambda m, g=True: chat_prompt(m, g).replace("<|im_start|>", "<|im_start|> "), ["space after <|im_start|>"]),
    (lambda m, g=True: chat_prompt(m, False) + ("<|im_start|>user\n" if g else ""), ["<|im_start|>user\\n"]),
    (lambda m, g=True: chat_prompt(m[-1:], g), ["only the last message"]),
    (lambda m, g=True: chat_prompt(m, g) + "<|endoftext|>", ["ends with <|endoftext|>"]),
    (lambda m, g=True: "<|endoftext|>" + chat_prompt(m, g), ["starts with <|endoftext|>"]),
    (chat_renamed, ["renamed"]),
    (chat_system_last, ["comes last"]),
]


@pytest.mark.parametrize("wrong, phrases", CHAT_MISTAKES)
def test_chat_template_mistakes_are_named(wrong, phrases):
    assert_caught(check_chat_prompt, wrong, *phrases)


# ---------------------------------------------------------------- the Q4_0 quantizer


def extreme(x):
    return x.gather(1, x.abs().argmax(1, keepdim=True))  # (n, 1): the weight of largest magnitude, with its sign


def inverse(d):
    return torch.where(d == 0, torch.zeros_like(d), 1 / torch.where(d == 0, torch.ones_like(d), d))


def q4_round(x):  # round(x / d) + 8: ties go to even, a step away from ggml's now and then
    d = extreme(x) / -8
    return d, (torch.round(x * inverse(d)) + 8).clamp(0, 15).to(torch.uint8)


def q4_divide(x):  # x / d where d is not 0
    d = extreme(x) / -8
    safe = torch.where(d == 0, torch.ones_like(d), d)
    return d, torch.where(d == 0, 8.0, torch.trunc(x / safe + 8.5).clamp(0, 15)).long()


def q4_half_scale(x):  # the codes from the float16 scale the file stores
    d = (extreme(x) / -8).half().float()
    return d, torch.trunc(x * inverse(d) + 8.5).clamp(0, 15).to(torch.int64)


def q4_numpy(x):  # numpy, as gguf's quantizer does
    a = x.numpy()
    m = a[np.arange(len(a)), np.abs(a).argmax(1)][:, None]
    d = m / -8
    inv = np.where(d == 0, 0, 1 / np.where(d == 0, 1, d))
    return torch.from_numpy(d), torch.from_numpy(np.clip(np.trunc(a * inv + 8.5), 0, 15).astype(np.uint8))


def q4_loop(x):  # block by block
    ds, qs = [], []
    for row in x:
        d = row[row.abs().argmax()] / -8
        qs.append(torch.clamp(torch.trunc(row * (0.0 if d == 0 else 1 / d) + 8.5), 0, 15))
        ds.append(d)
    return torch.stack(ds)[:, None], torch.stack(qs).long()


def q4_sign_times_max(x):  # the sign and the magnitude apart
    amax, where = x.abs().max(dim=1, keepdim=True)
    d = -torch.sign(x.gather(1, where)) * amax / 8
    return d, torch.trunc(x * inverse(d) + 8.5).clamp(0, 15).long()


def q4_nan_to_num(x):  # x / d, the NaNs of a block of zeros turned into 0 afterwards
    d = extreme(x) / -8
    return d, torch.nan_to_num(x / d, nan=0.0).add(8.5).trunc().clamp(0, 15).int()


QUANT_RIGHT = [
    quant.quantize_q4_0_codes,
    q4_round,
    q4_divide,
    q4_half_scale,
    q4_numpy,
    q4_loop,
    q4_sign_times_max,
    q4_nan_to_num,
    lambda x: ((extreme(x) / -8).half(), quant.quantize_q4_0_codes(x)[1]),  # the scale as the file stores it
]


@pytest.mark.parametrize("answer", QUANT_RIGHT)
def test_q4_0_quantizer_right_answers_pass(answer):
    assert check_quantize_q4_0(answer) is True


def test_q4_0_quantizer_stub_not_attempted(capsys):
    assert_not_attempted(check_quantize_q4_0, stub, capsys)


def with_scale(scale):
    def quantize(x):
        d = scale(x)
        return d, torch.trunc(x * inverse(d) + 8.5).clamp(0, 15)

    return quantize


def with_codes(codes):
    def quantize(x):
        d = extreme(x) / -8
        return d, codes(x * inverse(d))

    return quantize


QUANT_MISTAKES = [
    (with_scale(lambda x: x.abs().amax(1, keepdim=True) / 8), ["positive in every block", "with its sign"]),
    (with_scale(lambda x: x.abs().amax(1, keepdim=True) / 7), ["/ 7", "symmetric"]),
    (with_scale(lambda x: extreme(x) / 8), ["divided by 8, not by -8"]),
    (with_scale(lambda x: (x.amax(1, keepdim=True) - x.amin(1, keepdim=True)) / 15), ["Q4_1's"]),
    (with_scale(lambda x: x.amax(1, keepdim=True) / -8), ["the largest weight, not the one of largest magnitude"]),
    (with_scale(lambda x: -8 / extreme(x)), ["inverse"]),
    (with_codes(lambda s: torch.trunc(s + 8.5)), ["a code is 16", "clamp"]),
    (with_codes(lambda s: torch.trunc(s + 8).clamp(0, 15)), ["truncated without rounding"]),
    (with_codes(lambda s: torch.round(s)), ["a code is -8", "plus 8"]),
    (with_codes(lambda s: (torch.floor(s) + 8).clamp(0, 15)), ["floor(x / d) + 8"]),
    (lambda x: (extreme(x) / -8, torch.trunc(x / (extreme(x) / -8) + 8.5).clamp(0, 15)), ["block of zeros", "code 8"]),
    (lambda x: (extreme(x) / -8, (x / (extreme(x) / -8) + 8.5).trunc().clamp(0, 15).to(torch.uint8)), ["block of zeros"]),
    (lambda x: (extreme(x) / -8, torch.trunc(x * (extreme(x) / -8) + 8.5).clamp(0, 15)), ["x * d, not x / d"]),
    (lambda x: (extreme(x) / -8, quant.pack_nibbles(quant.quantize_q4_0_codes(x)[1])), ["before packing"]),
    (lambda x: quant.quantize_q4_0_codes(x)[1], ["two tensors"]),
    (lambda x: (extreme(x) / -8, x * inverse(extreme(x) / -8) + 8.5), ["not whole numbers"]),
    (lambda x: (extreme(x)[:1] / -8, quant.quantize_q4_0_codes(x)[1]), ["one scale per block"]),
    (lambda x: (extreme(x) / -8, (quant.quantize_q4_0_codes(x)[1].long() + 2).clamp(0, 15)), ["codes differ from ggml's"]),
    (with_scale(lambda x: -x.abs().amax(1, keepdim=True) / 8), ["negative in every block"]),
    (with_scale(lambda x: x.amin(1, keepdim=True) / -8), ["smallest weight"]),
    (with_scale(lambda x: extreme(x) / -7), ["divided by -7"]),
    (with_scale(lambda x: extreme(x) / -15), ["divided by -15"]),
    (with_codes(lambda s: torch.round(s).clamp(0, 15)), ["offset 8 is missing"]),
    (with_codes(lambda s: torch.trunc(s - 7.5).clamp(0, 15)), ["offset 8 was subtracted"]),
    (with_codes(lambda s: torch.round(s + 8.5).clamp(0, 15)), ["rounded up", "round(x / d + 8.5)"]),
    (with_codes(lambda s: (torch.ceil(s) + 8).clamp(0, 15)), ["ceil"]),
    (with_codes(lambda s: torch.trunc(s + 8.5).clamp(0, 16)), ["a code is 16"]),
    (lambda x: quant.quantize_q4_0_codes(x)[::-1], ["returned (q, d)"]),
    (lambda x: (extreme(x) / -8, quant.quantize_q4_0_codes(x)[1].T), ["no .T"]),
    (lambda x: (extreme(x)[:, 0] / -8, quant.quantize_q4_0_codes(x)[1]), ["keepdim=True"]),
    (lambda x: ((extreme(x) / -8).T, quant.quantize_q4_0_codes(x)[1]), ["(1, 64)", "column"]),
]


@pytest.mark.parametrize("wrong, phrases", QUANT_MISTAKES)
def test_q4_0_quantizer_mistakes_are_named(wrong, phrases):
    assert_caught(check_quantize_q4_0, wrong, *phrases)
