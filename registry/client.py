"""A client of the registry's HTTP API (httpx), the one the CLI, the trainer and the pipeline use.

Downloads are verified against the version's sha256 and cached on disk by sha256, so a cached
file is revalidated with ``If-None-Match`` (a 304 costs no transfer) and never trusted blindly.
Refusals raise :class:`RegistryRefused` with the server's code, HTTP status and every reason.
Answers are the API's own models (``schemas.registry_api``: a version, a page of versions, an
alias, a model) and a diff is a ``schemas.revision.RevisionDiff``.

    client = RegistryClient("http://127.0.0.1:8000", token=os.environ["TOKMAINT_REGISTRY_TOKEN"])
    latest = client.version("news")
    tokenizer_json = client.download("news", latest.number)
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tarfile
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from registry.config import RegistryClientSettings
from registry.refs import version_number
from schemas.registry_api import (
    AliasPublic,
    LineagePublic,
    LineagesPublic,
    ModelPublic,
    ModelsPublic,
    VersionPublic,
    VersionsPublic,
)
from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError
from tokenizer_service.output_dir import write_file


log = logging.getLogger("tokmaint.registry")
# What a registry that is away answers: nothing (0, unreachable), or a proxy's or its own 502-504.
AWAY_STATUSES = frozenset({0, 502, 503, 504})
_JSON = {"Content-Type": "application/json"}
Answer = TypeVar("Answer", bound=BaseModel)
Asked = TypeVar("Asked")


def _text(tokenizer_json: str | bytes) -> str:
    """A tokenizer.json's text: the registry stores the very bytes, so they must be UTF-8."""
    try:
        return tokenizer_json.decode("utf-8") if isinstance(tokenizer_json, bytes) else tokenizer_json
    except UnicodeDecodeError as exc:
        raise TokmaintError(f"the tokenizer.json is not UTF-8 (byte at offset {exc.start})") from None


def _embed(fields: dict[str, Any], **documents: str | bytes | None) -> bytes:
    """A JSON body of ``fields`` plus JSON documents (a diff) spliced in as they are, not parsed
    and re-encoded to be sent.

    >>> _embed({"kind": "import", "tokenizer": "{}"}, diff=None)
    b'{"kind": "import", "tokenizer": "{}", "diff": null}'
    """
    parts = [json.dumps(fields, ensure_ascii=False).encode("utf-8")[1:-1]] if fields else []
    for key, document in documents.items():
        value = b"null" if document is None else document.encode("utf-8") if isinstance(document, str) else document
        parts.append(json.dumps(key).encode("utf-8") + b": " + value.strip())
    return b"{" + b", ".join(parts) + b"}"


