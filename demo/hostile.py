"""The soak's hostile clients (``bench soak --hostile``): what an anonymous or careless client
can do to the registry and the ingest server, done all the while the soak's load and faults go on.

* **slow readers** ask for the largest file the registry serves (a model's weights) with a tiny
  receive window and never read it; each holds its socket ``hold`` seconds, then comes again;
* **slow writers** send a publish's or a batch of documents' body a byte a second, with a token;
* **oversized** bodies declare a length past the server's limit, and a model's tar declares a
  300 MB sparse file in a few kilobytes;
* **model uploads** publish a folder whose files are stored already while **garbage collection**
  (``older_than`` 0) runs in a process of its own throughout: the race that must never leave a
  version or a model without its files.

Meanwhile a **reader** asks for the lineage's latest version and its tokenizer over the Hub
protocol, as any client would; each of its requests that is refused as ``overloaded`` (503) or
left unanswered while the registry is up is *starved*. Each hostile client comes from a loopback
address of its own (``127.0.0.2`` …), as different hosts would; the rest come from ``127.0.0.1``.

    hostile = HostileClients(registry_url=..., ingest_url=..., token=..., lineage="soak-api", ...)
    hostile.start(); ...; hostile.stop(); report = hostile.report(down=[(killed, back), ...])
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from registry.artifacts import LocalArtifactStore
from registry.client import RegistryClient, RegistryRefused
from tokenizer_service.bpe import BPETokenizer

log = logging.getLogger("tokmaint.soak")
SPARSE_BYTES = 300 << 20  # what the sparse entry declares
RECEIVE_WINDOW = 4096  # a slow reader's receive buffer: the server's sends stall at once


def status_of(answer: bytes) -> int:
    """The status code of a raw HTTP/1.1 answer (0: none, or not HTTP).

    >>> status_of(b"HTTP/1.1 408 Request Timeout\\r\\ncontent-length: 0\\r\\n\\r\\n"), status_of(b"")
    (408, 0)
    """
    parts = answer.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and answer.startswith(b"HTTP/") and parts[1].isdigit() else 0


def request_head(method: str, url: str, *, headers: dict[str, str] | None = None) -> bytes:
    """An HTTP/1.1 request line and headers for ``url``, ready to send on a socket.

    >>> request_head("GET", "http://127.0.0.1:8000/x?y=1")
    b'GET /x?y=1 HTTP/1.1\\r\\nHost: 127.0.0.1:8000\\r\\n\\r\\n'
    """
    parts = urlsplit(url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {parts.netloc}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def connect(url: str, *, source: str, receive_window: int | None = None, timeout: float = 10.0) -> socket.socket:
    """A TCP connection to ``url``'s host from the loopback address ``source``."""
    parts = urlsplit(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_window is not None:  # before connecting: the window is agreed in the handshake
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_window)
    sock.settimeout(timeout)
    try:
        sock.bind((source, 0))
        sock.connect((parts.hostname, parts.port))
    except OSError:
        sock.close()
        raise
    return sock


def sparse_model_tar(folder: Path) -> bytes:
    """A model's tar (``folder``'s small files) whose ``model.safetensors`` is a GNU sparse entry
    declaring ``SPARSE_BYTES`` of holes: a few kilobytes that would expand to 300 MB."""
    with tempfile.TemporaryDirectory(prefix="tokmaint-sparse-") as work:
        root = Path(work)
        for path in folder.iterdir():
            if path.name != "model.safetensors":
                (root / path.name).write_bytes(path.read_bytes())
        with open(root / "model.safetensors", "wb") as holes:
            holes.truncate(SPARSE_BYTES)
        # Python's tarfile reads sparse entries but does not write them: GNU tar does.
        subprocess.run(
            [
                "tar",
                "--sparse",
                "--format=gnu",
                "-cf",
                str(root / "model.tar"),
                "-C",
                str(root),
                *sorted(p.name for p in root.iterdir() if p.name != "model.tar"),
            ],
            check=True,
        )
        return (root / "model.tar").read_bytes()


def write_weighty_model(tokenizer: BPETokenizer, lineage: str, version: int, out: Path) -> Path:
    """A model folder of ``tokenizer``'s version with about 16 MB of weights: larger than what
    the kernel's socket buffers take, so that a reader who does not read stalls the server's send."""
    import torch
    from transformers import GPT2LMHeadModel

    from trainer.export import write_model_folder
    from trainer.loop import tiny_gpt2_config

    torch.manual_seed(0)
    model = GPT2LMHeadModel(tiny_gpt2_config(tokenizer.id_space, n_head=4, n_embd=384, bos_token_id=0, eos_token_id=0))
    write_model_folder(model, tokenizer, {"lineage": lineage, "version": version}, out)
    return out


