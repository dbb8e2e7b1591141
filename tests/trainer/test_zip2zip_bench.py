"""bench zip2zip: token figures and a tiny model's bits per byte with and without hypertokens."""

import pytest

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from trainer.zip2zip_bench import Zip2zipBenchSettings, run_zip2zip_bench


def test_the_figures_at_two_merge_sizes(tmp_path):
    corpus = "data/git-commits-sample.jsonl.gz"
    path = tmp_path / "tokenizer.json"
    BPETokenizer.train(read_corpus(corpus).texts[:300], vocab_size=400).save(path)
    settings = Zip2zipBenchSettings(context=256, max_mb=0.05, train_steps=3, finetune_steps=2, eval_contexts=2)
    report = run_zip2zip_bench(corpus, path, settings, max_merges=[1, 3])
    identity, merged = report["runs"]
    # M = 1 is the base model: no hypertoken, the same training, the same figure.
    assert identity["hypertokens"] == identity["tokens"] and identity["reduction"] == 0
    # (Equal to float rounding: torch's CPU kernels on several threads may add in another order.)
    assert identity["bits_per_byte"]["zip2zip"] == pytest.approx(identity["bits_per_byte"]["base"], rel=1e-6)
    assert 0 < merged["reduction"] < 1 and merged["hypertokens"] < merged["tokens"]
    assert merged["bytes_per_token"]["zip2zip"] > merged["bytes_per_token"]["base"]
    assert 0 < merged["bits_per_byte"]["zip2zip"] < 16
    assert set(report) >= {"tokens", "hypertokens", "reduction", "bytes_per_token", "bits_per_byte", "seconds"}
    top = report["top_hypertokens"]  # at M = 1 (the first asked for) LZW forms none
    assert top == [] and report["top_hypertokens_are_tokens"] == 0
    merged_top = run_zip2zip_bench(corpus, path, settings, max_merges=[2])["top_hypertokens"]
    assert len(merged_top) == 20 and all(t["contexts"] >= 1 and t["text"] for t in merged_top)
    assert [t["contexts"] for t in merged_top] == sorted((t["contexts"] for t in merged_top), reverse=True)
