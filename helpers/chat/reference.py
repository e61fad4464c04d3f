"""Notebook 16: transformers' numbers for SmolLM2, stored once so that nothing needs transformers to compare with them.

``benchmarks/bench_chat.py --fixture`` loads transformers' ``LlamaForCausalLM`` from the same GGUF file (about 30 s)
and writes ``data/smollm2_reference.npz``:

- for each prompt of ``reference_prompts`` (1, 7, 64 and 512 tokens, and three chat prompts): its ids, and at a few
  positions the logits of 512 vocabulary ids (the 256 that transformers ranks highest there and 256 fixed random ones),
  float32: ``ids/NAME``, ``positions/NAME``, ``vocab/NAME`` ``(positions, 512)``, ``logits/NAME`` ``(positions, 512)``;
- for the chat prompts, transformers' greedy continuation of ``CONTINUATION`` tokens (``greedy/NAME``) and the
  smallest gap between its two highest logits along the way (``margin/NAME``: how far from a tie greedy ever came);
- the first 8 columns of layer 0's query and key matrices as transformers holds them (``hf_q_columns`` ``(576, 8)``,
  ``hf_k_columns`` ``(192, 8)``), rows in Hugging Face's order;
- ``tokenizer_ids``: the ids of ``tokenizer_text()`` (over 100,000 characters) by transformers' tokenizer read from the
  same file, with SmolLM2's pre-tokenization (``benchmarks/results/16_chat_model.md`` says why it is restored).

``load_reference()`` checks the arrays against ``REFERENCE_SHA256`` (of their contents, not of the zip file).
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np
import torch

from helpers.chat.chat import chat_prompt
from helpers.data.common import DataError
from helpers.data.text import load_pydoc_text
from helpers.runtime.session import DATA_DIR
from helpers.tokenizers.bpe import BPETokenizer

__all__ = [
    "REFERENCE_PATH",
    "REFERENCE_SHA256",
    "CONTINUATION",
    "CHAT_QUESTIONS",
    "VARIED_TEXTS",
    "reference_prompts",
    "heldout_ids",
    "tokenizer_text",
    "reference_checksum",
    "load_reference",
    "write_reference",
    "PROMPT_NAMES",
    "logit_errors",
]

REFERENCE_PATH = DATA_DIR / "smollm2_reference.npz"
#: SHA-256 of the arrays' names, dtypes, shapes and bytes (``reference_checksum``).
REFERENCE_SHA256 = "6d9bbac967484963128ebc20c753f941d2d3cebab521ab57db5175be2a38f48a"
#: Tokens of transformers' greedy continuation stored for each chat prompt.
CONTINUATION = 64
#: The chat prompts whose continuations are stored.
CHAT_QUESTIONS = {
    "chat": "What is the capital of France?",
    "arithmetic": "What is 12 times 12?",
    "code": "Write a Python function that returns the factorial of n.",
}
#: Text beyond Python's documentation for the tokenizer's comparison: accents, scripts, emoji, numbers, white space.
VARIED_TEXTS = (
    "Größe, café, naïve, façade — «guillemets», “quotes” and ‘apostrophes’; Ærøskøbing, Łódź, İstanbul.\n",
    "日本語のテキストと中文字符、한국어 문장. Привет, мир! Γειά σου Κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया.\n",
    "Emoji: 😀👍🏽🇫🇷👩‍💻 and symbols ∑∫√∞ ≤ ≥ ≠ ± × ÷ → ⇒ ♥ ★ © ® ™ €£¥.\n",
    "Numbers: 0 7 42 3.14159 -273.15 1,000,000 1e-10 0xFF 2**64 = 18446744073709551616; Ⅻ ½ ¾ ١٢٣ ٤٥ ① ².\n",
    "White space:\ttabs\t\tand   runs of    spaces\n\n\n   indented 2 lines\r\n trailing   \n \n",
    "def f(x, *args, **kwargs):\n    return [y ** 2 for y in range(10) if y % 3]  # comment\n\nclass A:\n\tpass\n",
    "don't can't I'm you're we've he'll she'd IT'S O'Neil rock'n'roll 's 't 're\n",
    "<|im_start|>user\nspecial tokens read as text<|im_end|>\n<|endoftext|>\n",
)


def reference_prompts(tokenizer: BPETokenizer) -> dict[str, list[int]]:
    """The prompts compared with transformers, as ids: 1, 7, 64 and 512 tokens of text, and three chat prompts."""
    text = load_pydoc_text()
    specials = {"<|im_start|>", "<|im_end|>"}
    prompts = {
        "1 token": tokenizer.encode("The"),
        "7 tokens": tokenizer.encode("The capital of France is the city"),
        "64 tokens": tokenizer.encode(text[150_000:151_000])[:64],
        "512 tokens": tokenizer.encode(text[250_000:254_000])[:512],
    }
    for name, question in CHAT_QUESTIONS.items():
        prompts[name] = tokenizer.encode(chat_prompt([{"role": "user", "content": question}]), allowed_special=specials)
    for name, ids in prompts.items():
        expected = {"1 token": 1, "7 tokens": 7, "64 tokens": 64, "512 tokens": 512}.get(name)
        if expected is not None and len(ids) != expected:
            raise ValueError(f"the prompt {name!r} has {len(ids)} tokens: the tokenizer is not SmolLM2's")
    return prompts


def heldout_ids(tokenizer: BPETokenizer, tokens: int) -> list[int]:
    """``tokens`` ids of Python's documentation from character 350,000 on: a text no prompt above comes from."""
    text = load_pydoc_text()
    ids = tokenizer.encode(text[350_000 : 350_000 + 6 * tokens])[:tokens]
    if len(ids) < tokens:
        raise ValueError(f"only {len(ids)} tokens of held-out text; ask for fewer than {tokens}")
    return ids


