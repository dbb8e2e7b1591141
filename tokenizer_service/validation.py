"""The checks every published version must pass, with reasons when it does not.

``validate`` loads the exported ``tokenizer.json`` in ``tokenizers``, checks the base alphabet
(the 256 byte symbols of byte-level BPE, the 256 ``<0xNN>`` tokens of byte fallback), encodes and
decodes a probe set losslessly (random Unicode, emoji, control bytes, whitespace runs where the
family can hold every byte; its alphabet otherwise) and checks reachability: against a parent
version, no token may become unreachable and every new token must be reachable. Lossless means
what the tokenizer promises (:mod:`round_trip`): the text after its own normalizer (NFC, NFKC,
``▁`` for spaces ...) and its decoder's documented cleanup, not always the raw input.

>>> from tokenizer_service.bpe import BPETokenizer
>>> report = validate(BPETokenizer.train(["hello world"], vocab_size=270))
>>> report.ok, report.reasons
(True, [])
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from itertools import chain
from pathlib import Path

from tokenizers import Tokenizer

from tokenizer_service.bpe import (
    BYTE_FALLBACK_TOKENS,
    BYTE_TO_UNICODE,
    UNICODE_TO_BYTE,
    BPETokenizer,
    loaded_byte_fallback,
    loaded_byte_level,
    loaded_special_tokens,
)
from tokenizer_service.errors import InvalidTokenizer
from tokenizer_service.heap import release_free_memory
from tokenizer_service.merge_graph import unreachable_tokens
from tokenizer_service.round_trip import RoundTrip

_BYTE_LEVEL_ALPHABET = frozenset(BYTE_TO_UNICODE.values())


@dataclass
class ValidationReport:
    """Every failed check in ``reasons``; ``unusable`` lists those that leave nothing to work
    with (it does not load, it crashes encoding, it has tokens byte-level BPE cannot hold)."""

    reasons: list[str] = field(default_factory=list)
    unusable: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    probes: int = 0
    added_ids: dict[str, int] = field(default_factory=dict)  # the id ``tokenizers`` gives each added token

    def refuse(self, reason: str) -> None:
        """Record a reason that makes the tokenizer unusable."""
        self.reasons.append(reason)
        self.unusable.append(reason)

    @property
    def ok(self) -> bool:
        return not self.reasons

    def raise_for_reasons(self, *, source: str | Path | None = None) -> None:
        if self.reasons:
            raise InvalidTokenizer(self.reasons, source=source)


def probe_texts(tokenizer: BPETokenizer | Tokenizer, *, n: int = 200, seed: int = 0) -> list[str]:
    """Deterministic probe strings covering what the tokenizer's family can round-trip: hostile
    Unicode where every byte has a token (byte-level BPE, or byte fallback with its 256 ``<0xNN>``
    tokens), the alphabet otherwise (the single-character tokens: no merge makes one). Works on a
    loaded ``tokenizers`` tokenizer too.

    >>> probes = probe_texts(BPETokenizer.train(["x"], vocab_size=257), n=50)
    >>> any("\\x00" in p for p in probes), any("🙂" in p for p in probes)
    (True, True)
    """
    hf = tokenizer.hf if isinstance(tokenizer, BPETokenizer) else tokenizer
    if loaded_byte_level(hf) or loaded_byte_fallback(hf):
        return list(_byte_level_probes(n, seed))
    rng = random.Random(seed)
    specials = loaded_special_tokens(hf)
    alphabet = sorted(t for t in hf.get_vocab(with_added_tokens=False) if len(t) == 1 and t not in specials)
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]


@cache
def _byte_level_probes(n: int, seed: int) -> tuple[str, ...]:
    """The byte-level probes (the same for every byte-level tokenizer): made once a process,
    as every revision is validated in the job and again in the registry (1.6 ms each time).

    >>> len(_byte_level_probes(50, 0)), _byte_level_probes(50, 0) is _byte_level_probes(50, 0)
    (50, True)
    """
    rng = random.Random(seed)
    fixed = [
        "".join(chr(c) for c in range(32)),
        "\x7f\x80\x9f tab\tnewline\n\r\n  spaces   end ",
        "emoji 🙂👍🏽👨‍👩‍👧 flags 🇫🇷 keycap 1️⃣",
        "mixed: Ünïcødé — 中文 日本語 한국어 العربية עברית हिन्दी",
        "\u200b\u200d\ufeff zero-width and BOM",
        "code:\n\tdef f(x):\n\t\treturn x**2  # comment\n",
        " one leading space",
        "  two leading and two trailing  ",  # what a prefix or a strip would lose
        "SentencePiece's space symbol \u2581 as text",
    ]
    ranges = [
        (0x20, 0x7E),
        (0x00, 0x1F),
        (0xA0, 0x24F),
        (0x370, 0x3FF),
        (0x400, 0x4FF),
        (0x4E00, 0x9FFF),
        (0x1F300, 0x1FAFF),
        (0x10000, 0x10FFF),
        (0xE000, 0xF8FF),
    ]
    out = list(fixed)
    while len(out) < n:
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    return tuple(out)


def validate(
    tokenizer: BPETokenizer,
    *,
    parent: BPETokenizer | None = None,
    probes: list[str] | None = None,
    parent_unreachable: list[str] | None = None,
    encoding: ValidationReport | None = None,
) -> ValidationReport:
    """Run every check; the report lists each failure as a human-readable reason.

    ``parent_unreachable`` (the parent's own report) saves encoding the parent's tokens again.
    ``encoding`` is :func:`check_encoding`'s report on the tokenizer's text when the caller ran it
    already (a registry runs it in another process while it checks the rest).
    """
    report = ValidationReport()
    vocab = tokenizer.vocab
    # A set check first: the per-merge pass only runs to name the offenders.
    fine = tokenizer.merges_checked or (
        tokenizer.merge_products <= vocab.keys() and set(chain.from_iterable(tokenizer.merges)) <= vocab.keys()
    )
    bad_merges = (
        []
        if fine
        else [m for m in tokenizer.merges if m[0] not in vocab or m[1] not in vocab or m[0] + m[1] not in vocab]
    )
    if bad_merges:  # tokenizers may panic building its merge table from these
        report.refuse(f"{len(bad_merges)} merges use or produce tokens outside the vocabulary, e.g. {bad_merges[:3]}")

    if tokenizer.byte_level:
        missing = [b for b, c in BYTE_TO_UNICODE.items() if c not in vocab]
        if missing:
            report.reasons.append(f"byte alphabet incomplete: {len(missing)} of 256 bytes missing, e.g. {missing[:5]}")
        foreign = (
            []
            if set("".join(vocab)) <= _BYTE_LEVEL_ALPHABET
            else [t for t in vocab if t not in tokenizer.added_tokens and not set(t) <= _BYTE_LEVEL_ALPHABET]
        )
        if foreign:
            report.refuse(f"{len(foreign)} tokens hold characters outside the byte-level alphabet, e.g. {foreign[:3]}")
        # An added token matches its text before BPE; if that text is also a byte-level token of
        # other bytes ("ü" is byte 0xFC there), encoding and decoding disagree.
        two_faced = [
            t
            for t in tokenizer.added_tokens
            if t in vocab
            and set(t) <= _BYTE_LEVEL_ALPHABET
            and bytes(UNICODE_TO_BYTE[c] for c in t) != t.encode("utf-8")
        ]
        if two_faced:
            report.reasons.append(
                f"{len(two_faced)} added tokens mean other bytes as byte-level tokens, e.g. {two_faced[:3]}"
            )
    if tokenizer.byte_fallback:
        # An ASCII byte whose character is a token of its own never falls back (Gemini has "\t", not <0x09>).
        missing_bytes = [
            t for b, t in enumerate(BYTE_FALLBACK_TOKENS) if t not in vocab and not (b < 0x80 and chr(b) in vocab)
        ]
        if missing_bytes:
            report.reasons.append(
                f"byte fallback incomplete: {len(missing_bytes)} of the 256 byte tokens missing, "
                f"e.g. {missing_bytes[:5]} (text needing those bytes cannot be encoded)"
            )
    if report.unusable:
        return report
    if encoding is None:
        encoding = check_encoding(tokenizer, probes=probes)
    report.reasons += encoding.reasons
    report.unusable += encoding.unusable
    report.unreachable, report.probes = encoding.unreachable, encoding.probes
    moved = [
        f"{a['content']!r} {a['id']} -> {encoding.added_ids.get(a['content'])}"
        for a in tokenizer.pipeline.get("added_tokens", [])
        if encoding.added_ids.get(a["content"]) != a["id"]
    ]
    if moved and not report.unusable:
        report.reasons.append(
            f"{len(moved)} added tokens get other ids in tokenizers than the file gives them, e.g. "
            f"{', '.join(moved[:3])} (the vocabulary does not hold them, and tokenizers numbers "
            "such tokens on from its size)"
        )
    if parent is not None and not report.unusable:
        was_unreachable = set(parent_unreachable if parent_unreachable is not None else unreachable_tokens(parent))
        broken = [t for t in report.unreachable if t in parent.vocab and t not in was_unreachable]
        new = [t for t in report.unreachable if t not in parent.vocab]
        if broken:
            report.reasons.append(f"{len(broken)} tokens reachable in the parent became unreachable, e.g. {broken[:5]}")
        if new:
            report.reasons.append(f"{len(new)} added tokens are unreachable, e.g. {new[:5]}")
    return report


def check_encoding(tokenizer: str | BPETokenizer, *, probes: list[str] | None = None) -> ValidationReport:
    """The checks that need the ``tokenizers`` library: that the tokenizer.json loads, that the
    probes encode and decode losslessly, and which tokens are unreachable.

    Given the text alone nothing is parsed in Python, so a registry runs this in a worker
    process on the uploaded bytes while it checks the rest; :func:`validate` runs it on a
    :class:`BPETokenizer` (its cached ``hf``).

    >>> check_encoding(BPETokenizer.train(["hello world"], vocab_size=270).to_json()).ok
    True
    >>> check_encoding('{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "b"]]}}').unusable
    ['tokenizer.json does not load in tokenizers: ...']
    """
    report = ValidationReport()
    try:
        loaded = tokenizer.hf if isinstance(tokenizer, BPETokenizer) else Tokenizer.from_str(tokenizer)
    except BaseException as exc:
        _reraise_unless_library_error(exc)
        report.refuse(f"tokenizer.json does not load in tokenizers: {exc}")
        return report
    texts = probes if probes is not None else probe_texts(loaded)
    report.probes = len(texts)
    try:
        decoded = [
            loaded.decode(enc.ids, skip_special_tokens=False)
            for enc in loaded.encode_batch(texts, add_special_tokens=False)
        ]
    except BaseException as exc:
        _reraise_unless_library_error(exc)
        report.refuse(f"tokenizers fails while encoding: {type(exc).__name__}: {exc}")
        return report
    promise = RoundTrip.of(loaded)
    lossy = [(d, p) for d, p in zip(decoded, promise.promised(texts)) if d != p]
    if lossy:
        got, promised = lossy[0]
        after = "" if promise.identity else f" (after the tokenizer's own {promise.description})"
        report.reasons.append(
            f"encode→decode is lossy on {len(lossy)} of {len(texts)} probes{after}, e.g. "
            f"{promised!r} decodes as {got!r}"
        )
    # A BPETokenizer's are remembered: validated again as a parent, it is not encoded again.
    report.unreachable = unreachable_tokens(tokenizer if isinstance(tokenizer, BPETokenizer) else loaded)
    report.added_ids = {t.content: i for i, t in loaded.get_added_tokens_decoder().items()}
    return report


def _reraise_unless_library_error(exc: BaseException) -> None:
    """A Rust panic in ``tokenizers`` is a BaseException (PanicException): a reason like any
    other error; signals and exits must still stop us."""
    if not isinstance(exc, Exception) and type(exc).__name__ != "PanicException":
        raise exc


def load_tokenizer(
    path: str | Path, *, allow_invalid: bool = False, on_invalid: Callable[[list[str]], None] | None = None
) -> BPETokenizer:
    """The tokenizer loader every command and service uses: a ``tokenizer.json`` (or a directory
    holding one, such as a version folder), refused with an :class:`InvalidTokenizer` that names
    the file and every reason.

    The structure is checked first (:meth:`BPETokenizer.from_json`), then :func:`validate`, the
    rule every published version follows, so no command works on a tokenizer that encodes
    lossily. ``allow_invalid`` accepts one that fails validation but can still be used, and hands
    the reasons to ``on_invalid``; one that does not load or crashes is refused either way.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
    >>> BPETokenizer.train(["hello world"], vocab_size=270).save(path)
    >>> load_tokenizer(os.path.dirname(path)).decode(load_tokenizer(path).encode("hello"))
    'hello'
    >>> _ = open(path, "w").write("[]")
    >>> load_tokenizer(path)
    Traceback (most recent call last):
    ...
    tokenizer_service.errors.InvalidTokenizer: ...tokenizer.json: invalid tokenizer: the top level must be a JSON \
object, got a list
    """
    path = Path(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        path = path / "tokenizer.json"
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise InvalidTokenizer(["is a directory without a tokenizer.json"], source=path) from None
    except FileNotFoundError:
        raise InvalidTokenizer(["file not found"], source=path) from None
    except OSError as exc:
        raise InvalidTokenizer([exc.strerror or str(exc)], source=path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidTokenizer(
            [f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"], source=path
        ) from None
    tokenizer = BPETokenizer.from_json(text, source=path)
    del data, text  # a large file's text and parse are garbage now: free them before validating
    release_free_memory()
    report = validate(tokenizer)
    if report.unusable or (report.reasons and not allow_invalid):
        report.raise_for_reasons(source=path)
    if report.reasons and on_invalid is not None:
        on_invalid(report.reasons)
    return tokenizer
