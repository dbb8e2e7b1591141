"""Shared fixtures: small tokenizers trained on text the tests generate, and the servers of the
test session's own (``tests.servers``: containers or local binaries). Server clients are
imported where used: the trainer's tests also run on a GPU machine that has no Kafka or Redis
client installed."""

from __future__ import annotations

import gzip
import json
import os
import random
import signal
import socket
import threading
import time
from pathlib import Path

# pytest-xdist's workers share the machine's cores: one OpenMP thread each (torch's and OpenBLAS's
# pools, and the processes a test starts), set before either is imported. At the default, the
# pools' threads outnumber the cores and spin against each other: three trainer test modules in
# two workers took 124 s of CPU, and 46 s with one thread each.
if "PYTEST_XDIST_WORKER" in os.environ:
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

try:
    # transformers' log handler keeps the sys.stderr it is made with. Made here, it writes to
    # pytest's session-long capture; made inside a test's capsys, it would write to a stream closed
    # after that test, and every later warning of transformers would add a "Logging error" to the
    # stderr another test reads.
    from transformers.utils import logging as transformers_logging

    transformers_logging.get_logger("transformers")
except ImportError:  # a machine without the trainer's extra
    pass

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import read_corpus
from tests.servers import (  # the servers' fixtures and report hooks, for every test
    broker,  # noqa: F401
    postgres_server,  # noqa: F401
    postgres_url,  # noqa: F401
    pytest_report_header,  # noqa: F401
    pytest_terminal_summary,  # noqa: F401
    redis_cluster,  # noqa: F401
    redis_url,  # noqa: F401
)

NEW_WORDS = ["blockchain", "quantum", "llama", "vector", "prompt", "agentic", "embedding", "rollout"]
WORDS = [
    "stream",
    "token",
    "merge",
    "drift",
    "commit",
    "revise",
    "vocab",
    "tensor",
    "model",
    "data",
    "kafka",
    "redis",
    "beam",
    "train",
    "byte",
    "pair",
    "sink",
    "graph",
    "epoch",
    "batch",
]


def sentences(n: int, *, seed: int = 0, words: list[str] = WORDS) -> list[str]:
    """Deterministic pseudo-English sentences over a small word list."""
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + rng.choice([".", "!", "?", ""])
        for _ in range(n)
    ]


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return sentences(400)


@pytest.fixture(scope="session")
def byte_tokenizer(corpus) -> BPETokenizer:
    return BPETokenizer.train(corpus, vocab_size=320)


# Llama-2's pipeline: spaces written as "▁" with one prepended, no pre-tokenizer, byte fallback.
LLAMA2_PIPELINE = {
    "normalizer": {
        "type": "Sequence",
        "normalizers": [
            {"type": "Prepend", "prepend": "▁"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        ],
    },
    "pre_tokenizer": None,
    "decoder": {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    },
}


def sentencepiece_style(texts: list[str], *, vocab_size: int) -> BPETokenizer:
    """A SentencePiece-style BPE shaped like Llama-2's tokenizer.json (LLAMA2_PIPELINE, <unk> <s>
    </s>, the 256 <0xNN> byte-fallback tokens), trained on ``texts`` by ``tokenizers``: words split
    at "▁" for training only, as SentencePiece trains."""
    from tokenizers import models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    bytes_ = [f"<0x{b:02X}>" for b in range(256)]
    hf.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=["▁"], show_progress=False
        ),
    )
    data = json.loads(hf.to_str())
    vocab = data["model"]["vocab"]
    for token in bytes_:
        vocab.setdefault(token, len(vocab))
    data.update(LLAMA2_PIPELINE)
    data["model"].update(fuse_unk=True)
    return BPETokenizer.from_json(json.dumps(data))


@pytest.fixture(scope="session")
def sp_tokenizer(corpus) -> BPETokenizer:
    return sentencepiece_style(corpus, vocab_size=400)


@pytest.fixture(scope="session")
def drifting_corpus(tmp_path_factory):
    """600 documents whose vocabulary moves from WORDS to NEW_WORDS over 'time'."""
    path = tmp_path_factory.mktemp("corpus") / "stream.jsonl.gz"
    old, new = sentences(300, seed=1), sentences(300, seed=2, words=NEW_WORDS + WORDS[:4])
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i, text in enumerate(old + new):
            f.write(json.dumps({"id": i, "ts": f"2020-01-01T00:{i // 60:02d}:{i % 60:02d}", "text": text}) + "\n")
    return path


@pytest.fixture(scope="session")
def corpus_tokenizer(drifting_corpus, tmp_path_factory):
    """A tokenizer.json trained on the drifting corpus itself."""
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    BPETokenizer.train([d.text for d in read_corpus(drifting_corpus)], vocab_size=330).save(path)
    return path


