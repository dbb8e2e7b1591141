"""What ``decode(encode(text))`` promises to give back, read off a tokenizer's own pipeline.

A lossless tokenizer does not always return its input. Its normalizer rewrites the text first
(NFC, NFKC, Lowercase, Strip, Replace, Prepend), and that is how it is meant to work. SentencePiece-style
tokenizers also write spaces as ``▁`` (a Replace normalizer or a Metaspace pre-tokenizer) and
their decoder turns every ``▁`` back into a space, so a literal ``▁`` in the input comes back as a
space; the ``▁`` they prepend comes back as a leading space that the decoder strips again. The
promise is therefore ``decode(encode(s)) == cleanup(normalize(s))``, where ``cleanup`` is the
decoder's documented undoing of what the encoding side added:

* a decoder ``Replace`` of ``c`` by ``p`` counts only where the normalizer (or a Metaspace
  pre-tokenizer) replaced ``p`` by ``c``;
* a decoder ``Strip`` (after ``Fuse``, on the whole text) counts only where the encoding side
  prepends something; a ``Metaspace`` decoder undoes its pre-tokenizer (``▁`` to space, the
  prepended one dropped);
* ``ByteLevel``, ``ByteFallback`` and ``Fuse`` change no text.

Any other decoder step is not cleanup: text it drops or changes is a loss, and validation refuses
the tokenizer for it (a decoder that drops a byte, a ByteLevel pre-tokenizer without its decoder).

>>> from tokenizers import Tokenizer, decoders, models, normalizers
>>> tok = Tokenizer(models.BPE(vocab={"▁": 0, "a": 1}, merges=[], byte_fallback=True))
>>> tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁"),
...                                         normalizers.NFKC()])
>>> tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
...                                  decoders.Strip(" ", 1, 0)])
>>> RoundTrip.of(tok).promised(["a a", " a▁ﬁ"])  # ▁ comes back as a space, ﬁ as NFKC's fi
['a a', ' a fi']
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer


def pipeline_steps(section: Any, key: str) -> Iterator[dict[str, Any]]:
    """The steps of a pipeline section in order, ``Sequence`` flattened (``key`` names its list).

    >>> steps = pipeline_steps({"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "Strip"}]}, "decoders")
    >>> [s["type"] for s in steps]
    ['Fuse', 'Strip']
    """
    if not isinstance(section, dict):
        return
    if section.get("type") == "Sequence":
        for step in section.get(key) or []:
            yield from pipeline_steps(step, key)
    else:
        yield section


def _string_pattern(step: dict[str, Any]) -> str | None:
    """A Replace step's literal pattern (None for a regex, which is never taken as cleanup)."""
    pattern = step.get("pattern")
    return pattern.get("String") if isinstance(pattern, dict) else None


def _prepends(step: dict[str, Any]) -> bool:
    """Whether a Metaspace step prepends its replacement (old files say ``add_prefix_space``)."""
    scheme = step.get("prepend_scheme")
    return scheme in ("always", "first") if scheme is not None else bool(step.get("add_prefix_space", True))


@dataclass(frozen=True)
class RoundTrip:
    """The promise of one tokenizer: build with :meth:`of` or :meth:`from_sections`."""

    normalizer: Any  # the loaded ``tokenizers`` normalizer, or None
    metaspace: tuple[str, bool] | None  # a Metaspace pre-tokenizer's (replacement, prepends)
    prefix_space: bool  # a lone ByteLevel pre-tokenizer with add_prefix_space
    # The decoder's cleanup in order: ("replace", (c, p)), ("strip", (content, start, stop)) or
    # ("metaspace", (replacement, prepends)).
    cleanup: tuple[tuple[str, Any], ...]
    description: str  # the steps the promise follows, for reasons: "Prepend + Replace", "NFC"

    @classmethod
    def of(cls, hf: Tokenizer) -> "RoundTrip":
        """The promise of a loaded ``tokenizers`` tokenizer."""
        sections = {
            name: None if part is None else json.loads(part.__getstate__())
            for name, part in (
                ("normalizer", hf.normalizer),
                ("pre_tokenizer", hf.pre_tokenizer),
                ("decoder", hf.decoder),
            )
        }
        return cls.from_sections(**sections, normalizer_object=hf.normalizer)

    @classmethod
    def from_sections(
        cls, *, normalizer: Any, pre_tokenizer: Any, decoder: Any, normalizer_object: Any = None
    ) -> "RoundTrip":
        """The promise from ``tokenizer.json``'s sections (``normalizer_object``: the loaded
        normalizer that applies the first one; :meth:`of` passes it).

        >>> RoundTrip.from_sections(normalizer=None, pre_tokenizer={"type": "Metaspace", "replacement": "▁"},
        ...                         decoder={"type": "Metaspace", "replacement": "▁"}).description
        'Metaspace'
        """
        replaced: set[tuple[str, str]] = set()  # (from, to) the encoding side replaces
        prepends = False
        names = []
        for step in pipeline_steps(normalizer, "normalizers"):
            kind = step.get("type")
            names.append(kind)
            pattern = _string_pattern(step) if kind == "Replace" else None
            if pattern is not None and isinstance(step.get("content"), str):
                replaced.add((pattern, step["content"]))
            prepends |= kind == "Prepend" and bool(step.get("prepend"))
        metaspace = None
        for step in pipeline_steps(pre_tokenizer, "pretokenizers"):
            if step.get("type") == "Metaspace" and step.get("replacement"):
                metaspace = (step["replacement"], _prepends(step))
                replaced.add((" ", step["replacement"]))
                prepends |= metaspace[1]
                names.append("Metaspace")
        prefix_space = (
            isinstance(pre_tokenizer, dict)
            and pre_tokenizer.get("type") == "ByteLevel"
            and bool(pre_tokenizer.get("add_prefix_space"))
        )
        cleanup: list[tuple[str, Any]] = []
        fused = False
        for step in pipeline_steps(decoder, "decoders"):
            kind = step.get("type")
            fused |= kind == "Fuse"
            if kind == "Replace" and (step.get("content"), _string_pattern(step)) in replaced:
                cleanup.append(("replace", (_string_pattern(step), step["content"])))
            elif kind == "Strip" and fused and prepends:
                cleanup.append(
                    ("strip", (step.get("content", " "), int(step.get("start", 0)), int(step.get("stop", 0))))
                )
            elif kind == "Metaspace" and step.get("replacement"):
                cleanup.append(("metaspace", (step["replacement"], _prepends(step))))
        if normalizer is not None and normalizer_object is None:
            raise ValueError("a normalizer section needs its loaded normalizer (RoundTrip.of loads both)")
        return cls(
            normalizer=normalizer_object,
            metaspace=metaspace,
            prefix_space=prefix_space,
            cleanup=tuple(cleanup),
            description=" + ".join(n for n in names if n) or "none",
        )

    @property
    def identity(self) -> bool:
        """True when the promise is the input itself (no normalizer, no space convention)."""
        return self.normalizer is None and self.metaspace is None and not self.prefix_space and not self.cleanup

    def promised(self, texts: Sequence[str]) -> list[str]:
        """What a lossless tokenizer decodes each text's encoding to.

        >>> RoundTrip.from_sections(normalizer=None, pre_tokenizer={"type": "Metaspace", "replacement": "▁",
        ...     "prepend_scheme": "always"}, decoder={"type": "Metaspace", "replacement": "▁",
        ...     "prepend_scheme": "always"}).promised([" a b", "a▁b"])  # SentencePiece loses a leading space
        ['a b', 'a b']
        """
        if self.identity:
            return list(texts)
        return [self._promised(text) for text in texts]

    def _promised(self, text: str) -> str:
        if self.normalizer is not None:
            text = self.normalizer.normalize_str(text)
        if self.metaspace is not None:
            replacement, prepends = self.metaspace
            text = text.replace(" ", replacement)
            if prepends and text and not text.startswith(replacement):
                text = replacement + text
        if self.prefix_space and text and not text.startswith(" "):
            text = " " + text
        for kind, args in self.cleanup:
            if kind == "replace":
                text = text.replace(*args)
            elif kind == "strip":
                content, start, stop = args
                for _ in range(start):
                    text = text.removeprefix(content)
                for _ in range(stop):
                    text = text.removesuffix(content)
            else:
                replacement, prepends = args
                if prepends and text.startswith(replacement):
                    text = text[len(replacement) :]
                text = text.replace(replacement, " ")
        return text
