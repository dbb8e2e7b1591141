"""zip2zip's model side: hypertokens read and predicted beside base tokens, a proper distribution
at every position, the embedding cache, fine-tuning on compressed contexts, reading a code at a
time, generation, saved folders and the commands."""

import json
import math

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from tests.support.models import tiny_model

from tests.conftest import sentences
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.lzw import LZW, contexts
from trainer.export import write_model_folder
from trainer.zip2zip import HyperCache, Zip2zipLM, Zip2zipReader, bits_per_byte, finetune, generate, hyper_parameters


@pytest.fixture(scope="module")
def corpus_ids():
    texts = sentences(200, seed=3)
    tokenizer = BPETokenizer.train(texts, vocab_size=300)
    return tokenizer, contexts(tokenizer.encode_batch(texts), context=96)


def _model(rows: int, *, max_merge: int = 3, layers: int = 1, seed: int = 0) -> Zip2zipLM:
    torch.manual_seed(seed)
    gpt = GPT2LMHeadModel(
        GPT2Config(
            n_layer=2,
            n_head=2,
            n_embd=32,
            n_positions=128,
            vocab_size=rows + 1,
            resid_pdrop=0,
            embd_pdrop=0,
            attn_pdrop=0,
        )
    )
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
        codes = batch.ids[row, 1 : batch.lengths[row]].tolist()
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


@pytest.fixture(scope="module")
def trained(corpus_ids):
    """A model fine-tuned on the compressed contexts, its hyper-encoder no longer mean pooling."""
    tokenizer, windows = corpus_ids
    model = _model(tokenizer.id_space)
    finetune(model, windows, steps=40, batch=8, lr=3e-3)
    assert model.hyper.out.weight.abs().sum() > 0
    return model


def test_reading_a_code_at_a_time_gives_what_the_whole_context_gives(corpus_ids, trained):
    """The key/value cache, the hyper-embedding cache and the codebook, grown a code at a time (or
    a prompt at once, then a code at a time), give each position the log-probabilities the
    forward pass over the whole context gives it: the same columns finite, the same values."""
    tokenizer, windows = corpus_ids
    model, rows = trained, trained.rows
    batch = model.batch(windows[3:4])
    with torch.no_grad():
        whole = model(batch, full=True).log_probs[0]
    codes = batch.ids[0, 1 : batch.lengths[0]].tolist()
    for prompt in (0, 17):
        reader = Zip2zipReader(model)
        positions = [(prompt, codes[:prompt])] + [(p + 1, [c]) for p, c in enumerate(codes[prompt:-1], start=prompt)]
        for position, read in positions:
            got = reader.read(read)
            known = len(reader.codebook.entries)
            expected = torch.cat([whole[position, : rows + known], whole[position, -1:]])
            assert got.shape == expected.shape
            assert torch.equal(torch.isfinite(got), torch.isfinite(expected))
            finite = torch.isfinite(expected)
            assert torch.allclose(got[finite], expected[finite], atol=1e-4), position
        assert reader.codebook.entries == batch.books[0][: len(reader.codebook.entries)]


def test_generation_emits_codes_the_encoder_would_make(corpus_ids, trained):
    """Generated codes decompress to base ids whose LZW compression is those codes again (the
    prompt's and the output's together: the codebook grew with the output), and their bytes are
    the text; hypertokens are generated; no special token or id outside the version comes out;
    a seed gives the same text twice."""
    tokenizer, _ = corpus_ids
    model = trained
    lzw = LZW(base_size=model.rows, max_merge=model.max_merge)
    prompt = " ".join(sentences(3, seed=11))
    hypertokens = 0
    for seed in range(4):
        made = generate(model, tokenizer, prompt, max_bytes=120, seed=seed)
        assert made.codes[: made.prompt_codes] == lzw.encode(tokenizer.encode(prompt))
        assert lzw.encode(lzw.decode(made.codes)) == made.codes
        assert lzw.decode(made.codes)[len(tokenizer.encode(prompt)) :] == made.base_ids
        assert made.data == b"".join(tokenizer.token_bytes(tokenizer.id_to_token[i]) for i in made.base_ids)
        assert len(made.data) >= 120 and made.text == tokenizer.decode(made.base_ids)
        hypertokens += sum(c >= model.rows for c in made.codes[made.prompt_codes :])
    assert hypertokens > 0
    assert (
        generate(model, tokenizer, prompt, max_bytes=60, seed=1).codes
        == generate(model, tokenizer, prompt, max_bytes=60, seed=1).codes
    )


def test_generation_stops_when_the_context_is_full(corpus_ids, trained):
    tokenizer, _ = corpus_ids
    made = generate(trained, tokenizer, "", max_bytes=10_000, seed=0)
    # The bos and the codes read fill every position; the last position still predicts one more.
    assert len(made.codes) == trained.positions
    assert len(made.data) < 10_000


