"""The revision diff between any two versions, computed from the tokenizers alone.

A revision's producer (Ted-Tok, LiteToken's export) writes its own diff; the registry recomputes
it from parent and child to check it, computes it for an imported tokenizer, and composes one
from version m to version n for a trainer that skipped versions. For every id whose token
changed: ``added`` (a free id now holds a token), ``removed`` (a token left its id free) or
``reassigned``; ``parents`` are the ids of the merge that forms the new token in the child
(for ``removed``: of the old token in the parent, where its frequency went), ``old_parents``
those of the old token.

>>> from tokenizer_service.bpe import BPETokenizer
>>> old = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "abb": 3}, merges=[("a", "b"), ("ab", "b")], pipeline={})
>>> new = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2, "ba": 3}, merges=[("a", "b"), ("b", "a")], pipeline={})
>>> [(e.id, e.kind, e.old_token, e.new_token, e.parents, e.old_parents) for e in diff_entries(old, new)]
[(3, 'reassigned', 'abb', 'ba', [1, 0], [2, 1])]
"""

from __future__ import annotations

from schemas.revision import DiffEntry
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.merge_graph import MergeGraph


def _parent_ids(tokenizer: BPETokenizer, graph: MergeGraph, token: str) -> list[int]:
    """Ids of the merge that forms ``token`` ([] for a base or special token)."""
    merge = graph.parents.get(token)
    return [tokenizer.vocab[merge[0]], tokenizer.vocab[merge[1]]] if merge else []


def diff_entries(parent: BPETokenizer, child: BPETokenizer, *, parent_graph: MergeGraph | None = None,
                 child_graph: MergeGraph | None = None) -> list[DiffEntry]:
    """Every id whose token differs between ``parent`` and ``child``, in id order."""
    parent_graph = parent_graph or MergeGraph(parent)
    child_graph = child_graph or MergeGraph(child)
    entries = []
    for i in sorted(parent.id_to_token.keys() | child.id_to_token.keys()):
        old, new = parent.id_to_token.get(i), child.id_to_token.get(i)
        if old == new:
            continue
        if new is None:
            entries.append(DiffEntry(id=i, kind="removed", old_token=old, new_token=None,
                                     parents=_parent_ids(parent, parent_graph, old)))
        elif old is None:
            entries.append(DiffEntry(id=i, kind="added", old_token=None, new_token=new,
                                     parents=_parent_ids(child, child_graph, new)))
        else:
            entries.append(DiffEntry(id=i, kind="reassigned", old_token=old, new_token=new,
                                     parents=_parent_ids(child, child_graph, new),
                                     old_parents=_parent_ids(parent, parent_graph, old)))
    return entries
