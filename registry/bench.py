"""``tokmaint bench registry``: publish latency, download throughput and the load a real registry
server takes.

It trains a tokenizer of ``vocab_size`` on the corpus's oldest ``max_mb``, makes ``publishes``
Ted-Tok revisions of K = ``batch_size`` from it, starts its own server (SQLite in a temporary
directory, ``tokmaint registry serve`` on a free loopback port), publishes them one by one
(``publish_ms``: p50/p99 of the client's wall time per publish: the request built and sent, the
server's checks and storage; the revisions' JSON is made beforehand), then
downloads one version's tokenizer.json from ``clients`` concurrent keep-alive connections for
``seconds`` (``get_rps``) and revalidates it with ``If-None-Match`` (``get_304_rps``).

The Hub protocol (``registry.api.routes.hub``): ``hub_resolve_rps``, HEADs a second of
``/{lineage}/resolve/latest/tokenizer.json`` from ``clients`` connections (each a database read
of the latest number), and ``hub_download_ms``: ``AutoTokenizer.from_pretrained`` of a version
with ``HF_ENDPOINT`` at the server, in a process of its own (the median of ``repeats``): cold (an
empty cache), warm (the cache full: a HEAD a file) and from the same files on disk, and
``warm_vs_disk``; of ``hub_tokenizer`` (a tokenizer.json: a 150k-token one is the target's
case), or the benchmark's own.

Then ``load``: the trainers' mix, open loop, at rates doubling from ``start_rps``
(``registry.load_test.load_ramp``): of every 25 requests, 14 ask for the latest version, 7
revalidate a tokenizer.json, 3 list versions and 1 is a write (a rollback of a small lineage,
which publishes a version). It reports the highest rate served whole with p99 ≤ 500 ms, the
rate where the p99 passes it, what the server answered past that (503 with Retry-After once
``max_in_flight`` requests are in flight), any request left unanswered, and the writes: every
rollback answered 201 must be in the registry, numbered as answered (``writes.lost``: 0).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
from tqdm import tqdm

from registry.client import RegistryClient
from registry.load_test import REFUSED, LoadRampSettings, LoadRequest, Ramp, closed_loop_rps, load_ramp
from registry.local_server import start_server
from schemas.registry_api import VersionPublic
from tokenizer_service.bench.corpus_tokenizer import CorpusTokenizerSettings
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, oldest, read_corpus
from tokenizer_service.errors import TokmaintError
from tokenizer_service.settings import Number, SettingsConfigDict, setting, whole
from tokenizer_service.tedtok import TedTok, TedTokConfig


# pydantic lists the last base's fields first: the ramp's, then the corpus's and the tokenizer's (the order of --help).
class RegistryBenchSettings(CorpusTokenizerSettings, LoadRampSettings):
    model_config = SettingsConfigDict(env_prefix="TOKMAINT_BENCH_REGISTRY_")

    batch_size: int = setting(100, whole(1), "adds+deletes of each published revision (K)")
    publishes: int = setting(20, whole(2), "revisions published (for p50/p99)")
    clients: int = setting(16, whole(1), "concurrent download clients")
    # The registry serves twice the ingest server's rate (its answers are smaller, none waits for Kafka).
    start_rps: float = setting(50.0, Number(float, low=0, low_open=True), "the ramp's first rate (requests/s)")
    max_rps: float = setting(6400.0, Number(float, low=0, low_open=True), "the ramp's highest rate")
    hub_tokenizer: str | None = setting(
        None,
        None,
        "a tokenizer.json whose from_pretrained over the Hub protocol is timed (default: the benchmark's own)",
    )
    repeats: int = setting(5, whole(1), "timed from_pretrained loads of each kind (the median is reported)")


# Run in a process of its own, with HF_ENDPOINT at the registry and a fresh HF_HOME: the loads of
# a tokenizer by transformers alone (the first load pays transformers' own first-use costs, so
# the cold figure is a second cold load, into a second empty cache).
_FROM_PRETRAINED = """
import json, statistics, sys, tempfile, time
from huggingface_hub import snapshot_download
from transformers import AutoTokenizer
repo, revision, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])

def ms(load):
    started = time.perf_counter()
    load()
    return 1000 * (time.perf_counter() - started)

AutoTokenizer.from_pretrained(repo, revision=revision, cache_dir=tempfile.mkdtemp())
cold = ms(lambda: AutoTokenizer.from_pretrained(repo, revision=revision))
warm = statistics.median(ms(lambda: AutoTokenizer.from_pretrained(repo, revision=revision)) for _ in range(repeats))
folder = snapshot_download(repo, revision=revision, local_files_only=True)
disk = statistics.median(ms(lambda: AutoTokenizer.from_pretrained(folder)) for _ in range(repeats))
print(json.dumps({"cold": cold, "warm": warm, "disk": disk, "warm_vs_disk": warm / disk,
                  "tokens": len(AutoTokenizer.from_pretrained(folder))}))