class RegistryRefused(TokmaintError):
    """The registry refused a request (or could not be reached): ``status``, ``code``, ``reasons``,
    and ``retry_after``: the seconds its ``Retry-After`` asked a client to wait (None: it said none)."""

    def __init__(self, status: int, code: str, reasons: list[str], *, retry_after: float | None = None) -> None:
        super().__init__(f"registry answered {status} {code}: " + "; ".join(reasons))
        self.status, self.code, self.reasons, self.retry_after = status, code, reasons, retry_after


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds; None for none, an HTTP date or anything else.

    >>> retry_after_seconds("3"), retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), retry_after_seconds(None)
    (3.0, None, None)
    """
    return float(value) if value is not None and value.strip().isascii() and value.strip().isdigit() else None


class RegistryClient(AbstractContextManager["RegistryClient"]):
    """The registry at ``url``; ``token`` (default ``TOKMAINT_REGISTRY_TOKEN``) authorises writes."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        cache_dir: str | Path | None = None,
        timeout: float = 60.0,
    ) -> None:
        configured = RegistryClientSettings()
        url = url or configured.url
        if not url:
            raise TokmaintError("no registry URL: pass --registry or set TOKMAINT_REGISTRY_URL")
        token = token if token is not None else configured.token
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        self.endpoint = str(self.http.base_url)  # where it asks, as trainer.hub.HubVersions names its own
        self.cache_dir = Path(cache_dir) if cache_dir else None

    def close(self) -> None:
        self.http.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise RegistryRefused(0, "unreachable", [f"{self.http.base_url}{path}: {exc}"]) from None
        if response.status_code >= 400:
            try:
                body = response.json()
                code, reasons = body.get("error_code") or "http_error", body.get("reasons") or [str(body)]
            except ValueError:
                code, reasons = "http_error", [response.text[:200] or response.reason_phrase]
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            raise RegistryRefused(response.status_code, code, reasons, retry_after=retry_after)
        return response

    @staticmethod
    def _read(model: type[Answer], response: httpx.Response) -> Answer:
        """An answer as the API's ``model``; one that is not (another server on that port, say)
        is refused as the server's refusals are."""
        try:
            return model.model_validate_json(response.content)
        except ValidationError as exc:
            reasons = [f"{response.request.url} answered no {model.__name__}"] + [
                f"{'.'.join(map(str, error['loc'])) or 'the answer'}: {error['msg']}" for error in exc.errors()
            ]
            raise RegistryRefused(response.status_code, "invalid_answer", reasons) from None

    def _answer(self, model: type[Answer], method: str, path: str, **kwargs: Any) -> Answer:
        return self._read(model, self._request(method, path, **kwargs))

    # ----- reading ------------------------------------------------------------------------
    def lineages(self) -> list[LineagePublic]:
        return self._answer(LineagesPublic, "GET", "/v1/tokenizers").data

    def versions(self, name: str, *, offset: int = 0, limit: int = 100) -> VersionsPublic:
        params = {"offset": offset, "limit": limit}
        return self._answer(VersionsPublic, "GET", f"/v1/tokenizers/{name}/versions", params=params)

    def version(self, name: str, ref: int | str = "latest") -> VersionPublic:
        return self._answer(VersionPublic, "GET", f"/v1/tokenizers/{name}/versions/{ref}")

    def diff(self, name: str, ref: int | str) -> RevisionDiff:
        return RevisionDiff.from_dict(self._request("GET", f"/v1/tokenizers/{name}/versions/{ref}/diff").json())

    def composed_diff(self, name: str, start: int, end: int | None = None) -> RevisionDiff:
        params = {"from": start} | ({"to": end} if end is not None else {})
        return RevisionDiff.from_dict(self._request("GET", f"/v1/tokenizers/{name}/diff", params=params).json())

    def watch(self, name: str, *, after: int, timeout: float = 30.0) -> VersionPublic | None:
        """The latest version once it is newer than ``after``; None when none came in ``timeout``."""
        response = self._request(
            "GET", f"/v1/tokenizers/{name}/watch", params={"after": after, "timeout": timeout}, timeout=timeout + 30
        )
        return None if response.status_code == 204 else self._read(VersionPublic, response)

    def download(self, name: str, ref: int | str = "latest") -> bytes:
        """A version's tokenizer.json, verified against its sha256 (and cached by it)."""
        cached = None
        if self.cache_dir is not None and version_number(ref) is not None:
            sha = self.version(name, ref).sha256
            path = self.cache_dir / sha
            if path.is_file() and hashlib.sha256(data := path.read_bytes()).hexdigest() == sha:
                cached = data
        headers = {"If-None-Match": f'"{hashlib.sha256(cached).hexdigest()}"'} if cached else {}
        response = self._request("GET", f"/v1/tokenizers/{name}/versions/{ref}/tokenizer.json", headers=headers)
        if response.status_code == 304 and cached is not None:
            return cached
        data = response.content
        sha = response.headers.get("etag", "").strip('"')
        if hashlib.sha256(data).hexdigest() != sha:
            raise RegistryRefused(
                response.status_code,
                "corrupt_download",
                [f"{name} {ref}: the tokenizer.json does not match its sha256 {sha[:12]}"],
            )
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            staging = self.cache_dir / f".{sha}.{os.getpid()}.tmp"
            write_file(staging, data)
            os.replace(staging, self.cache_dir / sha)
        return data

    # ----- writing ------------------------------------------------------------------------
    def tokenizer(self, name: str, ref: int | str = "latest") -> BPETokenizer:
        """A version's tokenizer, downloaded (verified against its sha256) and loaded."""
        return BPETokenizer.from_json(self.download(name, ref).decode("utf-8"))

    def create(
        self, name: str, tokenizer_json: str | bytes, *, kind: str = "initial", metrics: dict[str, Any] | None = None
    ) -> VersionPublic:
        body = _embed({"name": name, "kind": kind, "metrics": metrics or {}, "tokenizer": _text(tokenizer_json)})
        return self._answer(VersionPublic, "POST", "/v1/tokenizers", content=body, headers=_JSON)

    def publish(
        self,
        name: str,
        tokenizer_json: str | bytes,
        *,
        diff_json: str | bytes | None = None,
        kind: str = "tedtok",
        parent: int | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> VersionPublic:
        body = _embed(
            {"kind": kind, "parent": parent, "metrics": metrics or {}, "tokenizer": _text(tokenizer_json)},
            diff=diff_json,
        )
        return self._answer(VersionPublic, "POST", f"/v1/tokenizers/{name}/versions", content=body, headers=_JSON)

    def set_alias(self, name: str, alias: str, ref: int | str) -> AliasPublic:
        return self._answer(AliasPublic, "PUT", f"/v1/tokenizers/{name}/aliases/{alias}", json={"version": ref})

    def delete_alias(self, name: str, alias: str) -> None:
        self._request("DELETE", f"/v1/tokenizers/{name}/aliases/{alias}")

    def publish_model(self, name: str, folder: str | Path, *, version: int | str = "latest") -> ModelPublic:
        """Publish a model folder (``tokmaint trainer export``'s) beside the version it was
        trained with; its files go as one tar, a link as the file it points to (a
        ``snapshot_download`` folder links into the Hub's cache), all but the marker of the
        folder's writer (``.tokmaint.json``: tokmaint's bookkeeping, not the model's)."""
        from tokenizer_service.output_dir import MARKER

        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:", dereference=True) as tar:
            for path in sorted(Path(folder).iterdir()):
                if path.is_file() and path.name != MARKER:
                    tar.add(path, arcname=path.name)
        return self._answer(
            ModelPublic,
            "POST",
            f"/v1/tokenizers/{name}/models",
            params={"version": str(version)},
            content=buffer.getvalue(),
            headers={"Content-Type": "application/x-tar"},
            timeout=httpx.Timeout(600.0, connect=10.0),
        )

    def follow(self, name: str, *, known: int | None = None, outages: Outages | None = None) -> "LatestVersion":
        """The lineage's latest version number, kept current by the registry's watch (``known``,
        ``outages``: as :class:`LatestVersion`'s)."""
        return LatestVersion(self.endpoint, name, known=known, outages=outages)

    def models(self, name: str) -> ModelsPublic:
        return self._answer(ModelsPublic, "GET", f"/v1/tokenizers/{name}/models")

    def rollback(self, name: str, to: int) -> VersionPublic:
        return self._answer(VersionPublic, "POST", f"/v1/tokenizers/{name}/rollback", json={"to": to})


def retry_delay(error: Exception, failures: int, *, most: float = 5.0) -> float:
    """How long to wait before asking a registry that failed ``failures`` times in a row again:
    what its ``Retry-After`` asked (at most a minute), or a backoff doubling from 0.5 s to ``most``.

    >>> [retry_delay(OSError(), n) for n in (1, 2, 3, 4, 5)]
    [0.5, 1.0, 2.0, 4.0, 5.0]
    >>> retry_delay(RegistryRefused(503, "overloaded", ["busy"], retry_after=2.0), 1)
    2.0
    """
    asked = error.retry_after if isinstance(error, RegistryRefused) else None
    return min(asked, 60.0) if asked is not None else min(0.5 * 2 ** (failures - 1), most)


class Outages:
    """A registry's outages as a follower of ``lineage`` meets them: each said once as it begins
    and once as it ends, and the time without the registry counted (:attr:`seconds`), whether
    the follower asks in a thread of its own (:class:`LatestVersion`) or waits for an answer
    (:meth:`wait_for`, a follower that cannot start without one). Threads may share one (a job
    and the watches of the jobs it starts again): an outage is said and counted once.

        outages = Outages("http://127.0.0.1:8000", "news")
        latest = outages.wait_for(lambda: client.version("news"), meanwhile="waits for its latest version")
    """

    def __init__(self, where: str, lineage: str) -> None:
        self.where, self.lineage = where, lineage
        self._since: float | None = None  # (monotonic) the outage under way began
        self._before = 0.0  # seconds of the outages that ended
        self._lock = threading.Lock()  # its beginning and end, said once whichever thread sees them

    @property
    def seconds(self) -> float:
        """Seconds without the registry, the outage under way included."""
        since = self._since
        return self._before + (0.0 if since is None else time.monotonic() - since)

    def began(self, error: Exception, *, meanwhile: str) -> None:
        """Note, and say once, that the registry is away (nothing more while it stays away);
        ``meanwhile``: what the follower does until it is back ("stays on version 3")."""
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        log.warning(
            "registry: %s is away (%s): %s %s, asking again with backoff",
            self.where,
            error,
            self.lineage,
            meanwhile,
            extra={"lineage": self.lineage},
        )

    def ended(self) -> None:
        """Note, and say once, that the registry is back (nothing when it was not away)."""
        with self._lock:
            since = self._since
            if since is None:
                return
            away, self._since = time.monotonic() - since, None
            self._before += away
        log.warning("registry: %s is back after %.1f s without it", self.where, away, extra={"lineage": self.lineage})

    def wait_for(self, ask: Callable[[], Asked], *, meanwhile: str) -> Asked:
        """``ask()``'s answer, asked again with backoff (``retry_delay``: its ``Retry-After``)
        for as long as the registry is away (a refusal of ``AWAY_STATUSES``); any other refusal,
        or another error, is raised at once."""
        failures = 0
        while True:
            try:
                answer = ask()
            except RegistryRefused as exc:
                if exc.status not in AWAY_STATUSES:
                    raise
                failures += 1
                self.began(exc, meanwhile=meanwhile)
                time.sleep(retry_delay(exc, failures))
                continue
            self.ended()
            return answer


class LatestVersion:
    """A lineage's latest version number, kept current by a thread that long-polls the registry's
    watch (the registry answers within 0.2 s of a publish), so that asking costs no request: what
    a job asks before every step, and a trainer between two optimizer steps. Version numbers only
    grow (a rollback publishes a new one).

    A registry that is away (down, redeployed, cut off, overloaded) costs nothing: :attr:`number`
    stays the last number seen, the thread asks again with backoff (``retry_delay``), it logs once
    that the registry is away and once that it is back (:class:`Outages`), and the version
    published meanwhile is heard then. :attr:`away_seconds` counts the time without it.

        with LatestVersion("http://127.0.0.1:8000", "news") as latest:
            if latest.number > mine: ...
    """

    def __init__(
        self,
        url: str,
        lineage: str,
        *,
        poll_seconds: float = 2.0,
        known: int | None = None,
        outages: Outages | None = None,
    ) -> None:
        """``poll_seconds``: each watch's length; short, as closing cannot end one under way
        (httpx), and a server shutting down waits for the watches it holds. ``known``: a version
        the caller is on already (a checkpoint's): a registry away at the start is then an outage
        like any other, and :attr:`number` starts there. ``outages``: the caller's, to say and
        count this watch's outages with its own (by default, the watch's own)."""
        self._client = RegistryClient(url, token="")  # reads only, on a connection of its own
        self._follow(lineage, poll_seconds=poll_seconds, where=url, known=known, outages=outages)

    def _follow(
        self,
        lineage: str,
        *,
        poll_seconds: float,
        where: str,
        known: int | None = None,
        outages: Outages | None = None,
    ) -> None:
        """Start following: the number now, then a thread that asks :meth:`_newer` again and again."""
        self.lineage, self.poll_seconds, self.where = lineage, poll_seconds, where
        self._outages = outages or Outages(where, lineage)
        try:
            self._number = self._first()
        except (TokmaintError, OSError) as exc:  # away already: fine for a caller on a version
            if known is None:
                raise
            self._number = known
            self._went_away(exc)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tokmaint-registry-watch", daemon=True)
        self._thread.start()

    def _first(self) -> int:
        """The latest number when following starts."""
        return self._client.version(self.lineage).number

    def _newer(self) -> int | None:
        """The latest number heard of within ``poll_seconds`` (None: nothing newer): one watch."""
        seen = self._client.watch(self.lineage, after=self._number, timeout=self.poll_seconds)
        return None if seen is None else seen.number

    @property
    def number(self) -> int:
        """The latest version number seen (while the registry is away, the last one it gave)."""
        return self._number

    @property
    def away_seconds(self) -> float:
        """Seconds without the registry since following began, the outage under way included
        (with the caller's ``outages``, all that they counted)."""
        return self._outages.seconds

    def _watch(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                heard = self._newer()
            except Exception as exc:  # closed (then stopped), or the registry is away: try again
                if self._stopped.is_set():
                    return
                failures += 1
                self._went_away(exc)
                self._stopped.wait(retry_delay(exc, failures))
                continue
            self._outages.ended()
            failures = 0
            if heard is not None:
                self._number = max(self._number, heard)

    def _went_away(self, error: Exception) -> None:
        """Note, and say once, that the registry is away."""
        self._outages.began(error, meanwhile=f"stays on version {self._number}")

    def close(self) -> None:
        self._stopped.set()
        self._client.close()  # the thread ends with the watch under way

    def __enter__(self) -> "LatestVersion":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
