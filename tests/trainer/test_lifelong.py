"""bench lifelong: static and evolving through a drifting stream, scored in bits per byte."""

import pytest

from trainer.lifelong import LifelongBenchSettings, run_lifelong_bench

# A 300-token first version, revised every 32 documents (two steps of 16) after a warm-up of 32.
STREAM = dict(vocab_size=300, step_docs=16, interval_docs=32, warmup_docs=32, horizon_docs=320)
# The new rows' warm-up (5 steps on 512 texts by default) took much of the run; no test here is about it: 2 steps.
SCORED = dict(eval_docs=6, ensemble_docs=3, eval_bytes=48)
SMALL = dict(max_mb=0.15, parts=3, train_batch=8, doc_bytes=96, warm_steps=2, **SCORED, **STREAM)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return run_lifelong_bench(None, LifelongBenchSettings(**SMALL), plot=tmp_path_factory.mktemp("plot"))


def test_the_report_has_every_figure(report):
    assert set(report["bits_per_byte"]) == {"static", "evolving", "ensemble", "static_zip2zip", "evolving_zip2zip"}
    assert (
        set(report["tokens"])
        == set(report["train_seconds"])
        == {"static", "evolving", "static_zip2zip", "evolving_zip2zip"}
    )
    assert report["seconds"] > 0
    assert [row["part"] for row in report["parts"]] == [1, 2]
    assert report["plot"].endswith("lifelong.png")
    for row in report["parts"]:
        assert all(0 < bits < 16 for bits in row["bits_per_byte"].values())
        assert (row["static"], row["evolving"]) == (row["bits_per_byte"]["static"], row["bits_per_byte"]["evolving"])


def test_the_ensemble_is_scored_on_fewer_documents_and_compared_on_those(report):
    """The models on every scored document; the ensemble, and both models beside it, on an evenly
    spaced few: ``ensemble_vs_best`` compares the three on the same bytes."""
    for row in report["parts"]:
        assert (row["documents"], row["ensemble"]["documents"]) == (6, 3)
        assert row["bits_per_byte"]["ensemble"] == row["ensemble"]["ensemble"]
    mean = {k: sum(row["ensemble"][k] for row in report["parts"]) / 2 for k in ("static", "evolving", "ensemble")}
    assert report["ensemble_vs_best"] == pytest.approx(mean["ensemble"] / min(mean["static"], mean["evolving"]) - 1)


def test_the_evolving_model_takes_versions_and_processes_fewer_tokens(report):
    assert report["versions"] > 1 and report["parts"][-1]["version"] > 1
    tokens = report["tokens"]
    assert tokens["evolving"] < tokens["static"]  # the stream's new words in fewer tokens
    # Hypertokens: fewer codes than the tokens they stand for, over either version.
    assert tokens["static_zip2zip"] < tokens["static"] and tokens["evolving_zip2zip"] < tokens["evolving"]


def test_until_the_first_revision_the_two_models_are_one(report):
    """The same weights, batches and version: the same figures, the ensemble too."""
    first = report["parts"][0]
    if first["version"] == 1:
        bits = first["bits_per_byte"]
        assert bits["static"] == bits["evolving"]
        few = first["ensemble"]
        assert few["static"] == few["evolving"] == pytest.approx(few["ensemble"], abs=1e-6)
        assert bits["static_zip2zip"] == pytest.approx(bits["evolving_zip2zip"], rel=1e-6)
        assert first["tokens"]["static"] == first["tokens"]["evolving"]


def test_the_static_model_processes_every_byte_of_each_document_s_start(report):
    """Documents are cut by bytes, not tokens: the static model's tokens are exactly those of each
    document's first ``doc_bytes`` bytes in the first version (nothing cut by a token limit), so
    the two models' counts compare the same text."""
    from tokenizer_service.bpe import BPETokenizer
    from tokenizer_service.corpus import oldest, read_corpus
    from tokenizer_service.hub_files import BOS_TOKENS
    from trainer.byte_level import first_bytes
    from trainer.lifelong import SAMPLE

    settings = LifelongBenchSettings(**SMALL)
    docs = oldest(read_corpus(SAMPLE), settings.max_mb)
    first_part = [d.text for d in docs[: round(len(docs) / settings.parts)]]
    initial = BPETokenizer.train(first_part, vocab_size=settings.vocab_size, special_tokens=[BOS_TOKENS[0]])
    cut = [first_bytes(d.text, settings.doc_bytes) for d in docs]
    assert any(len(initial.encode(text)) > settings.doc_bytes // 2 for text in cut)  # long enough to be cut
    assert report["tokens"]["static"] == sum(len(initial.encode(text)) for text in cut)


def test_token_savings_are_the_evolving_model_s_and_retrained_tokenizers(report):
    savings, tokens = report["token_savings"], report["tokens"]
    assert savings["evolving"] == pytest.approx(1 - tokens["evolving"] / tokens["static"])
    assert savings["evolving"] > 0
    # A tokenizer trained on each part reads the next one in other tokens than the first version.
    assert savings["retrained_each_part"] != 0 and -1 < savings["retrained_each_part"] < 1
    # One trained on the very part it reads saves more than one trained on the part before.
    assert savings["retrained_each_part"] < savings["hindsight_each_part"] < 1
    assert savings["share_of_hindsight"] == pytest.approx(savings["evolving"] / savings["hindsight_each_part"])
