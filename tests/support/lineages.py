"""A Ted-Tok lineage made from a corpus, and put into a real registry server."""

import uuid

from registry.client import RegistryClient
from tests.conftest import REGISTRY_TOKEN as TOKEN
from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import batches, read_corpus
from tokenizer_service.evolve import quick_revisions_config
from tokenizer_service.tedtok import TedTok


def tedtok_versions(drifting_corpus, vocab_size: int, *, special_tokens: tuple[str, ...] = ()):
    """The corpus's texts, an initial tokenizer and Ted-Tok's revisions of it."""
    docs = read_corpus(drifting_corpus).documents
    initial = BPETokenizer.train([d.text for d in docs[:200]], vocab_size=vocab_size, special_tokens=special_tokens)
    tedtok = TedTok(
        initial,
        config=quick_revisions_config(),
    )
    for texts in batches(docs, 32):
        tedtok.observe_texts(texts)
    return [d.text for d in docs], initial, tedtok.revisions


def create_lineage(url, initial) -> str:
    """A new lineage of a fresh name on the registry at ``url``, from ``initial``; its name."""
    name = f"train-{uuid.uuid4().hex[:8]}"
    RegistryClient(url, token=TOKEN).create(name, initial.to_json())
    return name


def publish_revision(url, name, revision) -> int:
    """Publish a Ted-Tok revision (its tokenizer and diff) to lineage ``name``; its number."""
    published = RegistryClient(url, token=TOKEN).publish(
        name, revision.tokenizer.to_json(), diff_json=revision.diff.to_json(), kind="tedtok"
    )
    return published.number


def grown(tokenizer: BPETokenizer, text: str) -> BPETokenizer:
    """``tokenizer`` with one merge more, last in priority, its token at a fresh id (a model on it
    grows a row): the first two tokens of a word of ``text`` that are not a token together."""
    pairs = (
        [tokenizer.id_to_token[i] for i in tokenizer.tokenize_word(word)[:2]] for word in tokenizer.pre_tokenize(text)
    )
    x, y = next(pair for pair in pairs if len(pair) == 2 and "".join(pair) not in tokenizer.vocab)
    return tokenizer.replace_model(
        vocab={**tokenizer.vocab, x + y: tokenizer.id_space}, merges=[*tokenizer.merges, (x, y)]
    )
