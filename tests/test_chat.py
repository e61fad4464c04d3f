"""helpers.chat (notebook 16): the dequantizers and quantizers equal gguf's, the tokenizer gives transformers' ids, the
model from the file gives transformers' logits and greedy tokens (stored in data/smollm2_reference.npz by
benchmarks/bench_chat.py, so that no test loads transformers), the chat template is the file's, the names and the
row permutation map the file onto notebook 11's block, and bad input gets a clear message."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helpers.chat import quant
from helpers.chat.chat import DEFAULT_SYSTEM, chat_prompt, render_template, reply
from helpers.chat.gguf import GGUFFile, gguf_module, open_smollm2
from helpers.chat.model import (
    NAME_MAP,
    apply_rope_halves,
    file_name,
    halves_to_pairs,
    pairs_to_halves,
    requantize,
    smollm2_model,
    text_loss,
)
from helpers.chat.reference import (
    CONTINUATION,
    PROMPT_NAMES,
    heldout_ids,
    load_reference,
    logit_errors,
    reference_prompts,
    tokenizer_text,
)
from helpers.data.common import DataError
from helpers.models.lm import apply_rope, rope_angles

gguf = gguf_module()


@pytest.fixture(scope="module")
def file():
    return open_smollm2()


@pytest.fixture(scope="module")
def tokenizer(file):
    return file.tokenizer()


@pytest.fixture(scope="module")
def model(file):
    return smollm2_model(file)


@pytest.fixture(scope="module")
def reference():
    return load_reference()


# ---------------------------------------------------------------- the file


def test_the_file_holds_smollm2(file):
    config = file.config
    assert (config.layers, config.d_model, config.heads, config.kv_heads, config.head_dim) == (30, 576, 9, 3, 64)
    assert (config.d_ff, config.vocab, config.context, config.rope_base) == (1536, 49152, 8192, 100000.0)
    assert config.norm_eps == pytest.approx(1e-5)
    kinds = [info.kind for info in file.tensors.values()]
    assert (len(kinds), kinds.count("Q4_1"), kinds.count("Q8_0"), kinds.count("F32")) == (272, 210, 1, 61)
    assert file.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)  # PyTorch's (out, in)
    assert file.tensors["blk.0.ffn_down.weight"].gguf_shape == (1536, 576)  # ggml's [in, out]
    assert len(file.merges) == 48_900 and len(file.tokens) == 49_152
    assert list(file.special_tokens())[:3] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def test_a_file_that_is_not_gguf_is_a_clear_error(tmp_path):
    path = tmp_path / "not.gguf"
    path.write_bytes(b"hello, this is not a GGUF file" * 10)
    with pytest.raises(DataError, match="could not be read as a GGUF file"):
        GGUFFile(path)


def test_unknown_tensor_names_are_clear(file):
    with pytest.raises(KeyError, match="no tensor"):
        file.tensor("blk.0.attn_qkv.weight")


def test_a_dequantizer_may_return_its_weights_flat(file):
    """The check accepts the weights flat, (n * 32,); the reader builds the same matrix from them."""
    flat = {"Q4_1": lambda blocks: quant.dequantize_q4_1(blocks).reshape(-1)}
    assert torch.equal(file.tensor("blk.0.attn_k.weight", flat), file.tensor("blk.0.attn_k.weight"))
    with pytest.raises(ValueError, match="gave shape"):
        file.tensor("blk.0.attn_k.weight", {"Q4_1": lambda blocks: quant.dequantize_q4_1(blocks)[:, :16]})


# ---------------------------------------------------------------- quantization


def test_every_tensor_dequantizes_to_ggufs_numbers_bit_for_bit(file):
    seen = set()
    for info in file.tensors.values():
        if info.kind in seen and not info.name.startswith("blk.29"):
            continue  # every type, and the whole last block
        seen.add(info.kind)
        theirs = gguf.quants.dequantize(info.raw, gguf.GGMLQuantizationType[info.kind]).reshape(info.shape)
        ours = file.tensor(info.name).numpy()
        assert ours.dtype == np.float32 and np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)), info.name
    assert seen == {"F32", "Q4_1", "Q8_0"}


@pytest.mark.parametrize("kind", ["Q8_0", "Q4_0"])
def test_quantizers_write_ggufs_bytes(kind):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(500, 32, generator=gen) * 10 ** torch.empty(500, 1).uniform_(-3, 1, generator=gen)
    x[0] = 0.0
    x[1, :4] = torch.tensor([1.5, -1.5, 0.5, 127.0])  # ties for roundf
    ours = {"Q8_0": quant.quantize_q8_0, "Q4_0": quant.quantize_q4_0}[kind](x).numpy()
    theirs = gguf.quants.quantize(x.numpy(), gguf.GGMLQuantizationType[kind]).reshape(ours.shape)
    assert np.array_equal(ours, theirs)
    back = {"Q8_0": quant.dequantize_q8_0, "Q4_0": quant.dequantize_q4_0}[kind](torch.from_numpy(theirs))
    expected = gguf.quants.dequantize(theirs, gguf.GGMLQuantizationType[kind]).reshape(back.shape)
    assert np.array_equal(back.numpy().view(np.uint32), expected.view(np.uint32))


def test_k_bit_rule_at_4_bits_is_q4_0():
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    d, q = quant.quantize_symmetric(x, 4)
    assert torch.equal(quant.dequantize_symmetric(d, q, 4), quant.dequantize_q4_0(quant.quantize_q4_0(x)))
    errors = [(quant.dequantize_symmetric(*quant.quantize_symmetric(x, b), b) - x).pow(2).mean().item() for b in (2, 3, 4, 6, 8)]
    assert errors == sorted(errors, reverse=True)  # every bit more, a smaller error


def test_nibbles_round_trip_low_first():
    codes = torch.arange(32, dtype=torch.uint8)[None] % 16
    packed = quant.pack_nibbles(codes)
    assert packed[0, 0].item() == 0x00 | (0 << 4) and packed[0, 1].item() == 1 | (1 << 4)
    assert torch.equal(quant.unpack_nibbles(packed), codes)


def test_bad_blocks_are_clear_errors():
    with pytest.raises(TypeError, match="uint8"):
        quant.dequantize_q8_0(torch.zeros(2, 34))
    with pytest.raises(ValueError, match=r"\(n_blocks, 20\)"):
        quant.dequantize_q4_1(torch.zeros(2, 34, dtype=torch.uint8))
    with pytest.raises(ValueError, match="whole number of blocks"):
        quant.quantize_q8_0(torch.zeros(33))
    with pytest.raises(ValueError, match="between 2 and 8"):
        quant.quantize_symmetric(torch.zeros(32), 9)


# ---------------------------------------------------------------- names and the rows of Q and K


def test_names_map_both_ways(model):
    names = [name for name, _ in model.named_parameters()]
    assert len(names) == 272 and len(NAME_MAP) == 9
    assert file_name("blocks.3.attn.w_q.weight") == "blk.3.attn_q.weight"
    assert file_name("blocks.29.ff.w1.weight") == "blk.29.ffn_gate.weight"
    assert file_name("embed.weight") == "token_embd.weight" and file_name("norm.weight") == "output_norm.weight"
    with pytest.raises(KeyError, match="not a parameter"):
        file_name("blocks.0.attn.w_qkv.weight")


def test_the_permutation_turns_halves_into_neighbours():
    x = torch.randn(2, 3, 5, 16, dtype=torch.float64)  # (b, heads, n, d)
    angles = rope_angles(5, 16, 100000.0)
    w = torch.randn(4 * 16, 8, dtype=torch.float64)  # 4 heads of 16 rows
    assert torch.equal(pairs_to_halves(halves_to_pairs(w, 4), 4), w)
    # RoPE on the halves of transformers' rows equals RoPE on the neighbours of the permuted rows
    h = torch.randn(7, 8, dtype=torch.float64)
    q_halves = (h @ w.T).reshape(7, 4, 16).transpose(0, 1)  # (heads, n, d)
    q_pairs = (h @ halves_to_pairs(w, 4).T).reshape(7, 4, 16).transpose(0, 1)
    a = apply_rope_halves(q_halves, rope_angles(7, 16))
    b = apply_rope(q_pairs, rope_angles(7, 16))
    assert torch.allclose(a @ a.transpose(-1, -2), b @ b.transpose(-1, -2), atol=1e-12)
    assert apply_rope_halves(x, angles).shape == x.shape
    with pytest.raises(ValueError, match="even width"):
        halves_to_pairs(torch.zeros(9, 2), 3)


def test_transformers_rows_permute_into_the_files(file, reference):
    q = torch.from_numpy(reference["hf_q_columns"])
    k = torch.from_numpy(reference["hf_k_columns"])
    assert torch.equal(halves_to_pairs(q, 9), file.tensor("blk.0.attn_q.weight")[:, :8])
    assert torch.equal(halves_to_pairs(k, 3), file.tensor("blk.0.attn_k.weight")[:, :8])


# ---------------------------------------------------------------- the tokenizer and the template


def test_the_encoder_gives_transformers_ids(tokenizer, reference):
    text = tokenizer_text()
    assert len(text) >= 100_000
    assert tokenizer.encode(text, allowed_special="all") == reference["tokenizer_ids"].tolist()


def test_the_stored_prompts_are_the_tokenizers(tokenizer, reference):
    for name, ids in reference_prompts(tokenizer).items():
        assert ids == reference[f"ids/{name}"].tolist(), name


def test_the_template_is_the_files(file):
    conversations = [
        [{"role": "user", "content": "Hi"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
        [],
    ]
    for messages in conversations:
        for generation in (True, False):
            assert chat_prompt(messages, generation) == render_template(file.chat_template, messages, generation)
    assert chat_prompt([{"role": "user", "content": "Hi"}]).startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n")
    with pytest.raises(TypeError, match="role"):
        chat_prompt([{"text": "Hi"}])
    with pytest.raises(TypeError, match="list of"):
        chat_prompt("Hi")


# ---------------------------------------------------------------- the model against transformers


def test_logits_match_transformers(model, reference):
    errors = logit_errors(model, reference, PROMPT_NAMES)
    assert max(errors.values()) < 2e-4, errors  # 1.2e-4 at 512 tokens on the AMD EPYC, 6e-5 up to 64 tokens
    assert max(errors[name] for name in ("1 token", "7 tokens", "64 tokens", "chat", "code")) < 1e-4, errors


def test_greedy_continuations_match_transformers(model, reference):
    for name in ("chat", "code"):
        prompt = reference[f"ids/{name}"].tolist()
        out = reply(model, prompt, CONTINUATION, stop_ids=(), greedy=True)
        assert out.ids == reference[f"greedy/{name}"].tolist(), name
        assert len(out.step_seconds) == CONTINUATION - 1 and out.prefill_tokens_per_second > 0


def test_reply_stops_at_the_end_token_and_samples_reproducibly(model, tokenizer):
    ids = tokenizer.encode(chat_prompt([{"role": "user", "content": "What is the capital of France?"}]), allowed_special="all")
    out = reply(model, ids, 24, greedy=True)
    assert tokenizer.decode(out.ids) == "The capital of France is Paris.<|im_end|>"
    a = reply(model, ids, 5, temperature=0.7, top_p=0.9, generator=torch.Generator().manual_seed(0))
    b = reply(model, ids, 5, temperature=0.7, top_p=0.9, generator=torch.Generator().manual_seed(0))
    assert a.ids == b.ids
    with pytest.raises(ValueError, match="at least 1"):
        reply(model, ids, 0)
    with pytest.raises(ValueError, match="empty"):
        reply(model, [], 3)


def test_requantizing_costs_more_with_fewer_bits(model, file, tokenizer):
    ids = torch.tensor(heldout_ids(tokenizer, 65))
    base = text_loss(model, ids, 64)
    requantize(model, file, lambda w: quant.dequantize_q8_0(quant.quantize_q8_0(w)))
    q8 = text_loss(model, ids, 64)
    requantize(model, file, lambda w: quant.dequantize_symmetric(*quant.quantize_symmetric(w, 2), 2))
    q2 = text_loss(model, ids, 64)
    requantize(model, file, None)
    assert text_loss(model, ids, 64) == base
    assert abs(q8 - base) < 0.05 and q2 > base + 1.0
