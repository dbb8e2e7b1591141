"""The demo's report folder: ``summary.json``, four PNG plots and ``index.html`` that shows them.

* ``bytes_per_token.png``: each part of the stream, tokenised with the initial version (static)
  and with the version the registry served when that part arrived (evolving);
* ``revisions.png``: versions over time and the ids each changed;
* ``tokens.png``: tokens added and removed per version (examples in the page and the JSON);
* ``trainer_bits_per_byte.png``: the trainer's bits per byte on held-out text (the stream's newest
  documents) by step, with the steps where it took a version: unlike a loss per token, comparable
  across versions.

>>> bytes_per_token(BPETokenizer.train(["ab ab"], vocab_size=258), ["ab ab"])
2.5
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from jinja2 import Environment  # noqa: E402
from matplotlib import pyplot as plt  # noqa: E402

from registry.client import RegistryClient  # noqa: E402
from schemas.registry_api import VersionPublic  # noqa: E402
from tokenizer_service.bpe import BPETokenizer  # noqa: E402
from tokenizer_service.corpus import Document  # noqa: E402

EXAMPLES = 12  # tokens added / removed shown per version, at most
REPORT_FILES = (
    "summary.json",
    "bytes_per_token.png",
    "revisions.png",
    "tokens.png",
    "trainer_bits_per_byte.png",
    "index.html",
)


def bytes_per_token(tokenizer: BPETokenizer, texts: Sequence[str]) -> float:
    """UTF-8 bytes over tokens, over all ``texts``."""
    return sum(len(t.encode("utf-8")) for t in texts) / max(1, sum(map(len, tokenizer.encode_batch(list(texts)))))


def _served(versions: list[VersionPublic], at: str) -> int:
    """The newest version created by ``at`` (an ISO time, UTC)."""
    moment = datetime.fromisoformat(at)
    return max(v.number for v in versions if v.created_at <= moment)


def write_report(
    out: Path,
    *,
    registry: RegistryClient,
    lineage: str,
    parts: list[list[Document]],
    arrivals: list[dict[str, Any]],
    pipeline: dict[str, Any],
    trainer: list[dict[str, Any]],
    seconds: float,
) -> dict[str, Any]:
    """Write the report for the demo's run to ``out``; return the summary (also ``summary.json``)."""
    out.mkdir(parents=True, exist_ok=True)
    versions = registry.versions(lineage, limit=1000).data
    tokenizers = {v.number: registry.tokenizer(lineage, v.number) for v in versions}
    measured = []
    for arrival in arrivals:
        part = parts[arrival["chunk"]]
        texts = [d.text for d in part]
        served = _served(versions, arrival["time"])
        measured.append(
            {
                **arrival,
                "from": part[0].ts.date().isoformat(),
                "version": served,
                "static": bytes_per_token(tokenizers[1], texts),
                "evolving": bytes_per_token(tokenizers[served], texts),
            }
        )
    changes = []
    for v in versions[1:]:
        entries = registry.diff(lineage, v.number).entries
        # Tokens as the text they stand for (a byte-level "Ġtext" is " text").
        added = [_text(tokenizers[v.number], e.new_token) for e in entries if e.new_token is not None]
        removed = [_text(tokenizers[v.parent], e.old_token) for e in entries if e.old_token is not None]
        changes.append(
            {
                "version": v.number,
                "kind": v.kind,
                "created_at": v.created_at.isoformat(),
                "added": len(added),
                "removed": len(removed),
                "added_examples": added[:EXAMPLES],
                "removed_examples": removed[:EXAMPLES],
            }
        )
    taken = [t for run in trainer for t in run["taken"]]

    _plot_bytes_per_token(out / "bytes_per_token.png", measured)
    _plot_revisions(out / "revisions.png", versions)
    _plot_tokens(out / "tokens.png", changes)
    _plot_bits_per_byte(out / "trainer_bits_per_byte.png", trainer)
    evaluations = [e for run in trainer for e in run["evaluations"]]
    last = measured[-1]
    summary = {
        "lineage": lineage,
        "seconds": round(seconds, 1),
        "documents": pipeline["documents"],
        "steps": pipeline["steps"],
        "revisions_published": pipeline["revisions"],
        "versions": len(versions),
        "bytes_per_token": {
            "static_mean": _mean(p["static"] for p in measured),
            "evolving_mean": _mean(p["evolving"] for p in measured),
            "last_part": {"static": last["static"], "evolving": last["evolving"], "version": last["version"]},
        },
        "tokens": {"added": sum(c["added"] for c in changes), "removed": sum(c["removed"] for c in changes)},
        "trainer": {
            "steps": trainer[-1]["steps"],
            "device": trainer[-1]["device"],
            "versions_taken": [t["version"] for t in taken],
            "final_version": trainer[-1]["version"],
            "first_loss": trainer[0]["losses"][0],
            "last_loss": trainer[-1]["losses"][-1],
            "bits_per_byte": {
                "first": evaluations[0]["bits_per_byte"] if evaluations else None,
                "last": evaluations[-1]["bits_per_byte"] if evaluations else None,
            },
            "evaluations": evaluations,
        },
        "parts": measured,
        "changes": changes,
        "files": list(REPORT_FILES),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    (out / "index.html").write_text(Environment(autoescape=True).from_string(PAGE).render(s=summary), encoding="utf-8")
    return summary


def _text(tokenizer: BPETokenizer, token: str) -> str:
    """The text a token stands for (bytes that are not whole UTF-8 character shown escaped).

    >>> _text(BPETokenizer.train(["a b"], vocab_size=258), "Ġb")
    ' b'
    """
    return tokenizer.token_bytes(token).decode("utf-8", errors="backslashreplace")


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _plot_bytes_per_token(path: Path, parts: list[dict[str, Any]]) -> None:
    figure, axes = plt.subplots(figsize=(9, 4))
    x = range(len(parts))
    axes.plot(x, [p["static"] for p in parts], marker="o", label="static (version 1)")
    axes.plot(x, [p["evolving"] for p in parts], marker="o", label="evolving (the version served then)")
    axes.set_xticks(list(x)[::3], [p["from"][:7] for p in parts][::3])
    axes.set_xlabel("part of the stream (its first commit's month)")
    axes.set_ylabel("bytes / token")
    axes.legend()
    _save(figure, path)


def _plot_revisions(path: Path, versions: list[VersionPublic]) -> None:
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    times = [v.created_at for v in versions]
    start = times[0]
    seconds = [(t - start).total_seconds() for t in times]
    top.step(seconds, [v.number for v in versions], where="post", marker="o")
    top.set_ylabel("version")
    bottom.vlines(seconds, 0, [v.changed_ids for v in versions])
    bottom.set_ylabel("ids changed")
    bottom.set_xlabel("seconds since the lineage was created")
    _save(figure, path)


def _plot_tokens(path: Path, changes: list[dict[str, Any]]) -> None:
    figure, axes = plt.subplots(figsize=(9, 3.5))
    x = [c["version"] for c in changes]
    axes.bar([v - 0.2 for v in x], [c["added"] for c in changes], width=0.4, label="added")
    axes.bar([v + 0.2 for v in x], [c["removed"] for c in changes], width=0.4, label="removed")
    axes.set_xlabel("version")
    axes.set_ylabel("tokens")
    axes.legend()
    _save(figure, path)


def _plot_bits_per_byte(path: Path, runs: list[dict[str, Any]]) -> None:
    figure, axes = plt.subplots(figsize=(9, 4))
    evaluations = [e for run in runs for e in run["evaluations"]]  # a later run resumed where the one before ended
    axes.plot([e["step"] for e in evaluations], [e["bits_per_byte"] for e in evaluations], marker="o", linewidth=0.8)
    for taken in (t for run in runs for t in run["taken"]):
        axes.axvline(taken["step"], color="grey", linestyle=":", linewidth=0.8)
        axes.text(taken["step"], axes.get_ylim()[1], f"v{taken['version']}", fontsize=7, ha="center", va="bottom")
    axes.set_xlabel("optimizer step (dotted: a new version applied)")
    axes.set_ylabel("bits per byte, held-out text")
    _save(figure, path)


def _save(figure, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>tokmaint demo: {{ s.lineage }}</title>
<style>body{font-family:system-ui,sans-serif;margin:2rem;max-width:64rem}table{border-collapse:collapse}
td,th{border-bottom:1px solid #ddd;padding:.25rem .6rem;text-align:left}
code{white-space:pre;background:#eef;margin-right:.2rem}</style></head>
<body>
<h1>tokmaint demo: {{ s.lineage }}</h1>
<p>{{ s.documents }} documents in {{ s.steps }} steps; {{ s.revisions_published }} revisions published
({{ s.versions }} versions); {{ s.tokens.added }} tokens added, {{ s.tokens.removed }} removed; {{ s.seconds }} s.</p>
<p>Bytes/token, mean over the stream's parts: static {{ "%.3f"|format(s.bytes_per_token.static_mean) }},
evolving {{ "%.3f"|format(s.bytes_per_token.evolving_mean) }}; the last part: static
{{ "%.3f"|format(s.bytes_per_token.last_part.static) }}, evolving
{{ "%.3f"|format(s.bytes_per_token.last_part.evolving) }}
(version {{ s.bytes_per_token.last_part.version }}).</p>
<h2>Bytes per token</h2><img src="bytes_per_token.png" alt="bytes per token, static and evolving">
<h2>Revisions</h2><img src="revisions.png" alt="versions over time">
<h2>Tokens added and removed</h2><img src="tokens.png" alt="tokens added and removed per version">
<table><tr><th>version</th><th>added</th><th>examples</th><th>removed</th><th>examples</th></tr>
{% for c in s.changes %}<tr><td>{{ c.version }}</td><td>{{ c.added }}</td>
<td>{% for t in c.added_examples %}<code>{{ t }}</code> {% endfor %}</td><td>{{ c.removed }}</td>
<td>{% for t in c.removed_examples %}<code>{{ t }}</code> {% endfor %}</td></tr>
{% endfor %}</table>
<h2>Trainer</h2><img src="trainer_bits_per_byte.png" alt="trainer bits per byte across revisions">
<p>{{ s.trainer.steps }} steps on {{ s.trainer.device }}; versions taken: {{ s.trainer.versions_taken|join(", ") }};
bits per byte on held-out text (exact at the byte level, comparable across versions)
{% if s.trainer.bits_per_byte.first is not none %}{{ "%.3f"|format(s.trainer.bits_per_byte.first) }} →
{{ "%.3f"|format(s.trainer.bits_per_byte.last) }}{% else %}not measured{% endif %}.</p>
<p><a href="summary.json">summary.json</a></p>
</body></html>
"""
