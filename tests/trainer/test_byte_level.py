"""Byte-level probabilities (ByteSampler): exact against brute force on a tiny vocabulary and a
randomly initialised tiny GPT-2; the next-byte distribution and the chain rule; ensembles."""

import math

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tokenizer_service.bpe import BPETokenizer
from trainer.byte_level import (ByteLevelModel, ByteVocabulary, covering_tree, ensemble_log_prob, ensemble_next_byte,
                                generate, valid_pair)

TEXTS = ["the theme then 12 123 1234", "héllo hé hélène", "日本 日本語 本", "a  b   c", "don't it's we've"] * 4


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def model(tokenizer) -> ByteLevelModel:
    torch.manual_seed(0)
    rows = tokenizer.id_space + 1  # one more row: the bos
    gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=64, vocab_size=rows,
                                     bos_token_id=rows - 1, eos_token_id=rows - 1))
    return ByteLevelModel(gpt, tokenizer, bos_token_id=rows - 1)


def _covering_sequences(tokenizer: BPETokenizer, prefix: bytes) -> list[tuple[int, ...]]:
    """Every token sequence that covers ``prefix``, enumerated exhaustively, kept when the
    tokenizer itself writes it again (``encode(decode(T)) == T``, Hugging Face's decode)."""
    tokens = {i: tokenizer.token_bytes(t) for i, t in tokenizer.id_to_token.items()}
    found = []

    def extend(done: tuple[int, ...], k: int) -> None:
        for i, b in tokens.items():
            if k + len(b) < len(prefix):
                if prefix[k:k + len(b)] == b:
                    extend(done + (i,), k + len(b))
            elif b.startswith(prefix[k:]):
                found.append(done + (i,))
    extend((), 0)
    return [t for t in found if tokenizer.hf.encode(tokenizer.decode(t), add_special_tokens=False).ids == list(t)]


@torch.no_grad()
def _sequence_log_prob(model: ByteLevelModel, ids: tuple[int, ...]) -> float:
    """ln Π p(t_i | bos, t_<i): one plain forward pass, no cache."""
    logits = model.model(input_ids=torch.tensor([[model.bos_token_id, *ids]])).logits[0].double()
    lp = torch.log_softmax(logits, dim=-1)
    return float(sum(lp[i, t] for i, t in enumerate(ids)))


@pytest.mark.parametrize("text", ["the", "the th", "then 12", " 123", "héllo h", "日本", "a  b ", "it's", "don'"])
def test_the_prefix_probability_is_the_sum_over_every_covering_sequence(model, tokenizer, text):
    data = text.encode()
    brute = _covering_sequences(tokenizer, data)
    tree = covering_tree(model.vocab, data)
    assert sorted(tree.leaves) == sorted(brute)
    expected = math.log(sum(math.exp(_sequence_log_prob(model, t)) for t in brute))
    result = model.prefix(text)
    assert result.log_prob == pytest.approx(expected, abs=1e-6)
    assert result.log_prob_canonical == pytest.approx(_sequence_log_prob(model, tuple(tokenizer.encode(text))),
                                                      abs=1e-6)
    assert result.log_prob >= result.log_prob_canonical
    assert result.bits_per_byte == pytest.approx(-result.log_prob / math.log(2) / len(data))


@pytest.mark.parametrize("cut", [1, 2, 4])
def test_bytes_that_end_inside_a_character(model, tokenizer, cut):
    """A prefix that ends inside 日本 (3 bytes a character): covered by tokens that finish it."""
    data = "日本".encode()[:cut]
    brute = _covering_sequences(tokenizer, data)
    assert brute  # the characters' tokens finish it
    expected = math.log(sum(math.exp(_sequence_log_prob(model, t)) for t in brute))
    result = model.prefix(data)
    assert result.log_prob == pytest.approx(expected, abs=1e-6) and result.log_prob_canonical == -math.inf


def test_a_prefix_whose_only_cover_is_its_tokenization_gives_the_token_probability(model, tokenizer):
    """Ending on a character no token continues past ("4" then nothing longer starts with it
    in this vocabulary... found by search): the tree is one leaf, the canonical one."""
    for text in ["1234", "12 1234", "the 1234"]:
        tree = covering_tree(model.vocab, text.encode())
        if len(tree.leaves) == 1:
            result = model.prefix(text)
            assert tree.leaves[0] == tuple(tokenizer.encode(text))
            assert result.log_prob == pytest.approx(result.log_prob_canonical, abs=1e-12)
            assert result.model_tokens == len(tokenizer.encode(text))
            return
    pytest.fail("no prefix with a single covering sequence among the examples")


@pytest.mark.parametrize("text", ["the th", "hé", "a  ", "12"])
def test_the_next_byte_distribution_sums_to_one_and_the_chain_rule_holds(model, text):
    distribution = model.next_byte(text)
    assert distribution.shape == (256,) and distribution.sum() == pytest.approx(1.0)
    log_masses, _ = model.next_byte_log_masses(text)
    data = text.encode()
    for b in np.argsort(-distribution)[:5]:  # P(x·b) is the prefix probability of x·b
        assert log_masses[b] == pytest.approx(model.prefix(data + bytes([b])).log_prob, abs=1e-6)
    # What the bytes after x leave out of P(x): the leaves that end exactly at x's end and whose
    # next token makes no valid sequence; never more than P(x).
    assert np.logaddexp.reduce(log_masses) <= model.prefix(data).log_prob + 1e-6


def test_an_ensemble_of_a_model_with_itself_is_the_model(model):
    assert ensemble_log_prob([model, model], "the th")[0] == pytest.approx(model.prefix("the th").log_prob, abs=1e-6)
    assert np.allclose(ensemble_next_byte([model, model], "hé"), model.next_byte("hé"))


def test_generation_is_seeded_and_continues_inside_a_word(model):
    first = generate([model], "the th", max_bytes=6, seed=1)
    assert len(first) == 6 and first == generate([model], "the th", max_bytes=6, seed=1)


def test_pairs_are_valid_as_the_tokenizer_writes_them(tokenizer):
    vocab = ByteVocabulary(tokenizer)
    rng = np.random.default_rng(0)
    ids = sorted(vocab.token_bytes)
    for a, b in rng.choice(ids, size=(300, 2)):
        text = (vocab.token_bytes[a] + vocab.token_bytes[b])
        try:
            expected = tokenizer.encode(text.decode()) == [a, b]
        except UnicodeDecodeError:
            expected = False
        assert valid_pair(vocab, int(a), int(b)) == expected
