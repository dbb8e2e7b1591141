"""The registry's read-only web page (server-rendered, no build step): lineages at ``/``, a
lineage's versions (kind, time, vocabulary size, bytes/token, aliases) with its drift plot, and
each version's diff (added, removed and reassigned tokens with their parents).

Bytes/token is the one a version's producer recorded in its metrics (``bytes_per_token``: the
pipeline's last step before the revision); a version without it shows none.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from registry.api.deps import RegistryDep
from registry.store import finite_number
from schemas.registry_api import VersionInfo
from schemas.revision import RevisionDiff

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=Path(__file__).resolve().parents[1] / "templates")


def diff_rows(diff: RevisionDiff, child: Mapping[int, str], parent: Mapping[int, str]) -> list[dict[str, Any]]:
    """The diff's entries for a reader: each id with its old and new token and their merges'
    parents as tokens (``child``'s ids for a new token, ``parent``'s for an old or removed one).

    >>> from schemas.revision import DiffEntry
    >>> entry = DiffEntry(id=2, kind="reassigned", old_token="ba", new_token="ab", parents=[0, 1], old_parents=[1, 0])
    >>> diff = RevisionDiff(lineage="x", version=2, parent_version=1, tokenizer_sha256="0" * 64, vocab_size=3,
    ...                     entries=[entry], config={})
    >>> row = diff_rows(diff, {0: "a", 1: "b", 2: "ab"}, {0: "a", 1: "b", 2: "ba"})[0]
    >>> row["new_parents"], row["old_parents"]
    ("'a' + 'b'", "'b' + 'a'")
    """

    def tokens(ids: list[int] | None, vocab: Mapping[int, str]) -> str:
        return " + ".join(repr(vocab.get(i, f"#{i}")) for i in ids or [])

    return [
        {
            "id": e.id,
            "kind": e.kind,
            "old": e.old_token,
            "new": e.new_token,
            "new_parents": tokens(e.parents, child) if e.kind != "removed" else "",
            "old_parents": tokens(e.parents if e.kind == "removed" else e.old_parents, parent),
        }
        for e in diff.entries
    ]


def bytes_per_token(version: VersionInfo) -> float | None:
    """The version's recorded bytes/token, if it is a finite number (a version stored before
    metrics were checked may hold anything, and versions never change).

    >>> from types import SimpleNamespace as V
    >>> bytes_per_token(V(metrics={"bytes_per_token": 3.5})), bytes_per_token(V(metrics={"bytes_per_token": "x"}))
    (3.5, None)
    """
    value = version.metrics.get("bytes_per_token")
    return float(value) if finite_number(value) else None


@router.get("/", response_class=HTMLResponse)
def home(request: Request, registry: RegistryDep) -> HTMLResponse:
    lineages = [
        {"name": name, "latest": latest, "aliases": registry.aliases(name)} for name, latest in registry.lineages()
    ]
    return templates.TemplateResponse(request, "home.html", {"lineages": lineages})


@router.get("/lineages/{name}", response_class=HTMLResponse)
def lineage_page(name: str, request: Request, registry: RegistryDep) -> HTMLResponse:
    versions, latest = registry.versions(name, limit=10_000)
    aliases = registry.aliases(name)
    by_number: dict[int, list[str]] = {}
    for alias, number in aliases.items():
        by_number.setdefault(number, []).append(alias)
    return templates.TemplateResponse(
        request,
        "lineage.html",
        {
            "name": name,
            "latest": latest,
            "versions": list(reversed(versions)),
            "aliases": by_number,
            "bytes_per_token": {v.number: bytes_per_token(v) for v in versions},
        },
    )


@router.get("/lineages/{name}/versions/{number}", response_class=HTMLResponse)
def version_page(name: str, number: int, request: Request, registry: RegistryDep) -> HTMLResponse:
    version = registry.version(name, number)
    child = registry.tokenizer(name, number).id_to_token
    parent = registry.tokenizer(name, version.parent).id_to_token if version.parent else {}
    rows = diff_rows(registry.diff(name, number), child, parent)
    return templates.TemplateResponse(
        request,
        "version.html",
        {
            "name": name,
            "version": version,
            "rows": rows,
            "counts": {kind: sum(r["kind"] == kind for r in rows) for kind in ("added", "removed", "reassigned")},
        },
    )


@router.get("/lineages/{name}/drift.png")
def drift_plot(name: str, registry: RegistryDep) -> Response:
    """Bytes/token of each version that recorded it, and the ids each version changed, over time."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    versions, _ = registry.versions(name, limit=10_000)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    measured = [(v.created_at, value) for v in versions if (value := bytes_per_token(v)) is not None]
    top.plot([at for at, _ in measured], [value for _, value in measured], marker="o")
    top.set_ylabel("bytes/token")
    top.set_title(f"{name}: drift" + ("" if measured else " (no version recorded bytes/token)"))
    bottom.vlines([v.created_at for v in versions], 0, [v.changed_ids for v in versions])
    bottom.set_ylabel("ids changed")
    figure.autofmt_xdate()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    plt.close(figure)
    return Response(buffer.getvalue(), media_type="image/png")
