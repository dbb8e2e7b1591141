"""A lineage followed over the Hugging Face Hub protocol (``tokmaint trainer run --hub``): the
trainer reads versions the way any training code reads a tokenizer, with ``huggingface_hub``
at the registry's URL (``registry.api.routes.hub``), and needs none of the registry's own API.

* The latest version is the ``main`` revision's (``model_info``'s ``cardData``), asked every
  ``poll_seconds`` by a thread (:class:`HubLatest`).
* A version's tokenizer.json is ``hf_hub_download``'s (revision ``v{n}``, in the Hub client's
  cache), checked against the sha256 the registry gives it.
* A diff from the version the trainer has to a newer one is computed here from the two
  tokenizers (``tokenizer_service.revision_diff.composed_diff``, as the registry computes it).

    versions = HubVersions("http://registry:8000")
    tokenizer = versions.tokenizer("news", versions.version("news").number)
"""

from __future__ import annotations

import hashlib

from registry.client import LatestVersion, Outages, RegistryRefused
from schemas.registry_api import VersionInfo
from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.revision_diff import composed_diff


class HubVersions:
    """A lineage's versions over the Hub protocol at ``endpoint``, with the interface the
    trainer uses of ``registry.client.RegistryClient``."""

    def __init__(self, endpoint: str, *, cache_dir: str | None = None) -> None:
        """``endpoint``: the registry's URL (what ``HF_ENDPOINT`` would be); ``cache_dir``: the
        Hub client's cache (default: its own, ``HF_HUB_CACHE``)."""
        from huggingface_hub import HfApi

        self.endpoint, self.cache_dir = endpoint.rstrip("/"), cache_dir
        self.api = HfApi(endpoint=self.endpoint)
        self._tokenizers: dict[tuple[str, int], BPETokenizer] = {}

    def version(self, lineage: str, ref: int | str = "main") -> VersionInfo:
        """The version a revision names (``main``: the latest), as the registry describes it (its
        card's ``tokmaint``); the Hub client's errors as the registry client's: the status the
        server answered (404: no such lineage or revision; 502-504: away), 0 for no answer, and
        200 for a card of another server."""
        from huggingface_hub.errors import HfHubHTTPError

        revision = f"v{ref}" if isinstance(ref, int) else ref
        where = f"{self.endpoint}: {lineage} at {revision}"
        try:
            info = self.api.model_info(lineage, revision=revision)
        except HfHubHTTPError as exc:  # answered, with a refusal or an outage's status
            raise RegistryRefused(exc.response.status_code, "hub_refused", [f"{where}: {exc}"]) from None
        except Exception as exc:  # no answer: huggingface_hub's and httpx's connection errors
            raise RegistryRefused(0, "unreachable", [f"{where}: {exc}"]) from None
        try:
            return VersionInfo.model_validate((info.card_data.to_dict() if info.card_data else {})["tokmaint"])
        except Exception as exc:  # no card, or no version's: another server on that port
            raise RegistryRefused(200, "invalid_answer", [f"{where} answered no version's card: {exc!r}"]) from None

    def tokenizer(self, lineage: str, number: int) -> BPETokenizer:
        """Version ``number``'s tokenizer.json from the Hub client (its cache first), refused
        when its bytes are not the file the registry names by its sha256."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import HfHubHTTPError

        kept = self._tokenizers.get((lineage, number))
        if kept is not None:
            return kept
        expected = self.version(lineage, number).sha256
        try:
            path = hf_hub_download(
                lineage, "tokenizer.json", revision=f"v{number}", endpoint=self.endpoint, cache_dir=self.cache_dir
            )
            with open(path, "rb") as f:
                data = f.read()
        except HfHubHTTPError as exc:  # answered, with a refusal or an outage's status
            raise RegistryRefused(
                exc.response.status_code, "hub_refused", [f"{self.endpoint}: {lineage} v{number}: {exc}"]
            ) from None
        except Exception as exc:  # no answer: as the registry client says it
            raise RegistryRefused(0, "unreachable", [f"{self.endpoint}: {lineage} v{number}: {exc}"]) from None
        if (got := hashlib.sha256(data).hexdigest()) != expected:
            raise RegistryRefused(
                200,
                "sha256_mismatch",
                [f"{path} is not version {number} of {lineage!r} (sha256 {got[:12]}, not {expected[:12]})"],
            )
        tokenizer = BPETokenizer.from_json(data.decode("utf-8"))
        self._tokenizers[(lineage, number)] = tokenizer
        return tokenizer

    def composed_diff(self, lineage: str, start: int, end: int) -> RevisionDiff:
        """One diff from version ``start`` to ``end`` (as the registry's ``/diff?from=&to=``)."""
        return composed_diff(
            self.tokenizer(lineage, start),
            self.tokenizer(lineage, end),
            lineage=lineage,
            start=start,
            end=end,
            parent_sha256=self.version(lineage, start).sha256,
            tokenizer_sha256=self.version(lineage, end).sha256,
        )

    def follow(self, lineage: str, *, known: int | None = None, outages: Outages | None = None) -> "HubLatest":
        return HubLatest(self, lineage, known=known, outages=outages)


class HubLatest(LatestVersion):
    """The latest version number of a lineage, kept current by a thread that asks the ``main``
    revision every ``poll_seconds`` (the Hub protocol has no watch); the last number seen while
    the registry is away, asked again with backoff (``registry.client.LatestVersion``'s
    following, over the Hub)."""

    def __init__(
        self,
        versions: HubVersions,
        lineage: str,
        *,
        poll_seconds: float = 1.0,
        known: int | None = None,
        outages: Outages | None = None,
    ) -> None:
        self.versions = versions
        self._follow(lineage, poll_seconds=poll_seconds, where=versions.endpoint, known=known, outages=outages)

    def _first(self) -> int:
        return self.versions.version(self.lineage).number

    def _newer(self) -> int | None:
        if self._stopped.wait(self.poll_seconds):
            return None
        return self.versions.version(self.lineage).number

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