def edit_tokenizer_model(data, edit: str, a: int, b: int):
    """One plausible hand edit of a tokenizer.json's model (many of them still pass validation)."""
    model = data["model"]
    vocab, merges = model["vocab"], model["merges"]
    tokens = sorted(vocab, key=vocab.get)
    ta, tb = tokens[a % len(tokens)], tokens[b % len(tokens)]
    if edit == "drop merge":
        merges.pop(a % len(merges))
    elif edit == "repeat merge":
        merges.insert(b % len(merges), merges[a % len(merges)])
    elif edit == "swap merges":
        i, j = a % len(merges), b % len(merges)
        merges[i], merges[j] = merges[j], merges[i]
    elif edit == "swap ids":
        vocab[ta], vocab[tb] = vocab[tb], vocab[ta]
    elif edit == "move id into a hole":
        vocab[ta] = len(vocab) + b % 1000
    elif edit == "drop token":
        del vocab[ta]
    elif edit == "add token":
        vocab[f"tok{a}"] = len(vocab) + 5 + b % 50
    elif edit == "ignore_merges":
        model["ignore_merges"] = True
    elif edit == "special token":
        data["added_tokens"].append(
            {
                "id": vocab[ta],
                "content": ta,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    return data


def tedtok_lineage(*, seed: int, steps: int, lineage: str = "demo"):
    """An initial tokenizer and the revisions Ted-Tok makes of it over a stream drifting to NEW_WORDS."""
    from tokenizer_service.tedtok import TedTok, TedTokConfig

    initial = BPETokenizer.train(sentences(300), vocab_size=320)
    tedtok = TedTok(initial, config=TedTokConfig(alpha=0.3, batch_size=5, interval=2), lineage=lineage)
    for step in range(steps):
        tedtok.observe_texts(sentences(20, seed=seed + step, words=NEW_WORDS + WORDS[:3]))
    return initial, tedtok.revisions


REAL_TOKENIZERS = Path(os.environ.get("TOKMAINT_TOKENIZER_CACHE") or Path.home() / ".cache" / "tokmaint" / "tokenizers")


def real_tokenizer_path(family: str) -> Path:
    """A real production tokenizer.json of ``family`` (``make real-tokenizers`` fetches them);
    the test that asks skips, saying so, where there is none."""
    path = REAL_TOKENIZERS / family / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"{path} does not exist: `make real-tokenizers` (part of `make test`) fetches it")
    return path


REGISTRY_TOKEN = "r" * 32  # the write token of registry_server


@pytest.fixture(scope="module")
def registry_server(tmp_path_factory):
    """A registry server of the module's own (SQLite, a free loopback port): its URL and folder."""
    from registry.local_server import start_server

    root = tmp_path_factory.mktemp("registry")
    process, url = start_server(root, env={"TOKMAINT_REGISTRY_TOKEN": REGISTRY_TOKEN})
    yield url, root
    process.terminate()
    process.wait(timeout=30)


def consume(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list:
    """Every record of ``topic`` from the start (all its partitions), until ``expected`` came or
    none came for ``timeout`` seconds; no consumer group (a join costs seconds on tansu)."""
    from pipeline.kafka import read_topic

    return read_topic(bootstrap, topic, quiet_ms=int(timeout * 1000), expected=expected)


def produce(bootstrap: str, topic: str, records: list) -> None:
    """Send ``records`` (``pipeline.kafka.Record``s or ``(value, key)`` pairs) and wait until the
    broker has them all."""
    from pipeline.kafka import Producer

    with Producer(bootstrap, max_record_bytes=4 << 20) as producer:
        producer.send_all(topic, records)


def trickle_body(sock: socket.socket, stop: threading.Event) -> None:
    """A request body sent a byte every 0.1 s on ``sock`` until ``stop`` is set or the server
    answers and closes: a client far under any upload rate floor that never stalls outright."""
    try:
        while not stop.is_set():
            sock.sendall(b" ")
            time.sleep(0.1)
    except OSError:  # the server answered and closed
        pass


def trickle(
    bootstrap: str,
    topic: str,
    corpus: Path,
    *,
    per_round: tuple[int, ...] = (10, 6, 3, 1),
    pause: float = 0.02,
    stall: tuple[int, float] | None = None,
) -> threading.Thread:
    """A slow producer, started: the corpus's documents onto partition k % 4 of a new topic (each
    partition in time order), partition p getting ``per_round[p]`` more each round, a short pause
    (well under the readers' wait) between rounds: partitions at different speeds, records coming
    across many of a reader's polls. ``stall``: (round, seconds), a pause that long after that
    round (past the readers' wait: a producer stopped for a while, mid-step). ``join`` it for the
    end of the stream."""
    from pipeline.kafka import Producer, Record, create_topic
    from schemas.document import StreamDocument, encode_document

    create_topic(bootstrap, topic, partitions=4)
    values = [
        encode_document(StreamDocument(id=f"doc-{k:03d}", text=doc.text, ts=doc.ts))
        for k, doc in enumerate(read_corpus(corpus).documents)
    ]
    queues = [values[p::4] for p in range(4)]

    def send() -> None:
        with Producer(bootstrap) as producer:
            rounds = 0
            while any(queues):
                for p, count in enumerate(per_round):
                    chunk, queues[p] = queues[p][:count], queues[p][count:]
                    producer.send_all(topic, [Record(value, partition=p) for value in chunk])
                rounds += 1
                time.sleep(stall[1] if stall is not None and rounds == stall[0] else pause)

    thread = threading.Thread(target=send, name="trickle", daemon=True)
    thread.start()
    return thread


def ctrl_c_works() -> None:
    """``preexec_fn`` of a command a test interrupts with SIGINT: a suite started in the
    background of a shell (``make test &``) ignores SIGINT, its children inherit that, and Python
    then never raises KeyboardInterrupt. The child takes SIGINT's default back before it starts."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