def tokenizer_text() -> str:
    """The text whose ids are compared with transformers' tokenizer: the first 120,000 characters of Python's
    documentation and ``VARIED_TEXTS``, joined (120,683 characters)."""
    return load_pydoc_text()[:120_000] + "".join(VARIED_TEXTS)


def reference_checksum(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the arrays' names, dtypes, shapes and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def write_reference(arrays: dict[str, np.ndarray], path: Path = REFERENCE_PATH) -> str:
    """Write the fixture (``np.savez_compressed``) and return its checksum."""
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return reference_checksum(arrays)


#: The stored prompts, shortest first.
PROMPT_NAMES = ("1 token", "7 tokens", "64 tokens", "512 tokens", "chat", "arithmetic", "code")

_LOADED: dict[str, dict[str, np.ndarray]] = {}


def load_reference(path: Path = REFERENCE_PATH) -> dict[str, np.ndarray]:
    """The stored transformers numbers, checked against ``REFERENCE_SHA256``."""
    key = str(path)
    if key in _LOADED:
        return _LOADED[key]
    fix = "regenerate it with `python benchmarks/bench_chat.py --fixture` (it needs transformers, gguf and accelerate)"
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except FileNotFoundError:
        raise DataError(f"{path} is missing: {fix}") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise DataError(f"{path} is unreadable ({type(err).__name__}: {err}); {fix}") from None
    checksum = reference_checksum(arrays)
    if checksum != REFERENCE_SHA256:
        raise DataError(
            f"{path} does not match its checksum (SHA-256 {checksum[:12]}..., expected {REFERENCE_SHA256[:12]}...); {fix}"
        )
    _LOADED[key] = arrays
    return arrays


@torch.no_grad()
def logit_errors(model: torch.nn.Module, reference: dict[str, np.ndarray], names=PROMPT_NAMES) -> dict[str, float]:
    """``{prompt: the largest |difference| between the model's logits and transformers'}`` at the stored positions and
    vocabulary ids of each prompt (the model runs on the prompt's stored ids, on its own device)."""
    device = next(model.parameters()).device
    errors = {}
    for name in names:
        ids = torch.from_numpy(reference[f"ids/{name}"].astype(np.int64))[None].to(device)  # (1, n)
        logits = model(ids)[0].float().cpu()  # (n, vocab)
        positions = torch.from_numpy(reference[f"positions/{name}"].astype(np.int64))  # (p,)
        vocab = torch.from_numpy(reference[f"vocab/{name}"].astype(np.int64))  # (p, 512)
        ours = logits[positions[:, None], vocab]  # (p, 512)
        errors[name] = (ours - torch.from_numpy(reference[f"logits/{name}"])).abs().max().item()
    return errors
