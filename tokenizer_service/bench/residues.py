"""LiteToken Table 4 across tokenizer families: residue shares on one corpus, beside the paper's.

Each tokenizer is audited as ``tokmaint residues`` audits it (:func:`residue_audit.audit_residues`:
share, split & re-merge, the residue-free export), in a process of its own so that its time and
peak memory are its own, and at the paper's thresholds for its kind:

* tiktoken-style (Llama-3, GPT-o200k, Gemma-3; and every file with ``ignore_merges`` or several
  merges for one token, such as Llama-2's): r = 0.05, s = 3.5 (section 5 and Table 4's caption
  agree);
* classic BPE (Qwen, DeepSeek-V3, BLOOM): r = 0.15, s = 4.0. The paper also says r = 0.25 (Table
  4's caption, Figure 1, section 6.6); we take 0.15 because section 5 names it for the runs
  Table 4 reports, and give the share at 0.25 too (``residue_share_r025``).

A file is matched to its Table 4 row by what it holds (vocabulary size and a special token of
that family), and a matched file takes the paper's kind: GPT-4o's ``tokenizer.json`` has one merge
per token, so its file alone looks classic. The paper counts on C4 (~171B tokens): on a corpus of
tens of MB most of a vocabulary is never seen and rare tokens get low neighbour entropy from few
observations, so shares differ from Table 4 for reasons of evidence, not of code.

>>> paper_row(BPETokenizer.train(["x"], vocab_size=257)) is None
True
"""

from __future__ import annotations

import multiprocessing
import resource
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.litetoken import PAPER_THRESHOLDS, find_residues
from tokenizer_service.round_trip import RoundTrip


@dataclass(frozen=True)
class PaperRow:
    """One row of LiteToken's Table 4 and how to recognise its tokenizer."""

    model: str
    kind: Literal["classic", "tiktoken"]
    scope_size: int
    residue_share: float
    residue_share_ratio_only: float
    matches: Callable[[BPETokenizer], bool]


def _holds(special: str, *sizes: int) -> Callable[[BPETokenizer], bool]:
    return lambda t: special in t.added_tokens and len(t.vocab) in sizes


TABLE_4 = (
    PaperRow("Qwen", "classic", 94376, 0.0507, 0.0765, _holds("<|im_start|>", 151643)),
    PaperRow("DeepSeek-V3", "classic", 72281, 0.0648, 0.0974, _holds("<｜begin▁of▁sentence｜>", 128000)),
    PaperRow("BLOOM", "classic", 107963, 0.0407, 0.0597, _holds("<pad>", 250680)),
    PaperRow("Gemma-3", "tiktoken", 150426, 0.1036, 0.1563, _holds("<start_of_turn>", 262144)),
    PaperRow("Llama-3", "tiktoken", 98102, 0.0812, 0.1298, _holds("<|begin_of_text|>", 128000)),
    # GPT-4o's o200k_base and gpt-oss's o200k_harmony share the vocabulary the paper measured.
    PaperRow("GPT-o200k_base", "tiktoken", 128856, 0.0802, 0.1346, _holds("<|endoftext|>", 199998, 200000)),
)


def paper_row(tokenizer: BPETokenizer) -> PaperRow | None:
    """The Table 4 row of a tokenizer, if it is one the paper measured."""
    return next((row for row in TABLE_4 if row.matches(tokenizer)), None)


def family(tokenizer: BPETokenizer) -> str:
    """The tokenizer's family in words: how it covers bytes, and its normalizer.

    >>> family(BPETokenizer.train(["x"], vocab_size=257))
    'byte-level BPE'
    """
    if tokenizer.byte_level:
        name = "byte-level BPE"
    elif tokenizer.space_symbol is not None:
        name = "SentencePiece-style BPE" + (" with byte fallback" if tokenizer.byte_fallback else "")
    else:
        name = "character-level BPE" + (" with byte fallback" if tokenizer.byte_fallback else "")
    steps = RoundTrip.of(tokenizer.hf).description
    return name if steps == "none" else f"{name} ({steps})"


