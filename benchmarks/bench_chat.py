"""Benchmark: SmolLM2-135M-Instruct from its GGUF file in the course's code, against transformers (notebook 16).

    .venv/bin/python benchmarks/bench_chat.py                  # everything but the fixture, about 10 minutes of CPU
    .venv/bin/python benchmarks/bench_chat.py --fixture        # (re)write data/smollm2_reference.npz, then stop
    .venv/bin/python benchmarks/bench_chat.py --only compare tokenizer dequant speed quant notebook

One CPU thread; every JSON line is one measurement. Parts (``--only``):

- ``compare``: transformers' ``LlamaForCausalLM`` loaded from the same file (float32, ``HF_HUB_OFFLINE=1``) against
  ``helpers.chat.model.smollm2_model`` (notebook 11's ``DecoderLM``): the largest |difference| of the logits over every
  position and every vocabulary id of prompts of 1 to 512 tokens; the greedy continuations of 64 tokens (with and
  without the course's KV cache) against transformers' own greedy loop (with its cache); the smallest gap between the
  two highest logits along each greedy path (how far from a tie it came).
- ``tokenizer``: notebook 15's ``BPETokenizer`` with the file's tokens and merges against transformers' tokenizer read
  from the same file, on all of Python's documentation (464,970 characters) and varied text: as transformers 5.23
  builds it (a plain ``ByteLevel`` pre-tokenizer) and with SmolLM2's own pre-tokenization restored (``Digits``, each
  digit alone, then ``ByteLevel``: SmolLM2's ``tokenizer.json`` and llama.cpp's ``smollm`` pre-tokenizer).
- ``dequant``: every tensor of the file dequantized by ``helpers.chat.quant`` against ``gguf.quants.dequantize``, bit
  for bit, by type.
- ``speed``: load time; prefill tokens per second at 16 to 512 prompt tokens; seconds per generated token with the
  cache at 64 to 4,096 cached positions (``lm.time_per_token``, random caches) and without it at 64 to 256; the KV
  cache's bytes against the context, measured and by notebook 12's formula; CPU seconds (``time.process_time``).
- ``quant``: the size-against-quality curve: every matrix of the 30 blocks re-quantized (Q8_0, Q4_0 and the course's
  k-bit generalisation of Q4_0 for k = 2..6; the embedding keeps the file's Q8_0, or with ``+ embedding`` it is
  quantized too), the next-token loss on 2,048 held-out tokens of Python's documentation (windows of 512).
- ``notebook``: the notebook's own measurements (its quantization losses on 256 held-out tokens, its comparisons with
  the fixture), for the ranges its claims quote; run it under each kernel family (``ATEN_CPU_CAPABILITY=avx2``,
  ``ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import helpers.models.lm as lm  # noqa: E402
from helpers.chat import quant  # noqa: E402
from helpers.chat.chat import reply, uncached_seconds_per_token  # noqa: E402
from helpers.chat.gguf import open_smollm2  # noqa: E402
from helpers.chat.model import requantize, smollm2_model, text_loss  # noqa: E402
from helpers.chat.reference import (  # noqa: E402
    CHAT_QUESTIONS,
    CONTINUATION,
    PROMPT_NAMES,
    VARIED_TEXTS,
    heldout_ids,
    load_reference,
    reference_prompts,
    tokenizer_text,
    write_reference,
)
from helpers.data import load_pydoc_text  # noqa: E402
from helpers.data.tokenizer_files import smollm2_gguf_path  # noqa: E402
from helpers.scale.kv_cost import AttentionConfig, cache_bytes_of  # noqa: E402

PARTS = ("compare", "tokenizer", "dequant", "speed", "quant", "notebook")
clock = time.process_time


def cpu_name() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or "unknown"
    fields = dict(line.split(":", 1) for line in lines if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    return f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')} model {fields.get('model', '?')})"


def emit(**record) -> None:
    print(json.dumps(record), flush=True)


def load_transformers():
    """transformers' LlamaForCausalLM and tokenizer from the file, float32, eval mode; CPU seconds to load."""
    from transformers import AutoTokenizer, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = smollm2_gguf_path()
    begin = clock()
    model = LlamaForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model, tokenizer, clock() - begin


