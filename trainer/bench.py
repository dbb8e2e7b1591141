"""``tokmaint bench apply``: how long ``apply_revision`` takes for K changed ids on a model of
GPT-2 124M's shape (random weights, built from its config; no download) with AdamW state.

The model takes one optimizer step first, so that every row has Adam moments to reset; the
diff reassigns K ids spread over the vocabulary to merges of two other ids (``parents_mean``).
``apply_seconds``: the median of ``repeats`` applications (each on the model as the last left
it: the work is the same).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from schemas.revision import DiffEntry, RevisionDiff
from trainer.apply_revision import apply_revision
from trainer.config import ApplyBenchSettings


def _diff(settings: ApplyBenchSettings) -> RevisionDiff:
    """K ids reassigned to merges of two ids the revision leaves alone."""
    rng = np.random.default_rng(0)
    ids = rng.choice(settings.vocab_size, settings.changes + 2, replace=False).tolist()
    parents, changed = ids[:2], ids[2:]
    entries = [
        DiffEntry(
            id=i, kind="reassigned", old_token=f"old{i}", new_token=f"new{i}", parents=parents, old_parents=parents
        )
        for i in sorted(changed)
    ]
    return RevisionDiff(
        lineage="bench",
        version=2,
        parent_version=1,
        tokenizer_sha256="0" * 64,
        vocab_size=settings.vocab_size,
        entries=entries,
        config={},
    )


def run_apply_bench(settings: ApplyBenchSettings | None = None) -> dict[str, Any]:
    settings = settings or ApplyBenchSettings()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=settings.vocab_size)).to(device)  # 124M parameters
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, settings.vocab_size, (1, 16), device=device)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    diff = _diff(settings)
    times = []
    for _ in range(settings.repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        apply_revision(model, optimizer, diff)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return {
        "apply_seconds": statistics.median(times),
        "changes": settings.changes,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": settings.vocab_size,
        "device": device,
        "repeats": settings.repeats,
    }