"""


def hub_download_ms(url: str, repo: str, revision: str, *, repeats: int) -> dict[str, float]:
    """``AutoTokenizer.from_pretrained(repo, revision=...)`` timed in a process of its own with
    ``HF_ENDPOINT`` at ``url``: cold, warm and from disk (milliseconds), and warm over disk."""
    with tempfile.TemporaryDirectory(prefix="tokmaint-bench-hub-") as home:
        env = {
            **os.environ,
            "HF_ENDPOINT": url,
            "HF_HOME": home,
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "TRANSFORMERS_VERBOSITY": "error",
        }
        done = subprocess.run(
            [sys.executable, "-c", _FROM_PRETRAINED, repo, revision, str(repeats)],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    if done.returncode:
        raise TokmaintError(f"from_pretrained over the Hub protocol failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def trainers_mix(name: str, writes: str, *, sha256: str, token: str) -> Callable[[int], LoadRequest]:
    """Request ``i`` of the load: of every 25, 14 latest-version lookups, 7 revalidations of
    version 2's tokenizer.json, 3 version listings and a rollback of ``writes`` to its version 1.

    >>> make = trainers_mix("git", "w", sha256="ab", token="t")
    >>> [make(i).method + " " + make(i).path for i in (0, 14, 21, 24)]  # doctest: +NORMALIZE_WHITESPACE
    ['GET /v1/tokenizers/git/versions/latest', 'GET /v1/tokenizers/git/versions/2/tokenizer.json',
     'GET /v1/tokenizers/git/versions?limit=20', 'POST /v1/tokenizers/w/rollback']
    """
    base = f"/v1/tokenizers/{name}"
    reads = (
        [LoadRequest("GET", f"{base}/versions/latest")] * 14
        + [LoadRequest("GET", f"{base}/versions/2/tokenizer.json", (("If-None-Match", f'"{sha256}"'),))] * 7
        + [LoadRequest("GET", f"{base}/versions?limit=20")] * 3
    )
    write = LoadRequest(
        "POST",
        f"/v1/tokenizers/{writes}/rollback",
        (("Authorization", f"Bearer {token}"), ("Content-Type", "application/json")),
        b'{"to": 1}',
    )
    return lambda i: write if i % 25 == 24 else reads[i % 25]


def writes_kept(ramp: Ramp, client: RegistryClient, writes: str) -> dict[str, int]:
    """Every rollback the server answered 201 is a version of ``writes`` with the number it
    answered, version 1's content; how many were accepted, refused, and lost."""
    answered = [a for a in ramp.answers if a.index % 25 == 24]
    accepted = [VersionPublic.model_validate_json(a.body).number for a in answered if a.status == 201]
    first = client.version(writes, 1).sha256
    kept: dict[int, str] = {}
    while page := client.versions(writes, limit=1000, offset=len(kept)).data:  # the listing is paged
        kept |= {v.number: v.sha256 for v in page}
    return {
        "accepted": len(accepted),
        "refused": sum(a.status in REFUSED for a in answered),
        "lost": sum(kept.get(number) != first for number in accepted),
    }


def run_registry_bench(
    corpus: str | Path, settings: RegistryBenchSettings | None = None, *, progress: bool = True
) -> dict:
    settings = settings or RegistryBenchSettings()
    docs = oldest(read_corpus(corpus, progress=progress), settings.max_mb)
    tokenizer = BPETokenizer.train([d.text for d in docs], vocab_size=settings.vocab_size, progress=progress)
    small = BPETokenizer.train([d.text for d in docs[:200]], vocab_size=300)  # the load's writes: rollbacks of it
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
        # Every client of the benchmark is this one address: its share is the whole server.
        process, url = start_server(
            Path(root),
            env={
                "TOKMAINT_REGISTRY_TOKEN": token,
                "TOKMAINT_REGISTRY_MAX_IN_FLIGHT": str(settings.max_in_flight),
                "TOKMAINT_REGISTRY_MAX_IN_FLIGHT_PER_CLIENT": str(settings.max_in_flight),
            },
        )
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
            target = f"{url}{info.tokenizer_url}"
            size_mb = len(httpx.get(target).content) / 1e6
            get_rps = closed_loop_rps(target, clients=settings.clients, seconds=settings.seconds)
            get_304_rps = closed_loop_rps(
                target,
                clients=settings.clients,
                seconds=settings.seconds,
                headers={"If-None-Match": f'"{info.sha256}"'},
                expected=304,
            )
            hub_resolve_rps = closed_loop_rps(
                f"{url}/bench/resolve/latest/tokenizer.json",
                clients=settings.clients,
                seconds=settings.seconds,
                method="HEAD",
            )
            hub_repo = "bench"
            if settings.hub_tokenizer is not None:
                hub_repo = "bench-hub"
                client.create(hub_repo, Path(settings.hub_tokenizer).read_bytes(), kind="import")
            hub = hub_download_ms(url, hub_repo, "v1", repeats=settings.repeats)
            client.create("bench-writes", small.to_json())
            ramp = load_ramp(
                url,
                trainers_mix("bench", "bench-writes", sha256=info.sha256, token=token),
                start_rps=settings.start_rps,
                max_rps=settings.max_rps,
                seconds=settings.seconds,
                progress=progress,
            )
            load = {
                **ramp.report(),
                "writes": writes_kept(ramp, client, "bench-writes"),
                "max_in_flight": settings.max_in_flight,
            }
        finally:
            process.terminate()
            process.wait(timeout=30)
    return {
        "publish_ms": {"p50": float(np.percentile(latencies, 50)), "p99": float(np.percentile(latencies, 99))},
        "get_rps": get_rps,
        "get_304_rps": get_304_rps,
        "hub_resolve_rps": hub_resolve_rps,
        "hub_download_ms": hub,
        "tokenizer_mb": size_mb,
        "vocab_size": len(tokenizer),
        "changed_ids_per_publish": float(np.mean([len(r.diff.entries) for r in revisions])),
        "publishes": len(revisions),
        "clients": settings.clients,
        "load": load,
    }