def test_a_saved_model_loads_as_it_was_and_a_plain_one_as_mean_pooling(corpus_ids, trained, tmp_path):
    tokenizer, windows = corpus_ids
    trained.save(tmp_path / "z2z", tokenizer, {"lineage": "demo", "version": 3})
    loaded, loaded_tokenizer = Zip2zipLM.load(tmp_path / "z2z", device="cpu")
    assert loaded_tokenizer.sha256 == tokenizer.sha256 and loaded.max_merge == 3 and loaded.hyper.layers == 1
    spelled = {i: len(tokenizer.token_bytes(t)) for t, i in tokenizer.vocab.items()}
    assert bits_per_byte(loaded, windows[:3], spelled)["bits_per_byte"] == pytest.approx(
        bits_per_byte(trained, windows[:3], spelled)["bits_per_byte"], rel=1e-6
    )
    with pytest.raises(Exception, match="at most 3 base tokens, not 2"):
        Zip2zipLM.load(tmp_path / "z2z", max_merge=2)
    write_model_folder(trained.base, tokenizer, {"lineage": "demo", "version": 3}, tmp_path / "plain")
    plain, _ = Zip2zipLM.load(tmp_path / "plain", max_merge=2, device="cpu")
    assert (plain.max_merge, plain.hyper.layers) == (2, 0)
    assert json.loads((tmp_path / "z2z" / "tokmaint.json").read_text())["version"] == 3


def test_the_commands_train_generate_and_evaluate_a_zip2zip_folder(tmp_path, capsys):
    """trainer zip2zip writes a folder; generate --zip2zip prints plain generation's form from it;
    eval bytes --zip2zip scores a corpus on the same bytes plain evaluation counts."""
    from tokmaint.cli import main

    texts = sentences(120, seed=5)
    tokenizer = BPETokenizer.train(texts, vocab_size=300, special_tokens=["<|endoftext|>"])
    gpt = tiny_model(tokenizer.id_space, n_embd=32, n_positions=96)
    write_model_folder(gpt, tokenizer, {"lineage": "demo", "version": 1}, tmp_path / "plain")
    corpus = tmp_path / "docs.txt"
    corpus.write_text("\n".join(texts) + "\n")

    def run(*args: str) -> dict:
        assert main([*args, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    trained = run(
        "trainer",
        "zip2zip",
        "--model",
        str(tmp_path / "plain"),
        "--corpus",
        str(corpus),
        "--out",
        str(tmp_path / "z2z"),
        "--steps",
        "5",
        "--max-merge",
        "4",
    )
    assert trained["context"] == 95 and trained["max_merge"] == 4 and "zip2zip.safetensors" in trained["files"]
    made = run("generate", "--model", str(tmp_path / "z2z"), "--zip2zip", "--prompt", texts[0], "--max-bytes", "40")
    assert made["prompt"] == texts[0] and made["bytes"] >= 40 and made["max_merge"] == 4
    assert made["codes"] <= made["base_tokens"] and made["continuation"]
    scored = run("eval", "bytes", "--model", str(tmp_path / "z2z"), "--zip2zip", "--corpus", str(corpus))
    assert scored["documents"] == 120 and scored["truncated"] == 0
    assert scored["bytes"] == sum(len(t.encode()) for t in texts) and 0 < scored["codes"] <= scored["base_tokens"]
    plain = run("eval", "bytes", "--model", str(tmp_path / "z2z"), "--corpus", str(corpus), "--max-documents", "5")
    assert plain["documents"] == 5  # the folder is a plain model too
    with pytest.raises(SystemExit) as refused:
        main(
            [
                "generate",
                "--model",
                str(tmp_path / "z2z"),
                "--model",
                str(tmp_path / "z2z"),
                "--zip2zip",
                "--prompt",
                "a",
            ]
        )
    assert refused.value.code == 2 and "reads one --model" in capsys.readouterr().err


@pytest.mark.parametrize(
    "damage, message",
    [
        ("weights truncated", "zip2zip.safetensors is not the hyper-encoder zip2zip.json describes"),
        ("weights of another shape", "zip2zip.safetensors is not the hyper-encoder zip2zip.json describes"),
        ("config missing a field", "zip2zip.json is not a zip2zip config: no 'layers'"),
        ("config not JSON", "zip2zip.json is not a zip2zip config: not JSON"),
        (
            "config out of range",
            "zip2zip.json is not a zip2zip config: max_merge must be a whole number in [1, 64], got 0",
        ),
    ],
)
def test_a_damaged_zip2zip_folder_is_refused_in_one_line(corpus_ids, trained, tmp_path, damage, message):
    from safetensors.torch import save_file

    from tokenizer_service.errors import TokmaintError

    tokenizer, _ = corpus_ids
    folder = tmp_path / "z2z"
    trained.save(folder, tokenizer, {"lineage": "demo", "version": 3})
    config = json.loads((folder / "zip2zip.json").read_text())
    if damage == "weights truncated":
        (folder / "zip2zip.safetensors").write_bytes((folder / "zip2zip.safetensors").read_bytes()[:200])
    elif damage == "weights of another shape":
        save_file(
            {"decoder.weight": torch.zeros(3, 3), "decoder.bias": torch.zeros(3)}, str(folder / "zip2zip.safetensors")
        )
    elif damage == "config missing a field":
        (folder / "zip2zip.json").write_text(json.dumps({k: v for k, v in config.items() if k != "layers"}))
    elif damage == "config not JSON":
        (folder / "zip2zip.json").write_text("{")
    else:
        (folder / "zip2zip.json").write_text(json.dumps({**config, "max_merge": 0}))
    with pytest.raises(TokmaintError) as refused:
        Zip2zipLM.load(folder, device="cpu")
    assert message in str(refused.value) and "\n" not in str(refused.value)
