"""The errors a user can fix. The CLI prints each one as a single line and exits with code 2.

Each one says where the problem is (file, line or JSON path) and why:

>>> str(CorpusError("docs.jsonl", "'text' must be a string, got null", line=7))
"docs.jsonl:7: 'text' must be a string, got null"
>>> str(InvalidTokenizer(["model.vocab['a']: id -1 is negative", "model.merges[0]: 'q' is not in the vocabulary"],
...                      source="tok.json"))
"tok.json: invalid tokenizer: model.vocab['a']: id -1 is negative; model.merges[0]: 'q' is not in the vocabulary"
"""

from __future__ import annotations

from functools import partial
from pathlib import Path


class TokmaintError(Exception):
    """An expected failure caused by input, options or the file system, not by a bug."""


class CorpusError(TokmaintError, ValueError):
    """A corpus that cannot be read: ``path``, ``line`` (1-based, when one line is at fault), ``reason``."""

    def __init__(self, path: str | Path, reason: str, *, line: int | None = None) -> None:
        self.path, self.reason, self.line = Path(path), reason, line
        super().__init__(f"{path}:{line}: {reason}" if line is not None else f"{path}: {reason}")

    def __reduce__(self) -> tuple[partial[CorpusError], tuple[Path, str]]:
        # Crosses a process boundary whole (bench residues audits in processes).
        return partial(CorpusError, line=self.line), (self.path, self.reason)


class InvalidTokenizer(TokmaintError, ValueError):
    """A tokenizer refused, with every reason (each names its JSON path or the check that failed)."""

    def __init__(self, reasons: list[str], *, source: str | Path | None = None) -> None:
        self.reasons, self.source = list(reasons), source
        prefix = f"{source}: " if source is not None else ""
        super().__init__(f"{prefix}invalid tokenizer: " + "; ".join(self.reasons))

    def __reduce__(self) -> tuple[partial[InvalidTokenizer], tuple[list[str]]]:
        """Pickled whole, reasons and source (an error raised in a worker process).

        >>> import pickle
        >>> pickle.loads(pickle.dumps(InvalidTokenizer(["a", "b"], source="t.json"))).reasons
        ['a', 'b']
        """
        return partial(InvalidTokenizer, source=self.source), (self.reasons,)


class OutputError(TokmaintError):
    """An output directory tokmaint must not (or cannot) write: it would lose or mix up data."""