def restored_backend(tokenizer):
    """transformers' tokenizer from the file, with SmolLM2's pre-tokenization (each digit alone, then byte-level)."""
    from tokenizers import pre_tokenizers

    backend = copy.deepcopy(tokenizer.backend_tokenizer)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    return backend


def patch_rope_float64(model) -> None:
    """Make transformers' rotary embedding compute its angles, cosines and sines in float64 (then cast)."""
    rotary = model.model.rotary_emb
    config = model.config
    dim = config.hidden_size // config.num_attention_heads
    base = config.rope_parameters["rope_theta"]

    def forward(x, position_ids):
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))  # (d/2,)
        freqs = position_ids[..., None].double() * inv_freq  # (b, n, d/2)
        emb = torch.cat([freqs, freqs], dim=-1)  # (b, n, d)
        scale = getattr(rotary, "attention_scaling", 1.0)
        return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)

    rotary.forward = forward


@torch.no_grad()
def hf_greedy(model, ids: list[int], steps: int) -> tuple[list[int], float]:
    """transformers' model, greedy with its own KV cache: the new ids and the smallest top-2 logit gap on the way."""
    out = model(torch.tensor([ids]), use_cache=True)
    past, logits = out.past_key_values, out.logits[0, -1]
    new, margin = [], float("inf")
    for _ in range(steps):
        top = logits.topk(2).values
        margin = min(margin, (top[0] - top[1]).item())
        nxt = int(logits.argmax())
        new.append(nxt)
        out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1]
    return new, margin