def audit_one(path: str, corpus: str) -> dict[str, Any]:
    """One tokenizer's row (run in a fresh process: ``peak_rss_mb`` is this audit's own)."""
    import tempfile

    from tokenizer_service.corpus import read_corpus
    from tokenizer_service.heap import release_free_memory
    from tokenizer_service.residue_audit import ResidueOptions, audit_residues
    from tokenizer_service.validation import load_tokenizer

    started = time.perf_counter()
    tokenizer = load_tokenizer(path)
    texts = read_corpus(corpus).texts
    row = paper_row(tokenizer)
    kind = row.kind if row else None
    audit = audit_residues(tokenizer, texts, ResidueOptions(kind=kind or "auto"))
    summary = audit.summary
    result: dict[str, Any] = {
        "tokenizer": path,
        "model": row.model if row else None,
        "family": family(tokenizer),
        "kind": summary["kind"],
        "kind_from": "paper" if row else "file",
        "thresholds": {"r": summary["thresholds"]["r"], "s": summary["thresholds"]["s"]},
        "vocab_size": summary["vocab_size"],
        "scope_size": summary["scope_size"],
        "unseen": summary["unseen"],
        "residues": summary["residues"],
        "residue_share": summary["residue_share"],
        "residue_share_ratio_only": summary["residue_share_ratio_only"],
        "split_token_change": summary["tokens_change"]["split"],
        "remerge_token_change": summary["tokens_change"]["remerged"],
        "lossless": summary["lossless"],
        "export_removed": summary["export"]["removed"],
        "export_agreement": summary["export_agreement"],
    }
    if summary["kind"] == "classic":
        at_025 = find_residues(tokenizer, audit.scores, r=0.25, s=PAPER_THRESHOLDS["classic"][1], kind="classic")
        result["residue_share_r025"] = at_025.residue_share
    sample = texts[:200]
    with tempfile.TemporaryDirectory() as folder:
        export = Path(folder) / "tokenizer.json"
        audit.removal.tokenizer.save(export)
        expected = audit.removal.tokenizer.encode_batch(sample)
        # transformers loads a third copy of the model: let the audit's go first (what a user
        # loading the exported file would have in memory).
        del tokenizer, audit, texts
        release_free_memory()
        result["export_loads"] = _loads_in_transformers(export, sample, expected)
    result["paper"] = (
        None
        if row is None
        else {
            "model": row.model,
            "scope_size": row.scope_size,
            "residue_share": row.residue_share,
            "residue_share_ratio_only": row.residue_share_ratio_only,
        }
    )
    result["seconds"] = round(time.perf_counter() - started, 2)
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return result


def _loads_in_transformers(path: Path, texts: Sequence[str], expected: list[list[int]]) -> bool:
    """Whether ``path`` loads as a ``transformers`` fast tokenizer that encodes ``texts`` as ``expected``."""
    from transformers import PreTrainedTokenizerFast

    try:
        # transformers leaves this __init__ unannotated (*args, **kwargs): an untyped call to mypy.
        fast = PreTrainedTokenizerFast(tokenizer_file=str(path))  # type: ignore[no-untyped-call]
    except Exception:  # any failure to load is the answer "does not load"
        return False
    ids: list[list[int]] = fast(list(texts), add_special_tokens=False)["input_ids"]
    return ids == expected


def run_residues_bench(
    tokenizers: Sequence[str | Path], corpus: str | Path, *, progress: bool = False
) -> dict[str, Any]:
    """Table 4 across the given tokenizer files on one corpus: a row each, in the order given."""
    from tokenizer_service.corpus import read_corpus

    texts = read_corpus(corpus).texts  # read here first: a bad corpus fails before any audit
    rows = []
    # A fresh process per tokenizer (spawned: no fork of a loaded tokenizer's threads).
    context = multiprocessing.get_context("spawn")
    for path in tqdm([str(p) for p in tokenizers], desc="bench residues", unit="tokenizer", disable=not progress):
        with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            rows.append(pool.submit(audit_one, path, str(corpus)).result())
    return {
        "corpus": str(corpus),
        "documents": len(texts),
        "megabytes": round(sum(len(t.encode("utf-8")) for t in texts) / 1e6, 3),
        "tokenizers": rows,
    }
