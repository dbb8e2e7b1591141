"""A BPE tokenizer model that round-trips Hugging Face ``tokenizer.json``.

The model is what Ted-Tok and LiteToken reason about: a vocabulary (token -> id), an ordered
merge list, special tokens and the pre-tokenization pipeline. Encoding is always done by the
``tokenizers`` Rust implementation, built once per instance and cached.

Tokens are kept in the tokenizer's own alphabet: for byte-level tokenizers (GPT-2 style) that
is the printable byte-to-unicode mapping (``"Ġhello"`` is ``b" hello"``), for character-level
tokenizers it is plain text.

>>> tok = BPETokenizer.train(["ab ab abc"] * 3, vocab_size=260)
>>> tok.hf.encode("ab abd").tokens
['ab', 'Ġab', 'd']
>>> tok.token_bytes("Ġab")
b' ab'
"""

from __future__ import annotations

import copy
import hashlib
import json
import operator
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from itertools import chain, starmap
from pathlib import Path
from typing import Any, Protocol

import pydantic_core
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from tokenizer_service.errors import InvalidTokenizer
from tokenizer_service.heap import release_free_memory
from tokenizer_service.round_trip import pipeline_steps
from tokenizer_service.tokenizer_json import parse_json, tokenizer_json_problems

Merge = tuple[str, str]

# A merge list from which length on a build's freed heap is handed back to the OS (heap.py): a
# 100k-merge build passes ~60 MB through; a 4k-vocabulary revision's trim took 5 ms for nothing.
LARGE_MERGE_LIST = 50_000


