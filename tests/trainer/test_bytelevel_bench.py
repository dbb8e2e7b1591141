"""bench bytelevel: ByteSampler's Tables 3-5 at a small scale, on the shipped sample."""

from trainer.bytelevel_bench import BytelevelBenchSettings, run_bytelevel_bench


def test_the_figures_of_tables_3_to_5():
    report = run_bytelevel_bench(
        None, BytelevelBenchSettings(max_mb=0.3, vocab_size=300, epochs=1, samples=12, prefix_bytes=40, seq_len=48)
    )
    tokens = report["tokens_per_prefix"]
    # The tree's inner nodes hold the canonical tokenization's positions: never fewer.
    assert tokens["bytesampler"] >= tokens["plain"] > 0 and report["overhead"] >= 0
    assert set(report["next_char_accuracy"]) == {"bytesampler", "naive"}
    assert all(0 <= a <= 1 for a in report["next_char_accuracy"].values())
    assert set(report["bits_per_char"]) == {"bytesampler", "naive", "plain"}
    assert all(0 < b < 32 for b in report["bits_per_char"].values())
    assert report["samples"] == 12
