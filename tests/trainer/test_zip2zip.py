"""zip2zip's model side: hypertokens read and predicted beside base tokens, a proper distribution
at every position, the embedding cache, fine-tuning on compressed contexts."""

import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tests.conftest import sentences
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.lzw import LZW, contexts
from trainer.zip2zip import HyperCache, Zip2zipLM, hyper_parameters


@pytest.fixture(scope="module")
def corpus_ids():
    texts = sentences(200, seed=3)
    tokenizer = BPETokenizer.train(texts, vocab_size=300)
    return tokenizer, contexts(tokenizer.encode_batch(texts), context=96)


def _model(rows: int, *, max_merge: int = 3, layers: int = 1, seed: int = 0) -> Zip2zipLM:
    torch.manual_seed(seed)
    gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=128, vocab_size=rows + 1,
                                     resid_pdrop=0, embd_pdrop=0, attn_pdrop=0))
    return Zip2zipLM(gpt, max_merge=max_merge, layers=layers, bos_token_id=rows)


def test_every_code_is_scored_from_what_the_decoder_knows(corpus_ids):
    """At each position the hypertokens scored are those decodable there; the code that follows
    is always among them (its log-probability finite), and the distribution sums to one."""
    tokenizer, windows = corpus_ids
    model = _model(tokenizer.id_space)
    batch = model.batch(windows[:4])
    rows = model.rows
    lzw = LZW(base_size=rows, max_merge=3)
    for row, window in enumerate(windows[:4]):
        codes = batch.ids[row, 1: batch.lengths[row]].tolist()
        assert lzw.decode(codes) == window
        for p, code in enumerate(codes):
            if code >= rows:  # made before it is read, or the new one guessed from the run before
                known = int(batch.known[row, p])
                assert code - rows < known or (code - rows == known and batch.guess[row][p] is not None)
    out = model(batch)
    assert math.isfinite(out.nats) and out.codes == int(batch.lengths.sum()) - 4
    assert batch.base_tokens == sum(map(len, windows[:4])) and out.codes < batch.base_tokens


def test_a_merge_size_of_one_is_the_base_model(corpus_ids):
    """No hypertoken: the same loss as the GPT-2 itself on the same ids from the bos."""
    tokenizer, windows = corpus_ids
    model = _model(tokenizer.id_space, max_merge=1)
    batch = model.batch(windows[:2])
    ids = batch.ids[:, : int(batch.lengths.max())]
    labels = ids.masked_fill(torch.arange(ids.shape[1])[None, :] >= batch.lengths[:, None], -100)
    expected = model.base(input_ids=ids, labels=labels).loss
    assert model(batch).lm_loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_an_untrained_encoder_is_mean_pooling_and_the_cache_equals_recomputing(corpus_ids):
    tokenizer, windows = corpus_ids
    model = _model(tokenizer.id_space)
    book = model.batch(windows[:1]).books[0]
    weight = model.base.get_input_embeddings().weight
    mean = torch.stack([weight[list(run)].mean(0) for run in book])
    assert torch.allclose(model.hyper_rows(book), mean, atol=1e-6)
    cache = HyperCache(model)
    with torch.no_grad():
        for size in (1, 5, 5, len(book) // 2, len(book)):  # the codebook grows as a context is read
            assert torch.allclose(cache(book[:size]), model.hyper_rows(book[:size]), atol=1e-6)


def test_fine_tuning_on_compressed_contexts_lowers_their_loss(corpus_ids):
    tokenizer, windows = corpus_ids
    model = _model(tokenizer.id_space)
    optimizer = torch.optim.AdamW(list(model.base.parameters()) + hyper_parameters(model), lr=3e-3)
    batch = model.batch(windows[:8])
    before = model(batch).lm_loss.item()
    for _ in range(25):
        out = model(batch)
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    after = model(batch)
    assert after.lm_loss.item() < 0.8 * before and after.reconstruction_loss.item() > 0


def test_what_comes_next_does_not_leak_into_the_distribution(corpus_ids):
    """Two contexts the same up to a point and different after: the distribution over the code
    after their shared codes is the same in both (the hypertoken that reading it will make, whose
    last token is that code's first, is guessed from the run before, not read from the codebook)."""
    tokenizer, windows = corpus_ids
    model = _model(tokenizer.id_space)
    shared = windows[0][:40]
    a, b = shared + windows[1][:30], shared + windows[2][:30]
    assert windows[1][0] != windows[2][0]
    batch = model.batch([a, b])
    codes_a, codes_b = batch.ids[0].tolist(), batch.ids[1].tolist()
    same = next(p for p, (x, y) in enumerate(zip(codes_a, codes_b)) if x != y)  # the first code that differs
    with torch.no_grad():
        out = model(batch, full=True)
    # Position same - 1 predicts the first differing code: its distribution saw only shared codes.
    assert torch.allclose(out.log_probs[0, same - 1], out.log_probs[1, same - 1], atol=1e-5)
