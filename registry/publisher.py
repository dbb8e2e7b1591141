"""Publish a Ted-Tok run's versions into a registry lineage as they are made (``evolve --registry``).

Version numbers match the run's: version 1 creates the lineage. Running the same command again
continues: versions the lineage already holds must be byte for byte this run's (by sha256) and
are skipped; the rest are published on top, each naming its parent.
"""

from __future__ import annotations

from registry.client import RegistryClient, RegistryRefused
from schemas.revision import RevisionDiff
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.errors import TokmaintError


class LineagePublisher:
    """Called with each version of a run: ``publisher(number, tokenizer, diff)``."""

    def __init__(self, client: RegistryClient, lineage: str) -> None:
        self.client, self.lineage = client, lineage
        self.held = 0  # versions the lineage held before this run's first publish

    def __call__(self, number: int, tokenizer: BPETokenizer, diff: RevisionDiff | None) -> None:
        if number == 1:
            try:
                self.client.create(self.lineage, tokenizer.to_json(), kind="initial")
            except RegistryRefused as exc:
                if exc.code != "lineage_exists":
                    raise
            self.held = self.client.version(self.lineage).number
        if number <= self.held:
            if self.client.version(self.lineage, number).sha256 != tokenizer.sha256:
                raise TokmaintError(
                    f"registry lineage {self.lineage!r} version {number} is not this run's; choose another --lineage"
                )
            return
        self.client.publish(
            self.lineage,
            tokenizer.to_json(),
            diff_json=diff.to_json() if diff else None,
            kind="tedtok",
            parent=number - 1,
        )
