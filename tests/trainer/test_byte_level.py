"""Byte-level probabilities (ByteSampler): exact against brute force on a tiny vocabulary and a
randomly initialised tiny GPT-2; the next-byte distribution and the chain rule; ensembles."""

import math

import numpy as np
import pytest
import torch
from transformers import GPT2LMHeadModel

from tests.support.models import tiny_model

from tests.trainer.conftest import TEXTS
from tokenizer_service.bpe import BPETokenizer
from trainer.byte_level import (
    ByteLevelModel,
    ByteVocabulary,
    completions,
    covering_tree,
    ensemble_log_prob,
    ensemble_next_byte,
    generate,
    valid_pair,
)


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(TEXTS, vocab_size=300)


@pytest.fixture(scope="module")
def model(tokenizer) -> ByteLevelModel:
    rows = tokenizer.id_space + 1  # one more row: the bos
    gpt = tiny_model(rows, n_layer=2, n_embd=32, bos_token_id=rows - 1, eos_token_id=rows - 1)
    return ByteLevelModel(gpt, tokenizer, bos_token_id=rows - 1)


def _covering_sequences(tokenizer: BPETokenizer, prefix: bytes) -> list[tuple[int, ...]]:
    """Every token sequence that covers ``prefix``, enumerated exhaustively, kept when the
    tokenizer itself writes it again (``encode(decode(T)) == T``, Hugging Face's decode)."""
    tokens = {i: tokenizer.token_bytes(t) for i, t in tokenizer.id_to_token.items()}
    found = []

    def extend(done: tuple[int, ...], k: int) -> None:
        for i, b in tokens.items():
            if k + len(b) < len(prefix):
                if prefix[k : k + len(b)] == b:
                    extend(done + (i,), k + len(b))
            elif b.startswith(prefix[k:]):
                found.append(done + (i,))

    extend((), 0)
    return [t for t in found if _writes(tokenizer, t)]


def _writes(tokenizer: BPETokenizer, ids: tuple[int, ...]) -> bool:
    """The definition of validity: the tokenizer writes the bytes as these tokens; bytes that end
    inside a character, for some completion of it (the tokens up to there, a boundary there)."""
    data = b"".join(tokenizer.token_bytes(tokenizer.id_to_token[i]) for i in ids)
    hf = tokenizer.hf
    try:
        return hf.encode(data.decode(), add_special_tokens=False).ids == list(ids)
    except UnicodeDecodeError as exc:
        if exc.reason != "unexpected end of data":
            return False
        for w in completions(data[exc.start :]):
            encoded = hf.encode((data + w).decode(), add_special_tokens=False).ids
            if encoded[: len(ids)] == list(ids):
                return True
        return False


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
    assert result.log_prob_canonical == pytest.approx(
        _sequence_log_prob(model, tuple(tokenizer.encode(text))), abs=1e-6
    )
    assert result.log_prob >= result.log_prob_canonical
    assert result.bits_per_byte == pytest.approx(-result.log_prob / math.log(2) / len(data))


@pytest.mark.parametrize("cut", [1, 2, 4])
def test_bytes_that_end_inside_a_character(model, tokenizer, cut):
    """A prefix that ends inside 日本 (3 bytes a character): covered by tokens that finish it, and
    by those that end inside it where some completion keeps them."""
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
    checked = 0
    for a, b in rng.choice(ids, size=(1000, 2)):
        try:
            text = (vocab.token_bytes[a] + vocab.token_bytes[b]).decode()
        except UnicodeDecodeError:
            continue
        assert valid_pair(vocab, int(a), int(b)) == (tokenizer.encode(text) == [a, b])
        checked += 1
    assert checked > 250


