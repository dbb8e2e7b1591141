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

from itertools import compress
from operator import ne

from schemas.revision import DiffEntry, RevisionDiff
from tokenizer_service.bpe import BPETokenizer, Merge
from tokenizer_service.merge_graph import merge_parents


def _ids(tokenizer: BPETokenizer) -> dict[str, int]:
    """Every token's id, added tokens included: a version with holes holds its added tokens in
    the vocabulary (``holding_added_tokens``), and they mean what they meant."""
    added = tokenizer.pipeline.get("added_tokens", [])
    return {**{t["content"]: t["id"] for t in added}, **tokenizer.vocab} if added else tokenizer.vocab


def diff_entries(parent: BPETokenizer, child: BPETokenizer) -> list[DiffEntry]:
    """Every id whose token differs between ``parent`` and ``child``, in id order.

    >>> eos = {"content": "<eos>", "id": 3, "special": True}
    >>> old = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={"added_tokens": [eos]})
    >>> new = old.replace_model(vocab={"a": 0, "b": 1}, merges=[])  # a hole: <eos> goes into the vocabulary
    >>> [(e.id, e.kind, e.old_token) for e in diff_entries(old, new)], new.vocab["<eos>"]
    ([(2, 'removed', 'ab')], 3)
    """
    # An id changes where a token left it or came to it: tokens new to the child or holding
    # another id there, and tokens the child lost. Found in C (map/compress) over the
    # vocabularies: a revision changes a few hundred of 50k+ ids.
    parent_ids, child_ids = _ids(parent), _ids(child)
    came = list(compress(child_ids, map(ne, map(parent_ids.get, child_ids), child_ids.values())))
    left = parent_ids.keys() - child_ids.keys()
    changed = sorted(
        {child_ids[t] for t in came} | {parent_ids[t] for t in came if t in parent_ids} | {parent_ids[t] for t in left}
    )
    old_parents = merge_parents(parent, (parent.id_to_token[i] for i in changed if i in parent.id_to_token))
    new_parents = merge_parents(child, (child.id_to_token[i] for i in changed if i in child.id_to_token))

    def ids(tokenizer: BPETokenizer, parents: dict[str, Merge], token: str) -> list[int]:
        merge = parents.get(token)  # [] for a base or special token
        return [tokenizer.vocab[merge[0]], tokenizer.vocab[merge[1]]] if merge else []

    entries = []
    for i in changed:
        old, new = parent.id_to_token.get(i), child.id_to_token.get(i)
        if new is None:
            assert old is not None  # a changed id holds a token in the parent or the child
            entries.append(
                DiffEntry(id=i, kind="removed", old_token=old, new_token=None, parents=ids(parent, old_parents, old))
            )
        elif old is None:
            entries.append(
                DiffEntry(id=i, kind="added", old_token=None, new_token=new, parents=ids(child, new_parents, new))
            )
        else:
            entries.append(
                DiffEntry(
                    id=i,
                    kind="reassigned",
                    old_token=old,
                    new_token=new,
                    parents=ids(child, new_parents, new),
                    old_parents=ids(parent, old_parents, old),
                )
            )
    return entries


def composed_diff(
    parent: BPETokenizer,
    child: BPETokenizer,
    *,
    lineage: str,
    start: int,
    end: int,
    parent_sha256: str | None = None,
    tokenizer_sha256: str | None = None,
) -> RevisionDiff:
    """One diff from version ``start`` (``parent``) to version ``end`` (``child``): applying it
    equals applying every version's diff in turn (what a trainer that skipped versions applies).
    The sha256s are the versions' own (their files' bytes, which a registry keeps as uploaded),
    the tokenizers' canonical ones where not given.

    >>> old = BPETokenizer(vocab={"a": 0, "b": 1}, merges=[], pipeline={})
    >>> new = BPETokenizer(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")], pipeline={})
    >>> d = composed_diff(old, new, lineage="demo", start=1, end=3)
    >>> (d.parent_version, d.version, [e.kind for e in d.entries], d.config)
    (1, 3, ['added'], {'composed': True})
    """
    return RevisionDiff(
        lineage=lineage,
        version=end,
        parent_version=start,
        tokenizer_sha256=tokenizer_sha256 or child.sha256,
        parent_sha256=parent_sha256 or parent.sha256,
        vocab_size=len(child),
        id_space=child.id_space,
        entries=diff_entries(parent, child),
        config={"composed": True},
    )
