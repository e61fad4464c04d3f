"""Notebook 16: SmolLM2's chat template (ChatML) and generation with notebook 11's KV cache and sampling.

A chat model reads a conversation as one text in which each message is wrapped in control tokens (ChatML)::

    <|im_start|>system
    You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>
    <|im_start|>user
    What is the capital of France?<|im_end|>
    <|im_start|>assistant

and answers by continuing it until it writes ``<|im_end|>``. ``chat_prompt`` writes that text (the template the
file ships, ``GGUFFile.chat_template``, written out in Python: a default system message when the conversation does not
start with one, each message as ``<|im_start|>{role}\\n{content}<|im_end|>\\n``, and the opening of the assistant's
turn); ``render_template`` renders the file's own Jinja template the way transformers does, for comparison.

``reply`` runs the prompt once through a ``DecoderLM`` (the **prefill**, which fills the KV cache), then one token per
step with ``helpers.models.lm.sample_next`` (greedy, or temperature / top-k / top-p) until an end token, timing both
phases. ``uncached_seconds_per_token`` times the same steps without the cache (each step re-runs the whole sequence).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

from helpers.models.lm import DecoderLM, sample_next
from helpers.runtime.smoke import capped

__all__ = [
    "IM_START",
    "IM_END",
    "DEFAULT_SYSTEM",
    "Message",
    "chat_prompt",
    "render_template",
    "Reply",
    "reply",
    "device_clock",
    "uncached_seconds_per_token",
]

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
#: The system message SmolLM2's template puts first when a conversation does not start with one.
DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

Message = Mapping[str, str]


def _check_messages(messages: Sequence[Message]) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError('messages is a list of {"role": ..., "content": ...} dicts, e.g. [{"role": "user", "content": "Hi"}]')
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not {"role", "content"} <= set(m):
            raise TypeError(f'message {i} is {m!r}: each message is a dict with "role" and "content"')


def chat_prompt(messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
    """The conversation as SmolLM2's template writes it (ChatML), ending with the assistant's opening if asked."""
    _check_messages(messages)
    text = ""
    if messages and messages[0]["role"] != "system":
        text += f"{IM_START}system\n{DEFAULT_SYSTEM}{IM_END}\n"
    for m in messages:
        text += f"{IM_START}{m['role']}\n{m['content']}{IM_END}\n"
    if add_generation_prompt:
        text += f"{IM_START}assistant\n"
    return text


def render_template(template: str, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
    """Render a Jinja chat template as transformers does (a sandbox, ``trim_blocks`` and ``lstrip_blocks``)."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    _check_messages(messages)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=list(messages), add_generation_prompt=add_generation_prompt)


def device_clock(device: torch.device | str) -> Callable[[], float]:
    """The clock for timings on ``device``: this process's CPU time on a CPU (other work on a shared machine
    disturbs it far less than the wall clock), wall time on a GPU (which works while the CPU waits)."""
    return time.process_time if torch.device(device).type == "cpu" else time.perf_counter


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Reply:
    """What ``reply`` generated: the new token ids (the end token included if one came), the prompt's length, and the
    seconds of the prefill and of the generation steps (``device_clock``)."""

    ids: list[int]
    prompt_tokens: int
    prefill_seconds: float
    step_seconds: list[float] = field(default_factory=list)

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else float("inf")

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second, the first (made by the prefill) not counted."""
        total = sum(self.step_seconds)
        return len(self.step_seconds) / total if total > 0 else float("inf")


@torch.no_grad()
def reply(
    model: DecoderLM,
    prompt_ids: Sequence[int] | Tensor,
    max_new_tokens: int,
    stop_ids: Sequence[int] = (2,),
    **sampling,
) -> Reply:
    """Continue ``prompt_ids`` with at most ``max_new_tokens`` tokens, stopping after any of ``stop_ids``.

    The prompt runs once with an empty KV cache per block (``model(ids, 0, caches)``); every later step runs the newest
    token only. ``sampling`` goes to ``helpers.models.lm.sample_next``: ``greedy=True``, or ``temperature``, ``top_k``,
    ``top_p`` with a ``generator`` (a ``torch.Generator`` on the CPU: the draw is the same on every device). A smoke
    run (``helpers.runtime.smoke``) generates at most 6 tokens.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    max_new_tokens = capped(max_new_tokens, 6)
    model.eval()
    device = model.embed.weight.device
    ids = torch.as_tensor(list(prompt_ids) if not isinstance(prompt_ids, Tensor) else prompt_ids, dtype=torch.long)
    ids = ids.reshape(1, -1).to(device)  # (1, n)
    if ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    clock = device_clock(device)
    generator = sampling.pop("generator", None)
    caches: list = [None] * len(model.blocks)
    _sync(device)
    begin = clock()
    logits = model(ids, 0, caches)[:, -1].float().cpu()  # (1, vocab): the prefill
    result = Reply([], ids.shape[1], clock() - begin)
    stops = set(int(s) for s in stop_ids)
    for step in range(max_new_tokens):
        nxt = sample_next(logits, generator=generator, **sampling)  # (1,)
        result.ids.append(int(nxt))
        if int(nxt) in stops or step == max_new_tokens - 1:
            break
        begin = clock()
        logits = model(nxt[:, None].to(device), None, caches)[:, -1].float().cpu()  # (1, vocab)
        result.step_seconds.append(clock() - begin)
    return result


@torch.no_grad()
def uncached_seconds_per_token(model: DecoderLM, prompt_ids: Sequence[int], steps: int) -> float:
    """Seconds per greedy token without a cache: each of ``steps`` steps re-runs the whole sequence so far (one step in a
    smoke run)."""
    steps = capped(steps, 1)
    model.eval()
    device = model.embed.weight.device
    ids = torch.tensor([list(prompt_ids)], device=device)  # (1, n)
    clock = device_clock(device)
    _sync(device)
    begin = clock()
    for _ in range(steps):
        nxt = model(ids)[:, -1].argmax(-1)  # (1,)
        ids = torch.cat([ids, nxt[:, None]], dim=1)  # (1, n + 1)
    _sync(device)
    return (clock() - begin) / steps