def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable characters.

    >>> byte_to_unicode()[32], byte_to_unicode()[65]
    ('Ġ', 'A')
    """
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, codes)}


BYTE_TO_UNICODE = byte_to_unicode()
UNICODE_TO_BYTE = {c: b for b, c in BYTE_TO_UNICODE.items()}
# SentencePiece-style byte fallback: a character outside the vocabulary is encoded as the tokens
# of its UTF-8 bytes, ``<0x00>`` ... ``<0xFF>``.
BYTE_FALLBACK_TOKENS = tuple(f"<0x{b:02X}>" for b in range(256))
_BYTE_FALLBACK_VALUE = {t: b for b, t in enumerate(BYTE_FALLBACK_TOKENS)}

# GPT-2's pre-tokenization regex (``'s|'t|...| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+``)
# restricted to ASCII text, where letters, digits and whitespace are plain classes: the stdlib
# engine then splits ~2.5x faster than a Unicode-aware one. Whitespace is what the Rust
# (Oniguruma) engine calls whitespace in ASCII; \x1c-\x1f are not (Python's str.isspace says
# they are).
_WS = r"\t\n\x0b\x0c\r "
GPT2_ASCII_PATTERN = re.compile(
    rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_WS}A-Za-z0-9]+|[{_WS}]+(?![^{_WS}])|[{_WS}]+"
)
# The byte-level alphabet of ASCII characters, as a str.translate table.
_ASCII_TO_BYTE_LEVEL = {b: BYTE_TO_UNICODE[b] for b in range(128)}


def ascii_to_byte_level(word: str) -> str:
    """An ASCII word in the byte-level alphabet.

    >>> ascii_to_byte_level(" a!")
    'Ġa!'
    """
    return word.translate(_ASCII_TO_BYTE_LEVEL)


# What an exported file's model object ends with before its vocabulary and merges are put in.
_EMPTY_BULK = b'"vocab":{},"merges":[]'


def _compact_json(data: Any) -> str:
    """JSON as tokmaint exports tokenizer files: compact, non-ASCII characters as they are.

    >>> _compact_json({"a": ["Ġ", 1.5]})
    '{"a":["Ġ",1.5]}'
    """
    # A tree by construction: the circularity check only costs time (~15% at 50k tokens).
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), check_circular=False)


def _strings_and_ids(vocab: Mapping[Any, Any], merges: Sequence[Sequence[Any]]) -> bool:
    """Whether a vocabulary maps strings to whole numbers and the merges name strings only
    (all that pydantic-core writes as json does; a checked file always does).

    >>> _strings_and_ids({"a": 0, "b": 1, "ab": 2}, [("a", "b")]), _strings_and_ids({"a": 0.0}, [])
    (True, False)
    """
    return (
        set(map(type, vocab)) <= {str}
        and set(map(type, vocab.values())) <= {int}
        and set(map(type, chain.from_iterable(merges))) <= {str}
    )


def mentions_byte_level(section: Any) -> bool:
    """True when a pipeline section (or any nested step) is a ByteLevel component.

    >>> mentions_byte_level({"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"}]})
    True
    """
    if isinstance(section, dict):
        return section.get("type") == "ByteLevel" or any(mentions_byte_level(v) for v in section.values())
    if isinstance(section, list):
        return any(mentions_byte_level(v) for v in section)
    return False


def loaded_byte_level(hf: Tokenizer) -> bool:
    """:attr:`BPETokenizer.byte_level` of a tokenizer loaded in ``tokenizers`` (its pre-tokenizer
    or decoder is, or holds, ByteLevel).

    >>> loaded_byte_level(BPETokenizer.train(["x"], vocab_size=257).hf)
    True
    """
    return any(
        mentions_byte_level(json.loads(part.__getstate__()))
        for part in (hf.pre_tokenizer, hf.decoder)
        if part is not None
    )


def loaded_byte_fallback(hf: Tokenizer) -> bool:
    """:attr:`BPETokenizer.byte_fallback` of a tokenizer loaded in ``tokenizers``.

    >>> loaded_byte_fallback(BPETokenizer.train(["x"], vocab_size=257).hf)
    False
    """
    return bool(getattr(hf.model, "byte_fallback", False))


def space_symbol(pipeline: Mapping[str, Any]) -> str | None:
    """The symbol a SentencePiece-style pipeline writes spaces as (``▁``): a normalizer that
    replaces ``" "`` by it, or a Metaspace pre-tokenizer; None for other pipelines.

    >>> space_symbol({"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}})
    '▁'
    >>> space_symbol({"pre_tokenizer": {"type": "ByteLevel"}}) is None
    True
    """
    for step in pipeline_steps(pipeline.get("normalizer"), "normalizers"):
        pattern = step.get("pattern")
        if (
            step.get("type") == "Replace"
            and isinstance(pattern, dict)
            and pattern.get("String") == " "
            and isinstance(content := step.get("content"), str)
            and content
        ):
            return content
    for step in pipeline_steps(pipeline.get("pre_tokenizer"), "pretokenizers"):
        if step.get("type") == "Metaspace" and isinstance(replacement := step.get("replacement"), str) and replacement:
            return replacement
    return None


def holding_added_tokens(vocab: Mapping[str, int], added: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """The vocabulary, with the added tokens it lacks put in at their ids when it has holes.

    ``tokenizers`` keeps an added token's id only when the model's vocabulary holds the token;
    it numbers the others on from the vocabulary's size. A vocabulary with holes or fewer
    tokens (a residue-free export, appended ids) would shift them onto ids of the model's own
    tokens (Qwen's ``<|endoftext|>`` onto a byte-level token), so there they go into the
    vocabulary, where BPE never makes them (no merge produces them) and they keep their ids.

    >>> added = [{"content": "<eos>", "id": 3}]
    >>> holding_added_tokens({"a": 0, "b": 1, "c": 2}, added), holding_added_tokens({"a": 0, "c": 2}, added)
    ({'a': 0, 'b': 1, 'c': 2}, {'a': 0, 'c': 2, '<eos>': 3})
    """
    vocab = dict(vocab)
    outside = [entry["id"] for entry in added if entry["content"] not in vocab]
    dense = not vocab or max(vocab.values()) + 1 == len(vocab)
    if dense and outside == list(range(len(vocab), len(vocab) + len(outside))):
        return vocab
    taken = set(vocab.values())
    for entry in added:
        if entry["content"] not in vocab and entry["id"] not in taken:
            vocab[entry["content"]] = entry["id"]
            taken.add(entry["id"])
    return vocab


def loaded_special_tokens(hf: Tokenizer) -> frozenset[str]:
    """:attr:`BPETokenizer.special_tokens` of a tokenizer loaded in ``tokenizers``.

    >>> sorted(loaded_special_tokens(BPETokenizer.train(["x"], vocab_size=258, special_tokens=["<eos>"]).hf))
    ['<eos>']
    """
    return frozenset(t.content for t in hf.get_added_tokens_decoder().values() if t.special)


class BPETokenizer:
    """One immutable tokenizer version: vocabulary, merges, specials and HF pipeline settings.

    Build one with :meth:`train`, :meth:`from_json` or ``validation.load_tokenizer``; derive a revised one
    with :meth:`replace_model`. ``hf`` is the cached ``tokenizers.Tokenizer`` that encodes.

    >>> tok = BPETokenizer.train(["1+1=2", "11+1=12"], vocab_size=10, byte_level=False)
    >>> tok.decode(tok.encode("11+1=12")) == "11+1=12"
    True
    """

    def __init__(
        self,
        *,
        vocab: Mapping[str, int],
        merges: Sequence[Merge],
        pipeline: Mapping[str, Any],
        model_options: Mapping[str, Any] | None = None,
    ) -> None:
        self.vocab: dict[str, int] = dict(vocab)
        # Merges name vocabulary tokens by the vocabulary's own string objects: a large merge list
        # (Gemma-3: 515k) would otherwise hold a second copy of every token it names.
        shared = {t: t for t in self.vocab}
        self.merges: tuple[Merge, ...] = tuple((shared.get(u, u), shared.get(v, v)) for u, v in merges)
        # Everything in tokenizer.json except the model's vocab and merges, kept verbatim so an
        # export encodes exactly like the source.
        self.pipeline: dict[str, Any] = copy.deepcopy(dict(pipeline))
        self.model_options: dict[str, Any] = dict(model_options or {})
        self.id_to_token: dict[int, str] = {i: t for t, i in self.vocab.items()}
        # True once every merge is known to name and produce vocabulary tokens (``from_data``
        # checks it), so ``validate`` need not check 50k+ merges again.
        self.merges_checked = False
        if len(self.id_to_token) != len(self.vocab):
            raise ValueError("vocabulary maps two tokens to one id")

    # ----- construction -------------------------------------------------------------------
    @classmethod
    def train(
        cls,
        texts: Iterable[str],
        *,
        vocab_size: int,
        byte_level: bool = True,
        special_tokens: Sequence[str] = (),
        pre_tokenizer: pre_tokenizers.PreTokenizer | None = None,
        alphabet: Sequence[str] = (),
        progress: bool = False,
    ) -> "BPETokenizer":
        """Train a fresh tokenizer with ``tokenizers``' BpeTrainer.

        Byte-level (default) uses GPT-2's pre-tokenizer and the full 256-byte alphabet; character
        level uses ``pre_tokenizer`` (none: each text is one word) and the characters seen plus
        ``alphabet``. ``progress`` shows the trainer's progress bars on stderr.
        """
        hf = Tokenizer(models.BPE())
        if byte_level:
            hf.pre_tokenizer = pre_tokenizer or pre_tokenizers.ByteLevel(add_prefix_space=False)
            hf.decoder = decoders.ByteLevel()
            initial = pre_tokenizers.ByteLevel.alphabet()
        else:
            if pre_tokenizer is not None:
                hf.pre_tokenizer = pre_tokenizer
            hf.decoder = decoders.Fuse()
            initial = list(alphabet)
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(special_tokens),
            initial_alphabet=initial,
            show_progress=progress,
        )
        hf.train_from_iterator(texts, trainer)
        return cls.from_json(hf.to_str())

    @classmethod
    def from_json(cls, text: str, *, source: str | Path | None = None) -> "BPETokenizer":
        """Parse a HF ``tokenizer.json`` string whose model is BPE.

        The structure is checked before anything is built, so a bad file is an
        :class:`InvalidTokenizer` naming every problem by its JSON path, never another exception
        and never a huge allocation (ids must lie below ``MAX_ID_SPACE``). Whether ``tokenizers``
        loads it and encodes losslessly is :func:`validation.validate`'s job; files are read by
        :func:`validation.load_tokenizer`.

        >>> try:
        ...     BPETokenizer.from_json('{"model": {"vocab": {"a": 0, "b": -1}, "merges": [["a", "c"]]}}')
        ... except InvalidTokenizer as exc:
        ...     print(*exc.reasons, sep="\\n")
        model.vocab: 1 negative ids, e.g. 'b': -1
        model.merges: 1 merges name tokens outside the vocabulary, e.g. [0] ["a", "c"]
        """
        return cls.from_data(parse_json(text, source=source), source=source)

    @classmethod
    def from_data(cls, data: Any, *, source: str | Path | None = None) -> "BPETokenizer":
        """Build from a parsed ``tokenizer.json`` (:func:`parse_json`, which remembers duplicate
        keys), after the same structural checks as :meth:`from_json`."""
        reasons = tokenizer_json_problems(data)
        if reasons:
            raise InvalidTokenizer(reasons, source=source)
        model = data["model"]
        merges = model["merges"]
        if str in set(map(type, merges)):  # the older "a b" form
            merges = [m.split(" ", 1) if isinstance(m, str) else m for m in merges]
        options = {k: v for k, v in model.items() if k not in ("vocab", "merges", "type")}
        pipeline = {k: v for k, v in data.items() if k != "model"}
        tokenizer = cls(vocab=model["vocab"], merges=merges, pipeline=pipeline, model_options=options)
        tokenizer.merges_checked = True
        return tokenizer

    def replace_model(self, *, vocab: Mapping[str, int], merges: Sequence[Merge]) -> "BPETokenizer":
        """A new version with the same pipeline and options but another vocabulary and merges
        (holding its added tokens where it has holes: :func:`holding_added_tokens`)."""
        vocab = holding_added_tokens(vocab, self.pipeline.get("added_tokens", []))
        return BPETokenizer(vocab=vocab, merges=merges, pipeline=self.pipeline, model_options=self.model_options)

    # ----- export -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        model = {"type": "BPE", **self.model_options}
        # Ids in order keeps the JSON stable and readable. A revision's vocabulary has its new
        # tokens last: sorted with a C key (a lambda's 50k calls took ~15 ms).
        ids = list(self.vocab.values())
        model["vocab"] = (
            dict(self.vocab) if ids == sorted(ids) else dict(sorted(self.vocab.items(), key=operator.itemgetter(1)))
        )
        model["merges"] = list(self.merges)  # json writes the pairs (tuples) as lists
        data = {"version": "1.0", **self.pipeline, "model": model}
        data.setdefault("added_tokens", [])
        return data

    def to_json(self) -> str:
        """The exported ``tokenizer.json`` text."""
        return self.to_json_bytes().decode("utf-8")

    def to_json_bytes(self) -> bytes:
        """The exported ``tokenizer.json`` as UTF-8, what files and the registry hold (built once:
        a version never changes)."""
        return self._json_utf8

    @cached_property
    def _json_utf8(self) -> bytes:
        # Kept as UTF-8: a str of a vocabulary with characters beyond U+FFFF takes 4 bytes a
        # character (Gemma-3: 124 MB against 33 MB).
        data = self.to_dict()
        model = data["model"]
        if not _strings_and_ids(model["vocab"], model["merges"]):
            return _compact_json(data).encode("utf-8")
        # The vocabulary and merges, nearly all of the file, are written by pydantic-core's
        # encoder (Rust: ~70 ms less a 50k-token revision, which exports two versions), whose
        # bytes for strings and whole numbers are json's (tests). The rest, whose
        # floats the two may write differently, is json's, with empty ones in their place: the
        # model object ends with them, and nothing after it can hold that text.
        bulk = pydantic_core.to_json({"vocab": model["vocab"], "merges": model["merges"]})[1:-1]
        model["vocab"], model["merges"] = {}, []
        skeleton = _compact_json(data).encode("utf-8")
        at = skeleton.rindex(_EMPTY_BULK)
        return skeleton[:at] + bulk + skeleton[at + len(_EMPTY_BULK) :]

    def save(self, path: str | Path) -> None:
        Path(path).write_bytes(self.to_json_bytes())

    @cached_property
    def sha256(self) -> str:
        """Content hash of the exported tokenizer.json (the registry's ETag)."""
        return hashlib.sha256(self.to_json_bytes()).hexdigest()

    # ----- properties ---------------------------------------------------------------------
    @cached_property
    def hf(self) -> Tokenizer:
        """The ``tokenizers`` implementation of this version (built once).

        Parsed from this version's JSON without its merges, which ``models.BPE`` then takes as
        they are: parsing a long merge list takes twice the time and memory (Gemma-3's 515k: 1.1 s
        and ~320 MB passing through for an ~80 MB model, against 0.55 s and ~150 MB). The parse
        numbers the added tokens by the model it reads: when the vocabulary holds each of them at
        its id, a model of just those tokens gives the same ids (and skips writing and parsing
        the whole vocabulary, ~0.2 s of a 50k-token revision); otherwise ``tokenizers`` numbers
        some from the vocabulary's size, and the whole vocabulary is parsed. Either way the result
        serializes exactly as the exported file parses (tests). An option ``models.BPE`` cannot
        take falls back to the parser. What the build took is handed back to the OS (:mod:`heap`).
        """
        options = {k: v for k, v in self.model_options.items() if v is not None}
        added = {t["content"]: t["id"] for t in self.pipeline.get("added_tokens", [])}
        held = all(self.vocab.get(content) == i for content, i in added.items())
        model = {"type": "BPE", **options, "vocab": added if held else self.vocab, "merges": []}
        try:
            hf = Tokenizer.from_str(json.dumps({"version": "1.0", **self.pipeline, "model": model}, ensure_ascii=False))
            hf.model = models.BPE(vocab=self.vocab, merges=list(self.merges), **options)
        except Exception:  # what it cannot take, the parser refuses with its reason or reads as the file means it
            hf = Tokenizer.from_str(self.to_json())
        if len(self.merges) >= LARGE_MERGE_LIST:  # a small build's few megabytes are not worth the trim's time
            release_free_memory()
        return hf

    @cached_property
    def byte_level(self) -> bool:
        return mentions_byte_level(self.pipeline.get("pre_tokenizer")) or mentions_byte_level(
            self.pipeline.get("decoder")
        )

    @cached_property
    def byte_fallback(self) -> bool:
        """SentencePiece-style byte fallback: characters outside the vocabulary become the
        ``<0xNN>`` tokens of their bytes (Llama-2, Gemma)."""
        return bool(self.model_options.get("byte_fallback", False))

    @cached_property
    def space_symbol(self) -> str | None:
        """The symbol spaces are written as (``▁`` for SentencePiece-style pipelines), or None."""
        return space_symbol(self.pipeline)

    @property
    def ignore_merges(self) -> bool:
        return bool(self.model_options.get("ignore_merges", False))

    @cached_property
    def added_tokens(self) -> frozenset[str]:
        """The texts of the added tokens (matched in the input before BPE), special or not."""
        return frozenset(t["content"] for t in self.pipeline.get("added_tokens", []))

    @cached_property
    def special_tokens(self) -> frozenset[str]:
        return frozenset(t["content"] for t in self.pipeline.get("added_tokens", []) if t.get("special"))

    @cached_property
    def base_tokens(self) -> frozenset[str]:
        """Tokens no merge produces (the alphabet) and the added tokens, special or not, which
        are matched before BPE. Never deleted, never residues."""
        return frozenset(self.vocab.keys() - self.merge_products) | self.added_tokens

    @cached_property
    def merge_products(self) -> frozenset[str]:
        """The tokens the merges produce.

        >>> sorted(BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={}).merge_products)
        ['ab']
        """
        return frozenset(self.merge_outputs)

    @cached_property
    def merge_outputs(self) -> tuple[str, ...]:
        """The token each merge makes, in merge order (built once: diffs look up producers).

        >>> BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={}).merge_outputs
        ('ab',)
        """
        vocab, names = self.vocab, self.id_to_token
        return tuple(names[vocab[w]] if w in vocab else w for w in starmap(operator.add, self.merges))

    @cached_property
    def id_space(self) -> int:
        """One past the largest id in use, added tokens included: where fresh ids start.

        >>> tok = BPETokenizer.train(["ab"], vocab_size=257, special_tokens=["<eos>"])
        >>> tok.vocab["<eos>"], len(tok), tok.id_space
        (0, 257, 257)
        """
        added = [t["id"] for t in self.pipeline.get("added_tokens", [])]
        return max([*self.vocab.values(), *added], default=-1) + 1

    @cached_property
    def free_ids(self) -> tuple[int, ...]:
        """The ids below ``id_space`` that no token holds (the holes deletions leave): a model
        must never emit them.

        >>> BPETokenizer(vocab={"a": 0, "b": 1, "ab": 3}, merges=[("a", "b")], pipeline={}).free_ids
        (2,)
        """
        held = {*self.vocab.values(), *(t["id"] for t in self.pipeline.get("added_tokens", []))}
        return tuple(i for i in range(self.id_space) if i not in held)

    def __len__(self) -> int:
        return len(self.vocab)

    # ----- encoding -----------------------------------------------------------------------
    def token_bytes(self, token: str) -> bytes:
        """The bytes a token stands for: byte-level symbols mapped back, a byte-fallback token's
        byte, the space symbol as a space; special tokens (and byte-level added tokens) as their text.

        >>> BPETokenizer.train(["x"], vocab_size=257).token_bytes("Ġx")
        b' x'
        >>> sp = BPETokenizer(vocab={"<0x0A>": 0, "▁": 1, "x": 2, "▁x": 3}, merges=[("▁", "x")], pipeline={
        ...     "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}},
        ...     model_options={"byte_fallback": True})
        >>> sp.token_bytes("▁x"), sp.token_bytes("<0x0A>")
        (b' x', b'\\n')
        """
        if token in self.special_tokens:
            return token.encode("utf-8")
        if self.byte_level:  # an added token is matched as text, not as byte symbols
            return token.encode("utf-8") if token in self.added_tokens else bytes(UNICODE_TO_BYTE[c] for c in token)
        if self.byte_fallback and token in _BYTE_FALLBACK_VALUE:
            return bytes((_BYTE_FALLBACK_VALUE[token],))
        if self.space_symbol is not None:
            token = token.replace(self.space_symbol, " ")
        return token.encode("utf-8")

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.hf.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def pre_tokenize(self, text: str) -> list[str]:
        """Split a text into the words BPE encodes separately (in the model's alphabet).

        Merges never cross these boundaries, so pairs are only counted inside a word. A
        SentencePiece-style pipeline has no pre-tokenizer of its own (a document is one word to
        ``tokenizers``); its words start at the space symbol (:meth:`split_words`), which encodes
        the same wherever no token crosses such a start.

        >>> sp = BPETokenizer(vocab={"▁": 0, "a": 1, "▁a": 2}, merges=[("▁", "a")], pipeline={
        ...     "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}})
        >>> sp.pre_tokenize("a a  a")
        ['a', '▁a', '▁▁a']
        """
        hf = self.hf
        if hf.normalizer is not None:
            text = hf.normalizer.normalize_str(text)
        pieces = [text] if hf.pre_tokenizer is None else [p for p, _ in hf.pre_tokenizer.pre_tokenize_str(text)]
        if self._word_start is None:
            return [p for p in pieces if p]
        return [word for piece in pieces if piece for word in self.split_words(piece)]

    @cached_property
    def _word_start(self) -> re.Pattern[str] | None:
        """Where a SentencePiece-style word starts: a space symbol after another character. None
        when words cannot be split exactly: no space symbol, or ``ignore_merges`` (a word that is
        a token is looked up whole, so a shorter word could encode differently)."""
        symbol = self.space_symbol
        if symbol is None or self.ignore_merges:
            return None
        return re.compile(f"(?<!{re.escape(symbol)})(?={re.escape(symbol)})")

    @cached_property
    def _crossing(self) -> re.Pattern[str] | None:
        """The tokens that hold a word start inside them (Gemma-3's ``>▁</``), longest first, in
        a look-ahead that finds every occurrence: no word is cut inside one."""
        if self._word_start is None:
            return None
        crossing = sorted(
            (t for t in self.vocab if t not in self.added_tokens and self._word_start.search(t, 1)),
            key=len,
            reverse=True,
        )
        return re.compile("(?=(" + "|".join(map(re.escape, crossing)) + "))") if crossing else None

    def split_words(self, piece: str) -> list[str]:
        """A SentencePiece-style piece cut where words start, never inside a token that crosses
        a word start; the piece whole for other pipelines.

        >>> sp = BPETokenizer(vocab={"▁": 0, "a": 1, ">": 2, "a▁>": 3}, merges=[], pipeline={
        ...     "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}})
        >>> sp.split_words("▁a▁b"), sp.split_words("b▁a▁>▁a")
        (['▁a', '▁b'], ['b', '▁a▁>', '▁a'])
        """
        if self._word_start is None:
            return [piece]
        cuts = [m.start() for m in self._word_start.finditer(piece, 1)]
        if cuts and self._crossing is not None:
            spans = [(m.start(), m.start() + len(m.group(1))) for m in self._crossing.finditer(piece)]
            cuts = [c for c in cuts if not any(a < c < b for a, b in spans)]
        bounds = [0, *cuts, len(piece)]
        return [piece[a:b] for a, b in zip(bounds, bounds[1:])]

    @cached_property
    def plain_gpt2_pre_tokenizer(self) -> bool:
        """True when pre-tokenization is exactly GPT-2's regex split plus the byte mapping."""
        pre = self.pipeline.get("pre_tokenizer") or {}
        return (
            self.pipeline.get("normalizer") is None
            and pre.get("type") == "ByteLevel"
            and pre.get("use_regex", True)
            and not pre.get("add_prefix_space", False)
        )

    def word_counts(self, texts: Iterable[str]) -> Counter[str]:
        """How often each word (pre-token, in the model's alphabet) occurs in the texts.

        Same result as counting :meth:`pre_tokenize`, faster where :meth:`ascii_words` applies.

        >>> sorted(BPETokenizer.train(["x"], vocab_size=257).word_counts(["a b", "b"]).items())
        [('a', 1), ('b', 1), ('Ġb', 1)]
        """
        counts: Counter[str] = Counter()
        raw: Counter[str] = Counter()
        for text in texts:
            words = self.ascii_words(text)
            if words is None:
                counts.update(self.pre_tokenize(text))
            else:
                raw.update(words)
        for word, n in raw.items():
            counts[ascii_to_byte_level(word)] += n
        return counts

    def ascii_words(self, text: str) -> list[str] | None:
        """The words of ``text`` in order before the byte mapping (:func:`ascii_to_byte_level`
        gives the model's), when a stdlib regex split is exact: GPT-2-style pre-tokenization and
        ASCII text, several times faster than the round trip through ``tokenizers``; None
        otherwise (:meth:`pre_tokenize` then).

        >>> BPETokenizer.train(["x"], vocab_size=257).ascii_words("a b!")
        ['a', ' b', '!']
        """
        # Unicode letter/number classes differ between Python's engines and the Rust one for
        # rare scripts, so only ASCII takes the fast path: exact for every input.
        if self.plain_gpt2_pre_tokenizer and text.isascii():
            return GPT2_ASCII_PATTERN.findall(text)
        return None

    def tokenize_word(self, word: str) -> list[int]:
        """BPE on one pre-tokenized word (no pre-tokenizer applied), as token ids."""
        return self.tokenize_words([word])[0]

    def tokenize_words(self, words: Iterable[str]) -> list[list[int]]:
        """:meth:`tokenize_word` of each word, the model looked up once (a step's new words: the
        Python around each call cost as much as the BPE in it).

        >>> tok = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={})
        >>> tok.tokenize_words(["ab", "ba", ""])
        [[2], [1, 0], []]
        """
        tokenize = self.hf.model.tokenize
        return [[token.id for token in tokenize(word)] for word in words]

    def bytes_per_token(self, texts: Sequence[str], *, delimited: bool = False) -> float:
        """Compression: UTF-8 bytes of the texts over the number of tokens they encode to.

        ``delimited`` counts one end-of-text delimiter per text, one byte and one token, as in
        the sequences a model trains on (Ted-Tok's Table 2 convention).

        >>> tok = BPETokenizer(vocab={"1": 0, "+": 1, "=": 2, "2": 3, "1+": 4}, merges=[("1", "+")], pipeline={})
        >>> tok.encode("1+1=2"), tok.bytes_per_token(["1+1=2"]), tok.bytes_per_token(["1+1=2"], delimited=True)
        ([4, 0, 2, 3], 1.25, 1.2)
        """
        n_bytes = sum(len(t.encode("utf-8")) for t in texts)
        n_tokens = sum(len(ids) for ids in self.encode_batch(texts))
        extra = len(texts) if delimited else 0
        return (n_bytes + extra) / max(n_tokens + extra, 1)


class MergeRanks(Protocol):
    """What :func:`bpe_pieces` asks of a rank table: a merge's rank, or None."""

    def get(self, merge: Merge, /) -> float | None: ...  # only compared: residue_removal ranks a merge k - 0.5


def bpe_pieces(symbols: Sequence[str], ranks: MergeRanks, *, until: int = 1) -> list[str]:
    """BPE on one word in Python: merge the lowest-ranked adjacent pair (leftmost on ties) until
    no merge applies or only ``until`` pieces are left.

    The ``tokenizers`` model does the encoding; this loop is for questions it cannot answer,
    such as which merge formed a token (stop at two pieces) or BPE with a subset of the merges.

    >>> ranks = {("a", "b"): 0, ("b", "c"): 1, ("ab", "c"): 2}
    >>> bpe_pieces("abc", ranks), bpe_pieces("abc", ranks, until=2), bpe_pieces("cab", ranks)
    (['abc'], ['ab', 'c'], ['c', 'ab'])
    """
    parts = list(symbols)
    while len(parts) > until:
        best, best_rank = -1, None
        for i in range(len(parts) - 1):
            rank = ranks.get((parts[i], parts[i + 1]))
            if rank is not None and (best_rank is None or rank < best_rank):
                best, best_rank = i, rank
        if best_rank is None:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts


def jaccard_distance(a: BPETokenizer, b: BPETokenizer) -> float:
    """1 - |Va ∩ Vb| / |Va ∪ Vb| over token strings (Ted-Tok section 3.1).

    >>> a = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={})
    >>> b = BPETokenizer(vocab={"a": 0, "b": 1, "ba": 2}, merges=[("b", "a")], pipeline={})
    >>> jaccard_distance(a, b)  # 2 shared of 4 tokens
    0.5
    """
    va, vb = set(a.vocab), set(b.vocab)
    return 1.0 - len(va & vb) / len(va | vb)