@dataclass
class HostileClients:
    """The hostile clients and the reader, as threads; ``stop`` ends them, ``report`` says what
    they got. ``db`` and ``artifacts`` are the registry's store, which garbage collection reads."""

    registry_url: str
    ingest_url: str
    token: str
    lineage: str  # the clients' lineage (models are published beside its version 1)
    read_lineage: str  # the lineage the reader reads
    db: str
    artifacts: str
    model: Path
    slow_readers: int = 80  # past the registry's 64 places, from four hosts
    slow_writers: int = 4
    hold: float = 20.0
    stop_event: threading.Event = field(default_factory=threading.Event)
    counts: Counter = field(default_factory=Counter)
    answers: dict[str, Counter] = field(default_factory=dict)
    reads: list[tuple[float, int]] = field(default_factory=list)  # (time, status; 0: no answer)
    gc_errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)
    gc_process: subprocess.Popen | None = None

    def _answered(self, kind: str, status: int) -> None:
        with self.lock:
            self.answers.setdefault(kind, Counter())[str(status)] += 1

    def _count(self, kind: str) -> None:
        with self.lock:
            self.counts[kind] += 1

    def start(self, *, python: str, env: dict[str, str]) -> None:
        """Publish the model beside the lineage's version 1 (what the slow readers ask for), then
        start every client (``python``: the interpreter garbage collection's process runs in)."""
        with RegistryClient(self.registry_url, token=self.token, timeout=60) as client:
            client.publish_model(self.lineage, self.model, version=1)
        weights = f"{self.registry_url}/{self.lineage}-models/resolve/v1/model.safetensors"
        for k in range(self.slow_readers):
            self._thread(self._slow_reader, weights, f"127.0.0.{2 + k % 4}")
        for k in range(self.slow_writers):
            target = (
                f"{self.registry_url}/v1/tokenizers/{self.lineage}/versions"
                if k % 2 == 0
                else f"{self.ingest_url}/v1/streams/docs/documents"
            )
            self._thread(self._slow_writer, target, f"127.0.0.{6 + k % 2}")
        self._thread(self._oversized)
        self._thread(self._uploads)
        self._thread(self._read)
        self.gc_process = subprocess.Popen(
            [python, "-c", _GC_LOOP, self.db, self.artifacts],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def _thread(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)

    def _slow_reader(self, url: str, source: str) -> None:
        head = request_head("GET", url)
        while not self.stop_event.is_set():
            try:
                sock = connect(url, source=source, receive_window=RECEIVE_WINDOW)
            except OSError:  # the registry is down
                self.stop_event.wait(1.0)
                continue
            with sock:
                sock.sendall(head)
                self._count("slow_readers")
                self.stop_event.wait(self.hold)

    def _json_post_head(self, url: str, length: int) -> bytes:
        """The head of an authorised JSON POST to ``url`` that declares a body of ``length`` bytes
        (the slow writer and the oversized bodies send less, or none, of it)."""
        return request_head(
            "POST",
            url,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Content-Length": str(length),
            },
        )

    def _slow_writer(self, url: str, source: str) -> None:
        declared = 100_000
        head = self._json_post_head(url, declared)
        kind = "slow_writer_registry" if "/tokenizers/" in url else "slow_writer_ingest"
        while not self.stop_event.is_set():
            try:
                sock = connect(url, source=source, timeout=1.0)
                sock.sendall(head)
            except OSError:
                self.stop_event.wait(1.0)
                continue
            self._count(kind)
            status = 0
            with sock:
                for _ in range(declared):
                    if self.stop_event.is_set():
                        break
                    try:
                        sock.sendall(b" ")
                        answer = sock.recv(4096)  # a second's wait for an answer between two bytes
                    except TimeoutError:
                        continue
                    except OSError:  # the server closed the connection
                        break
                    status = status_of(answer)
                    break
            if status or not self.stop_event.is_set():
                self._answered(kind, status)

    def _oversized(self) -> None:
        """Bodies past the limit (declared, not sent) to both servers, and the sparse tar."""
        sparse = sparse_model_tar(self.model)
        targets = [
            (f"{self.registry_url}/v1/tokenizers/{self.lineage}/versions", "oversized_registry"),
            (f"{self.ingest_url}/v1/streams/docs/documents", "oversized_ingest"),
        ]
        while not self.stop_event.is_set():
            for url, kind in targets:
                head = self._json_post_head(url, 10 << 30)
                try:
                    with connect(url, source="127.0.0.8", timeout=10.0) as sock:
                        sock.sendall(head + b"{" * 65536)
                        self._answered(kind, status_of(sock.recv(4096)))
                except OSError:
                    self._answered(kind, 0)
            try:
                response = httpx.post(
                    f"{self.registry_url}/v1/tokenizers/{self.lineage}/models",
                    params={"version": "1"},
                    content=sparse,
                    timeout=30,
                    headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-tar"},
                )
                self._answered("sparse_upload", response.status_code)
            except httpx.HTTPError:
                self._answered("sparse_upload", 0)
            self.stop_event.wait(1.0)

    def _uploads(self) -> None:
        """The same model again and again: every file is stored already, as gc runs."""
        with RegistryClient(self.registry_url, token=self.token, timeout=60) as client:
            while not self.stop_event.is_set():
                try:
                    client.publish_model(self.lineage, self.model, version=1)
                    self._answered("model_upload", 201)
                except RegistryRefused as exc:
                    self._answered("model_upload", exc.status)
                except (httpx.HTTPError, OSError):
                    self._answered("model_upload", 0)
                self.stop_event.wait(0.5)

    def _read(self) -> None:
        urls = [
            f"{self.registry_url}/v1/tokenizers/{self.read_lineage}/versions/latest",
            f"{self.registry_url}/{self.read_lineage}/resolve/main/tokenizer.json",
        ]
        with httpx.Client(timeout=10) as client:
            while not self.stop_event.is_set():
                for url in urls:
                    try:
                        status = client.get(url).status_code
                    except httpx.HTTPError:
                        status = 0
                    with self.lock:
                        self.reads.append((time.monotonic(), status))
                self.stop_event.wait(0.1)

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)
        if self.gc_process is not None:
            self.gc_process.terminate()
            out, err = self.gc_process.communicate(timeout=60)
            runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            self.counts["gc_runs"] = len(runs)
            self.counts["gc_removed"] = sum(run["removed"] for run in runs)
            self.gc_errors = [line for line in err.splitlines() if line.startswith("gc:")]

    def report(self, *, down: list[tuple[float, float]]) -> dict[str, Any]:
        """What the hostile clients got (``accepted_bad``: their stalled, oversized or sparse
        requests answered 2xx, which must be none), the reader's starved requests (refused or unanswered
        while the registry was up: outside ``down``'s (killed, answering again) windows), and
        every artifact the registry's versions and models name that is not stored."""
        starved = [
            (at, status)
            for at, status in self.reads
            if status in (0, 503) and not any(a <= at <= b + 1.0 for a, b in down)
        ]
        accepted_bad = sum(
            n
            for kind, answers in self.answers.items()
            if kind != "model_upload"
            for status, n in answers.items()
            if status.startswith("2")
        )
        return {
            "counts": dict(self.counts),
            "answers": {k: dict(v) for k, v in sorted(self.answers.items())},
            "accepted_bad": accepted_bad,
            "reads": len(self.reads),
            "starved": len(starved),
            "gc_errors": self.gc_errors,
            "missing_artifacts": self.missing_artifacts(),
        }

    def missing_artifacts(self) -> list[str]:
        """Each artifact a version, its diff or a model names that the store lacks, as ``what: sha256``."""
        from sqlalchemy import select
        from sqlalchemy.orm import Session

        from registry.db import make_engine
        from registry.models import PublishedModel, Version

        store, engine = LocalArtifactStore(self.artifacts), make_engine(self.db)
        try:
            with Session(engine) as session:
                named = [
                    (f"version {v.number}", sha)
                    for v in session.scalars(select(Version))
                    for sha in (v.sha256, v.diff_sha256)
                    if sha
                ]
                named += [
                    (f"model {m.number} {file}", f["sha256"])
                    for m in session.scalars(select(PublishedModel))
                    for file, f in m.files.items()
                ]
        finally:
            engine.dispose()
        return [f"{what}: {sha}" for what, sha in named if not store.exists(sha)]


# Garbage collection in a process of its own, as `registry gc` runs beside a registry: everything
# older than nothing, again and again; one JSON line a run.
_GC_LOOP = """
import json, sys, time
from registry.artifacts import LocalArtifactStore
from registry.db import make_engine
from registry.store import Registry
registry = Registry(make_engine(sys.argv[1]), LocalArtifactStore(sys.argv[2]))
while True:
    try:
        result = registry.collect_garbage(older_than=0.0)
        print(json.dumps({"removed": result["removed"]}), flush=True)
    except Exception as exc:
        print(f"gc: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
    time.sleep(0.2)
"""
