"""``tokmaint bench registry``: publish latency and download throughput of a real registry server.

It trains a tokenizer of ``vocab_size`` on the corpus's oldest ``max_mb``, makes ``publishes``
Ted-Tok revisions of K = ``batch_size`` from it, starts its own server (SQLite in a temporary
directory, ``tokmaint registry serve`` on a free loopback port), publishes them one by one
(``publish_ms``: p50/p99 of the client's wall time per publish: the request built and sent, the
server's checks and storage; the revisions' JSON is made beforehand), then
downloads one version's tokenizer.json from ``clients`` concurrent keep-alive connections for
``seconds`` (``get_rps``) and revalidates it with ``If-None-Match`` (``get_304_rps``).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import secrets
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
from tqdm import tqdm

from registry.client import RegistryClient
from registry.local_server import start_server
from tokenizer_service.bpe import MAX_ID_SPACE, BPETokenizer
from tokenizer_service.corpus import batches, oldest, read_corpus
from tokenizer_service.errors import TokmaintError
from tokenizer_service.options import Number, check_settings, setting, whole
from tokenizer_service.tedtok import TedTok, TedTokConfig


@dataclass(frozen=True)
class RegistryBenchSettings:
    max_mb: float = setting(20.0, Number(float, low=0, low_open=True), "megabytes of the corpus to train on")
    vocab_size: int = setting(50257, whole(257, MAX_ID_SPACE), "vocabulary of the published tokenizer")
    batch_size: int = setting(100, whole(1), "adds+deletes of each published revision (K)")
    publishes: int = setting(20, whole(2), "revisions published (for p50/p99)")
    clients: int = setting(16, whole(1), "concurrent download clients")
    seconds: float = setting(5.0, Number(float, low=0, low_open=True), "seconds of each download test")

    def __post_init__(self) -> None:
        check_settings(self)


async def _hammer(url: str, clients: int, seconds: float, headers: dict[str, str], expected: int) -> float:
    """Requests per second from ``clients`` concurrent keep-alive connections for ``seconds``.

    A minimal HTTP/1.1 client on asyncio streams: a general client (httpx) spends more CPU per
    request than the server on these two cores, and would measure itself.
    """
    target = httpx.URL(url)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"GET {target.raw_path.decode()} HTTP/1.1\r\nHost: {target.host}:{target.port}\r\n{extra}\r\n".encode()
    deadline = time.monotonic() + seconds

    async def worker() -> int:
        reader, writer = await asyncio.open_connection(target.host, target.port)
        done = 0
        try:
            while time.monotonic() < deadline:
                writer.write(request)
                status = int((await reader.readline()).split()[1])
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                if status != expected:
                    raise TokmaintError(f"GET {url} answered {status}, expected {expected}")
                done += 1
        finally:
            writer.close()
        return done

    started = time.monotonic()
    counts = await asyncio.gather(*(worker() for _ in range(clients)))
    return sum(counts) / (time.monotonic() - started)


def run_registry_bench(corpus: str | Path, settings: RegistryBenchSettings = RegistryBenchSettings(), *,
                       progress: bool = True) -> dict:
    docs = oldest(read_corpus(corpus, progress=progress), settings.max_mb)
    tokenizer = BPETokenizer.train([d.text for d in docs], vocab_size=settings.vocab_size, progress=progress)
    # Trained on this very text, no pair beats a sink by the paper's margin; a near-zero margin
    # makes every revision a full K adds and deletes (as in bench throughput).
    tedtok = TedTok(tokenizer, config=TedTokConfig(batch_size=settings.batch_size, beta=1e-9, interval=1))
    revisions = []
    steps = itertools.cycle(list(batches(docs, 256)))  # a small corpus comes round again
    with tqdm(total=settings.publishes, desc="revisions", disable=not progress) as bar:
        while len(revisions) < settings.publishes:
            revision = tedtok.observe_texts(next(steps))
            if revision is not None:
                revisions.append(revision)
                bar.update()
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="tokmaint-bench-registry-") as root:
        process, url = start_server(Path(root), env={"TOKMAINT_REGISTRY_TOKEN": token})
        try:
            client = RegistryClient(url, token=token)
            client.create("bench", tokenizer.to_json())
            latencies = []
            # The producer's own serialisation is not the registry's latency: done beforehand.
            uploads = [(r.tokenizer.to_json(), r.diff.to_json()) for r in revisions]
            # Nor are collections of this process's own training state (millions of objects).
            gc.collect()
            gc.freeze()
            for tokenizer_json, diff_json in tqdm(uploads, desc="publish", disable=not progress):
                started = time.perf_counter()
                client.publish("bench", tokenizer_json, diff_json=diff_json)
                latencies.append(1000 * (time.perf_counter() - started))
            gc.unfreeze()
            info = client.version("bench", 2)
            target = f"{url}{info['tokenizer_url']}"
            size_mb = len(httpx.get(target).content) / 1e6
            get_rps = asyncio.run(_hammer(target, settings.clients, settings.seconds, {}, 200))
            get_304_rps = asyncio.run(_hammer(target, settings.clients, settings.seconds,
                                              {"If-None-Match": f'"{info["sha256"]}"'}, 304))
        finally:
            process.terminate()
            process.wait(timeout=30)
    return {
        "publish_ms": {"p50": float(np.percentile(latencies, 50)), "p99": float(np.percentile(latencies, 99))},
        "get_rps": get_rps,
        "get_304_rps": get_304_rps,
        "tokenizer_mb": size_mb,
        "vocab_size": len(tokenizer),
        "changed_ids_per_publish": float(np.mean([len(r.diff.entries) for r in revisions])),
        "publishes": len(revisions),
        "clients": settings.clients,
    }
