"""tokenizer_service/bench/arithmetic.py: ``bench arithmetic``, Ted-Tok's Table 2."""


def test_bench_arithmetic_reproduces_table_2():
    """The full SA schedule (16,000 steps, ~1 min): Ted-Tok Table 2's targets, by running it."""
    from tokenizer_service.bench.arithmetic import run_arithmetic

    result = run_arithmetic(progress=False)
    bpt, bare = result["bytes_per_token"], result["bytes_per_token_bare"]
    assert bpt["tedtok"] >= 1.359  # Table 2, on the paper's convention (one delimiter per example)
    assert result["jaccard"]["tedtok_vs_new"] <= 0.2456
    assert bpt["old"] < bpt["new"] and result["jaccard"]["old_vs_new"] > 0.5
    assert all(bare[k] > bpt[k] for k in bpt)  # a delimiter is one byte for one token: it lowers every ratio


def test_the_delimiter_convention_gives_table_2s_new_exactly():
    """New, trained as the benchmark trains it, scores Table 2's 1.366 on the full 60.7K New set."""
    import numpy as np

    from tokenizer_service.bench.arithmetic import ArithmeticSettings, arithmetic_dataset, split_new
    from tokenizer_service.bpe import BPETokenizer

    settings = ArithmeticSettings()
    new_all = arithmetic_dataset(200)
    train, _ = split_new(np.random.default_rng(settings.seed), settings.validation)
    new = BPETokenizer.train(train, vocab_size=settings.vocab_size, byte_level=False)
    assert round(new.bytes_per_token(new_all, delimited=True), 3) == 1.366
    assert round(new.bytes_per_token(new_all), 3) != 1.366
