"""The checks every published version must pass, with reasons when it does not.

``validate`` loads the exported ``tokenizer.json`` in ``tokenizers``, checks the base alphabet,
encodes and decodes a probe set losslessly (random Unicode, emoji, control bytes, whitespace
runs) and checks reachability: against a parent version, no token may become unreachable and
every new token must be reachable.

>>> from tokenizer_service.bpe import BPETokenizer
>>> report = validate(BPETokenizer.train(["hello world"], vocab_size=270))
>>> report.ok, report.reasons
(True, [])
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import Tokenizer

from tokenizer_service.bpe import BYTE_TO_UNICODE, BPETokenizer
from tokenizer_service.errors import InvalidTokenizer
from tokenizer_service.merge_graph import unreachable_tokens


@dataclass
class ValidationReport:
    reasons: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    probes: int = 0

    @property
    def ok(self) -> bool:
        return not self.reasons

    def raise_for_reasons(self, *, source: str | Path | None = None) -> None:
        if self.reasons:
            raise InvalidTokenizer(self.reasons, source=source)


def probe_texts(tokenizer: BPETokenizer, *, n: int = 200, seed: int = 0) -> list[str]:
    """Deterministic probe strings: hostile Unicode for byte-level, the alphabet otherwise.

    >>> probes = probe_texts(BPETokenizer.train(["x"], vocab_size=257), n=50)
    >>> any("\\x00" in p for p in probes), any("🙂" in p for p in probes)
    (True, True)
    """
    rng = random.Random(seed)
    if not tokenizer.byte_level:
        alphabet = sorted(t for t in tokenizer.base_tokens if len(t) == 1 and t not in tokenizer.special_tokens)
        return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(n)]
    fixed = [
        "".join(chr(c) for c in range(32)),
        "\x7f\x80\x9f tab\tnewline\n\r\n  spaces   end ",
        "emoji 🙂👍🏽👨‍👩‍👧 flags 🇫🇷 keycap 1️⃣",
        "mixed: Ünïcødé — 中文 日本語 한국어 العربية עברית हिन्दी",
        "\u200b\u200d\ufeff zero-width and BOM",
        "code:\n\tdef f(x):\n\t\treturn x**2  # comment\n",
    ]
    ranges = [(0x20, 0x7E), (0x00, 0x1F), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x4E00, 0x9FFF),
              (0x1F300, 0x1FAFF), (0x10000, 0x10FFF), (0xE000, 0xF8FF)]
    out = list(fixed)
    while len(out) < n:
        chars = []
        for _ in range(rng.randint(1, 40)):
            lo, hi = rng.choice(ranges)
            chars.append(chr(rng.randint(lo, hi)))
        out.append("".join(chars))
    return out


def validate(tokenizer: BPETokenizer, *, parent: BPETokenizer | None = None, probes: list[str] | None = None
             ) -> ValidationReport:
    """Run every check; the report lists each failure as a human-readable reason."""
    report = ValidationReport()
    vocab = tokenizer.vocab
    bad_merges = [m for m in tokenizer.merges if m[0] not in vocab or m[1] not in vocab or m[0] + m[1] not in vocab]
    if bad_merges:
        report.reasons.append(f"{len(bad_merges)} merges use or produce tokens outside the vocabulary, "
                              f"e.g. {bad_merges[:3]}")
    try:
        loaded = Tokenizer.from_str(tokenizer.to_json())
    except Exception as exc:  # the library's own error text is the reason
        report.reasons.append(f"tokenizer.json does not load in tokenizers: {exc}")
        return report

    if tokenizer.byte_level:
        missing = [b for b, c in BYTE_TO_UNICODE.items() if c not in vocab]
        if missing:
            report.reasons.append(f"byte alphabet incomplete: {len(missing)} of 256 bytes missing, e.g. {missing[:5]}")

    texts = probes if probes is not None else probe_texts(tokenizer)
    report.probes = len(texts)
    lossy = [t for t, enc in zip(texts, loaded.encode_batch(texts, add_special_tokens=False))
             if loaded.decode(enc.ids, skip_special_tokens=False) != t]
    if lossy:
        report.reasons.append(f"encode→decode is lossy on {len(lossy)} of {len(texts)} probes, e.g. {lossy[0]!r}")

    report.unreachable = unreachable_tokens(tokenizer)
    if parent is not None:
        was_unreachable = set(unreachable_tokens(parent))
        broken = [t for t in report.unreachable if t in parent.vocab and t not in was_unreachable]
        new = [t for t in report.unreachable if t not in parent.vocab]
        if broken:
            report.reasons.append(f"{len(broken)} tokens reachable in the parent became unreachable, e.g. {broken[:5]}")
        if new:
            report.reasons.append(f"{len(new)} added tokens are unreachable, e.g. {new[:5]}")
    return report


def load_tokenizer(path: str | Path, *, check: bool = True) -> BPETokenizer:
    """The tokenizer loader every command and service uses: a ``tokenizer.json`` (or a directory
    holding one, such as a version folder), refused with an :class:`InvalidTokenizer` that names
    the file and every reason.

    The structure is always checked (:meth:`BPETokenizer.from_json`) and ``tokenizers`` must
    load the file; with ``check`` (default) it must also pass :func:`validate`, the rule every
    published version follows, so no command works on a tokenizer that encodes lossily.

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
        raise InvalidTokenizer([f"not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"],
                               source=path) from None
    tokenizer = BPETokenizer.from_json(text, source=path)
    if check:
        validate(tokenizer).raise_for_reasons(source=path)
    else:
        try:
            tokenizer.hf
        except Exception as exc:  # tokenizers raises plain Exception; its text is the reason
            raise InvalidTokenizer([f"tokenizer.json does not load in tokenizers: {exc}"], source=path) from None
    return tokenizer