def test_the_exported_folder_loads_in_transformers_and_gives_the_checkpoints_logits(checkpoint, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainer.export import export_model

    path, gpt, tokenizer = checkpoint
    written = export_model(path, tmp_path / "model")
    assert written["bos_token_id"] == tokenizer.vocab["<|endoftext|>"] == 0 and written["version"] == 3
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert loaded.config.bos_token_id == 0
    assert (tmp_path / "model" / "model.safetensors").is_file()
    hf_tokenizer = AutoTokenizer.from_pretrained(tmp_path / "model")
    ids = hf_tokenizer("héllo 日本", add_special_tokens=False)["input_ids"]
    assert ids == tokenizer.encode("héllo 日本") and hf_tokenizer.bos_token == "<|endoftext|>"
    inputs = torch.tensor([[0, *ids]])
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=inputs).logits, gpt.eval()(input_ids=inputs).logits, atol=1e-6)
    export_model(path, tmp_path / "model")  # again: its files replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("a user's")
    from tokenizer_service.errors import TokmaintError

    with pytest.raises(TokmaintError, match="mine is not empty and was not written by tokmaint"):
        export_model(path, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "a user's"


def _cli_json(capsys, *argv: str) -> dict:
    import json

    from tokmaint.cli import main

    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_the_commands_on_a_folder_and_a_checkpoint(checkpoint, tmp_path, capsys):
    path, _, tokenizer = checkpoint
    folder = str(tmp_path / "model")
    _cli_json(capsys, "trainer", "export", "--checkpoint", str(path), "--out", folder, "--json")
    from_folder = _cli_json(capsys, "eval", "bytes", "--model", folder, "--text", "the th", "--json")
    from_checkpoint = _cli_json(capsys, "eval", "bytes", "--model", str(path), "--text", "the th", "--json")
    assert from_folder["log_prob"] == pytest.approx(from_checkpoint["log_prob"], abs=1e-6)
    assert from_folder["bits_per_byte"] == pytest.approx(-from_folder["log_prob"] / math.log(2) / 6)
    assert from_folder["log_prob"] > from_folder["log_prob_canonical"]  # "th" ends inside words too
    assert from_folder["model_tokens"] >= len(tokenizer.encode("the th"))
    twice = _cli_json(capsys, "eval", "bytes", "--model", folder, "--model", folder, "--text", "the th", "--json")
    assert twice["log_prob"] == pytest.approx(from_folder["log_prob"], abs=1e-6)
    nxt = _cli_json(capsys, "eval", "next-byte", "--model", folder, "--text", "the th", "--json")
    assert set(nxt["distribution"]) == {str(b) for b in range(256)}
    assert sum(nxt["distribution"].values()) == pytest.approx(1.0)
    corpus = tmp_path / "docs.txt"
    corpus.write_text("the theme\n12 123\nhéllo\n")
    over = _cli_json(capsys, "eval", "bytes", "--model", folder, "--corpus", str(corpus), "--json")
    assert over["documents"] == 3 and over["bytes"] == len("the theme12 123héllo".encode())
    from tokmaint.cli import main

    assert main(["generate", "--model", folder, "--prompt", "the th", "--max-bytes", "5"]) == 0
    assert capsys.readouterr().out.startswith("the th")


def test_every_prefix_in_one_pass_equals_each_prefix_alone(model):
    data = "then 12 hé".encode()
    together, _ = model.prefix_log_probs(data)
    assert np.allclose(together, [model.prefix(data[:i]).log_prob for i in range(1, len(data) + 1)], atol=1e-6)


def test_an_ensemble_of_two_models_is_the_mean_of_their_conditionals(model, tokenizer):
    torch.manual_seed(5)
    other = ByteLevelModel(GPT2LMHeadModel(model.model.config), tokenizer, bos_token_id=model.bos_token_id)
    data = "the th".encode()
    expected = 0.0
    for i in range(1, len(data) + 1):
        conditionals = [
            math.exp(m.prefix(data[:i]).log_prob - m.prefix(data[: i - 1]).log_prob) for m in (model, other)
        ]
        expected += math.log(sum(conditionals) / 2)
    assert ensemble_log_prob([model, other], data)[0] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("family", ["llama3", "gpt4o"])
def test_proposition_3_1_agrees_with_encoding_the_pair_on_a_real_vocabulary(family):
    """Random pairs of a production byte-level vocabulary (each token one the tokenizer writes
    alone), pairs of a common prefix's tokens among them: the merge-trajectory check says what
    ``encode(decode(pair)) == pair`` says."""
    from tests.conftest import real_tokenizer_path
    from tokenizer_service.bpe import BPETokenizer as Tokenizer

    tokenizer = Tokenizer.from_json(real_tokenizer_path(family).read_text(encoding="utf-8"))
    vocab = ByteVocabulary(tokenizer)
    rng = np.random.default_rng(1)
    ids = [
        i
        for i in rng.choice(sorted(vocab.token_bytes), size=3000, replace=False).tolist()
        if i in tokenizer.id_to_token and tokenizer.id_to_token[i] not in tokenizer.added_tokens
    ]
    alone = [i for i, e in zip(ids, tokenizer.tokenize_words([tokenizer.id_to_token[i] for i in ids])) if e == [i]]
    # Half of the pairs random, half a token and one that often merges with it (short ones).
    short = [i for i in alone if len(vocab.token_bytes[i]) <= 2]
    pairs = [tuple(rng.choice(alone, 2)) for _ in range(1500)] + [tuple(rng.choice(short, 2)) for _ in range(1500)]
    agree = valid = checked = 0
    for a, b in pairs:
        try:
            text = (vocab.token_bytes[a] + vocab.token_bytes[b]).decode()
        except UnicodeDecodeError:
            continue
        expected = tokenizer.encode(text) == [a, b]
        checked += 1
        valid += expected
        agree += valid_pair(vocab, int(a), int(b)) == expected
    assert checked > 2000 and 0 < valid < checked  # both answers occur
    assert agree == checked