def fixture() -> None:
    """Write data/smollm2_reference.npz from transformers' model and tokenizer."""
    hf, hf_tok, seconds = load_transformers()
    emit(part="fixture", transformers_load_cpu_s=round(seconds, 1))
    tokenizer = open_smollm2().tokenizer()
    arrays: dict[str, np.ndarray] = {}
    order = np.random.default_rng(0).permutation(hf.config.vocab_size)  # the random ids: the first 256 not in the top
    for name, ids in reference_prompts(tokenizer).items():
        n = len(ids)
        positions = sorted({0, n // 2, n - 1})
        with torch.no_grad():
            logits = hf(torch.tensor([ids])).logits[0].float()  # (n, vocab)
        vocab, values = [], []
        for p in positions:
            top = logits[p].topk(256).indices.numpy()
            others = order[~np.isin(order, top)][:256]
            chosen = np.concatenate([np.sort(top), np.sort(others)])
            vocab.append(chosen.astype(np.int32))
            values.append(logits[p, torch.from_numpy(chosen.astype(np.int64))].numpy().astype(np.float32))
        arrays[f"ids/{name}"] = np.asarray(ids, dtype=np.int32)
        arrays[f"positions/{name}"] = np.asarray(positions, dtype=np.int32)
        arrays[f"vocab/{name}"] = np.stack(vocab)
        arrays[f"logits/{name}"] = np.stack(values)
        if name in CHAT_QUESTIONS:
            new, margin = hf_greedy(hf, ids, CONTINUATION)
            arrays[f"greedy/{name}"] = np.asarray(new, dtype=np.int32)
            arrays[f"margin/{name}"] = np.asarray(margin, dtype=np.float32)
            emit(part="fixture", prompt=name, greedy=hf_tok.decode(new), smallest_top2_gap=round(margin, 4))
    attn = hf.model.layers[0].self_attn
    arrays["hf_q_columns"] = attn.q_proj.weight[:, :8].detach().numpy().astype(np.float32)
    arrays["hf_k_columns"] = attn.k_proj.weight[:, :8].detach().numpy().astype(np.float32)
    backend = restored_backend(hf_tok)
    arrays["tokenizer_ids"] = np.asarray(backend.encode(tokenizer_text(), add_special_tokens=False).ids, dtype=np.int32)
    checksum = write_reference(arrays)
    size = Path(smollm2_gguf_path()).stat().st_size
    emit(part="fixture", written="data/smollm2_reference.npz", arrays=len(arrays), sha256=checksum, gguf_bytes=size)
    print(f"set helpers.chat.reference.REFERENCE_SHA256 = {checksum!r}")


def compare(file, model, tokenizer) -> None:
    hf, hf_tok, seconds = load_transformers()
    emit(part="compare", transformers_load_cpu_s=round(seconds, 1))
    text = load_pydoc_text()
    ids = tokenizer.encode(text[250_000:254_000])[:512]
    worst = 0.0
    for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512):
        x = torch.tensor([ids[:n]])
        with torch.no_grad():
            ours, theirs = model(x)[0], hf(x).logits[0]
        diff = (ours - theirs).abs()
        worst = max(worst, diff.max().item())
        emit(
            part="compare",
            prompt_tokens=n,
            max_abs_logit_diff=float(f"{diff.max().item():.3g}"),
            largest_logit=round(theirs.abs().max().item(), 2),
            same_argmax=bool((ours.argmax(-1) == theirs.argmax(-1)).all()),
        )
    emit(part="compare", prompts="1..512 tokens", max_abs_logit_diff=float(f"{worst:.3g}"), target=1e-4, met=worst <= 1e-4)
    # Where the difference comes from: both models against the course's model in float64 (exact RoPE angles), and
    # transformers again with its RoPE angles computed in float64 (it computes them in float32, even for a float64 model).
    x = torch.tensor([ids])
    with torch.no_grad():
        ours, theirs = model(x)[0].double(), hf(x).logits[0].double()
        exact = copy.deepcopy(model).double()(x)[0]
        patch_rope_float64(hf)
        theirs_exact_rope = hf(x).logits[0].double()
    emit(
        part="compare",
        prompt_tokens=512,
        ours_vs_float64=float(f"{(ours - exact).abs().max().item():.3g}"),
        transformers_vs_float64=float(f"{(theirs - exact).abs().max().item():.3g}"),
        ours_vs_transformers_with_float64_rope=float(f"{(ours - theirs_exact_rope).abs().max().item():.3g}"),
    )
    del hf.model.rotary_emb.forward  # transformers' own rotary embedding again
    prompts = reference_prompts(tokenizer)
    for name in ("7 tokens", "64 tokens", *CHAT_QUESTIONS):
        theirs, margin = hf_greedy(hf, prompts[name], CONTINUATION)
        cached = reply(model, prompts[name], CONTINUATION, stop_ids=(), greedy=True).ids
        uncached = lm.generate(model, torch.tensor([prompts[name]]), CONTINUATION, use_cache=False, greedy=True)[0]
        uncached = uncached[len(prompts[name]) :].tolist()
        emit(
            part="compare",
            greedy_prompt=name,
            tokens=CONTINUATION,
            identical_cached=cached == theirs,
            identical_uncached=uncached == theirs,
            smallest_top2_gap=round(margin, 4),
            text=tokenizer.decode(theirs),
        )
    begin = clock()
    hf_greedy(hf, prompts["chat"], 32)
    emit(part="compare", transformers_greedy_tokens_per_cpu_s=round(32 / (clock() - begin), 1))


def compare_tokenizer(tokenizer) -> None:
    from transformers import AutoTokenizer

    path = smollm2_gguf_path()
    hf_tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    plain = hf_tok.backend_tokenizer
    restored = restored_backend(hf_tok)
    texts = {"pydoc (all)": load_pydoc_text(), **{f"varied {i}": t for i, t in enumerate(VARIED_TEXTS)}}
    total = {"characters": 0, "equal_restored": 0, "equal_plain": 0}
    for name, text in texts.items():
        ours = tokenizer.encode(text, allowed_special="all")
        a = restored.encode(text, add_special_tokens=False).ids
        b = plain.encode(text, add_special_tokens=False).ids
        total["characters"] += len(text)
        total["equal_restored"] += len(text) * (ours == a)
        total["equal_plain"] += len(text) * (ours == b)
        emit(
            part="tokenizer",
            text=name,
            characters=len(text),
            ours=len(ours),
            restored=len(a),
            plain=len(b),
            equal_restored=ours == a,
            equal_plain=ours == b,
        )
    emit(part="tokenizer", **total)
    fixture_ids = load_reference()["tokenizer_ids"].tolist()
    emit(
        part="tokenizer",
        fixture_text_characters=len(tokenizer_text()),
        equal_fixture=tokenizer.encode(tokenizer_text(), allowed_special="all") == fixture_ids,
    )


def dequant(file) -> None:
    from gguf import GGMLQuantizationType, quants

    counts: dict[str, list[int]] = {}
    for info in file.tensors.values():
        theirs = quants.dequantize(info.raw, GGMLQuantizationType[info.kind]).reshape(info.shape)
        ours = file.tensor(info.name).numpy()
        same = ours.dtype == np.float32 and np.array_equal(ours.view(np.uint32), theirs.astype(np.float32).view(np.uint32))
        entry = counts.setdefault(info.kind, [0, 0, 0])
        entry[0] += 1
        entry[1] += int(same)
        entry[2] += info.nbytes
    for kind, (n, same, nbytes) in counts.items():
        emit(part="dequant", type=kind, tensors=n, bit_identical=same, file_bytes=nbytes)


def speed(file, model, tokenizer) -> None:
    begin = clock()
    smollm2_model(file)
    emit(part="speed", load_model_cpu_s=round(clock() - begin, 2))
    weights = sum(p.numel() for p in model.parameters())
    emit(part="speed", parameters=weights, float32_bytes=4 * weights, file_bytes=file.path.stat().st_size)
    text = load_pydoc_text()
    ids = tokenizer.encode(text[250_000:254_000])[:512]
    for n in (16, 64, 128, 256, 512):
        best = float("inf")
        for _ in range(3):
            begin = clock()
            with torch.no_grad():
                model(torch.tensor([ids[:n]]))
            best = min(best, clock() - begin)
        emit(part="speed", prefill_tokens=n, prefill_tokens_per_cpu_s=round(n / best, 1))
    for context in (64, 256, 1024, 4096):
        seconds = lm.time_per_token(model, context, steps=8, repeats=3, prefill=False, clock=clock)
        emit(part="speed", cached_context=context, generated_tokens_per_cpu_s=round(1 / seconds, 2))
    for context in (64, 128, 256):
        seconds = lm.time_per_token(model, context, steps=2, use_cache=False, repeats=2, clock=clock)
        emit(part="speed", uncached_context=context, generated_tokens_per_cpu_s=round(1 / seconds, 2))
    config = file.config
    formula = AttentionConfig("SmolLM2-135M", config.layers, config.heads, config.kv_heads, config.head_dim)
    for context in (512, 8192):
        measured = cache_bytes_of(model, context) if context <= 512 else None
        emit(
            part="speed",
            kv_cache_context=context,
            formula_bytes=formula.cache_bytes(context, bytes_per_value=4),
            measured_bytes=measured,
            as_mha_bytes=formula.as_mha().cache_bytes(context, bytes_per_value=4),
        )


def fake_quantizers() -> dict[str, tuple[float, object]]:
    """``{name: (bits per weight, weights -> rounded weights)}``: Q8_0, Q4_0 and the k-bit generalisation of Q4_0."""

    def q8(w):
        return quant.dequantize_q8_0(quant.quantize_q8_0(w))

    def q40(w):
        return quant.dequantize_q4_0(quant.quantize_q4_0(w))

    def k_bit(bits):
        return lambda w: quant.dequantize_symmetric(*quant.quantize_symmetric(w, bits), bits)

    table = {"Q8_0": (8.5, q8), "Q6 (k-bit)": (6.5, k_bit(6)), "Q5 (k-bit)": (5.5, k_bit(5)), "Q4_0": (4.5, q40)}
    table |= {"Q3 (k-bit)": (3.5, k_bit(3)), "Q2 (k-bit)": (2.5, k_bit(2))}
    return table


def quality(file, model, tokenizer, tokens: int, window: int, part: str) -> None:
    ids = torch.tensor(heldout_ids(tokenizer, tokens + 1))
    base = text_loss(model, ids, window)
    emit(part=part, weights="the file's (Q4_1 matrices, Q8_0 embedding)", bits=5.0, loss=round(base, 4), tokens=tokens)
    for name, (bits, fn) in fake_quantizers().items():
        for embedding in (False, True) if part == "quant" and name in ("Q8_0", "Q4_0") else (False,):
            requantize(model, file, fn, include_embedding=embedding)
            loss = text_loss(model, ids, window)
            emit(
                part=part,
                weights=name + (" + embedding" if embedding else ""),
                bits=bits,
                loss=round(loss, 4),
                loss_increase=round(loss - base, 4),
                tokens=tokens,
            )
    requantize(model, file, None, include_embedding=True)


def notebook_numbers(file, model, tokenizer) -> None:
    reference = load_reference()
    worst = {}
    for name in PROMPT_NAMES:
        ids = reference[f"ids/{name}"].tolist()
        with torch.no_grad():
            logits = model(torch.tensor([ids]))[0]
        positions = torch.from_numpy(reference[f"positions/{name}"].astype(np.int64))
        vocab = torch.from_numpy(reference[f"vocab/{name}"].astype(np.int64))
        ours = logits[positions[:, None], vocab]
        worst[name] = float(f"{(ours - torch.from_numpy(reference[f'logits/{name}'])).abs().max().item():.3g}")
    emit(part="notebook", max_abs_logit_diff_vs_fixture=worst, capability=os.environ.get("ATEN_CPU_CAPABILITY", "native"))
    prompts = reference_prompts(tokenizer)
    for run in range(3):  # the notebook's timing cell
        long = reply(model, prompts["512 tokens"], 16, stop_ids=(), greedy=True)
        short = reply(model, prompts["code"], CONTINUATION, greedy=True)
        uncached = 1 / uncached_seconds_per_token(model, prompts["chat"], 4)
        emit(
            part="notebook",
            run=run,
            prefill_over_generation=round(long.prefill_tokens_per_second / long.tokens_per_second, 2),
            cache_speedup=round(short.tokens_per_second / uncached, 2),
            prefill_tokens_per_cpu_s=round(long.prefill_tokens_per_second, 1),
            generated_tokens_per_cpu_s=round(short.tokens_per_second, 2),
            uncached_tokens_per_cpu_s=round(uncached, 2),
        )
    quality(file, model, tokenizer, 256, 256, "notebook")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixture", action="store_true", help="write data/smollm2_reference.npz and stop")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    args = parser.parse_args()
    torch.set_num_threads(1)
    emit(
        torch=torch.__version__,
        python=platform.python_version(),
        machine=platform.machine(),
        threads=1,
        capability=os.environ.get("ATEN_CPU_CAPABILITY", "native"),
        cpu=cpu_name(),
    )
    if args.fixture:
        fixture()
        return
    file = open_smollm2()
    tokenizer = file.tokenizer()
    model = smollm2_model(file)
    if "compare" in args.only:
        compare(file, model, tokenizer)
    if "tokenizer" in args.only:
        compare_tokenizer(tokenizer)
    if "dequant" in args.only:
        dequant(file)
    if "speed" in args.only:
        speed(file, model, tokenizer)
    if "quant" in args.only:
        quality(file, model, tokenizer, 2048, 512, "quant")
    if "notebook" in args.only:
        notebook_numbers(file, model, tokenizer)


if __name__ == "__main__":
    main()
