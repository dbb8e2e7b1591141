"""zip2zip's model side (section 2.2-2.4): a causal LM that reads and predicts LZW hypertokens
(``tokenizer_service.lzw``) beside its base tokens, with no new tokenizer version.

* A hyper-encoder f_φ gives each hypertoken an embedding from its base tokens' embedding rows,
  padded to ``max_merge``: their mean (the zero-parameter baseline) plus what ``layers``
  transformer layers over them add (``layers=0``: the mean alone). The rows are the model's
  current ones, so a model a Ted-Tok revision changed is read as it now is.
* Tied embeddings (GPT-2): the same vectors extend the output layer, so a context's logits cover
  its base vocabulary and the hypertokens made so far. At each position only the hypertokens the
  decoder can know there are scored (the others are −inf): the distribution is a proper one over
  what can come next, and its code length a text's true cost in bits.
* Training is on compressed contexts with the codebook precomputed for the whole context
  (section 2.4), plus the auxiliary reconstruction loss: a linear decoder f_ψ predicts each base
  token of a hypertoken back from its embedding (cross-entropy over the base vocabulary, weight
  ``reconstruct``).

    z2z = Zip2zipLM(gpt2, max_merge=3)
    batch = z2z.batch([ids_of_one_context, ...])      # LZW per context
    loss = z2z(batch).loss
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tokenizer_service.lzw import LZW


class HyperEncoder(nn.Module):
    """f_φ: a hypertoken's embedding from its base tokens' rows (``[K, M, d]``, ``lengths`` of
    them real): their mean, plus what the transformer layers add (zero at the start: their
    output layer starts at zero, so an untrained encoder is mean pooling)."""

    def __init__(self, d: int, max_merge: int, *, layers: int = 1, heads: int = 2) -> None:
        super().__init__()
        self.layers = layers
        if layers:
            self.slot = nn.Parameter(torch.zeros(max_merge, d))  # which place in the hypertoken
            layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=2 * d, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.out = nn.Linear(d, d)
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(self, rows: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        real = torch.arange(rows.shape[1], device=rows.device)[None, :] < lengths[:, None]
        weights = real.to(rows.dtype) / lengths[:, None].to(rows.dtype)
        mean = (rows * weights[..., None]).sum(1)
        if not self.layers:
            return mean
        encoded = self.encoder(rows + self.slot[: rows.shape[1]], src_key_padding_mask=~real)
        return mean + self.out((encoded * weights[..., None]).sum(1))


@dataclass
class HyperBatch:
    """Compressed contexts ready for the model: codes as model ids (``[B, L]``, padded), how many
    are real, and each context's codebook. For the code each position p predicts (the one at
    p + 1): ``known[b, p]``, how many hypertokens the decoder has made before reading it, and
    ``guess[b][p]``, the one it would make if that code were the next new id (LZW's KwKwK case:
    the run before and its own first token), None where it makes none."""

    ids: torch.Tensor
    lengths: torch.Tensor
    books: list[list[tuple[int, ...]]]
    known: torch.Tensor
    guess: list[list[tuple[int, ...] | None]]
    base_tokens: int  # base tokens the contexts hold (what the codes stand for)


@dataclass
class Zip2zipOutput:
    loss: torch.Tensor
    lm_loss: torch.Tensor
    reconstruction_loss: torch.Tensor
    nats: float  # −ln q summed over every code predicted
    codes: int
    log_probs: torch.Tensor | None = None  # [B, L, columns], with ``forward(..., full=True)``


class Zip2zipLM(nn.Module):
    """A tied-embedding causal LM (GPT-2) extended with hypertokens (see the module)."""

    def __init__(self, base: nn.Module, *, max_merge: int = 3, layers: int = 1, reconstruct: float = 0.1,
                 bos_token_id: int | None = None) -> None:
        super().__init__()
        self.base, self.max_merge, self.reconstruct = base, max_merge, reconstruct
        d = base.get_input_embeddings().weight.shape[1]
        self.hyper = HyperEncoder(d, max_merge, layers=layers)
        self.decoder = nn.Linear(d, max_merge * d)  # f_ψ: a hypertoken's embedding back to its base tokens
        self.bos_token_id = bos_token_id

    @property
    def rows(self) -> int:
        """The base vocabulary's rows (the model's, which a revision may have grown)."""
        return self.base.get_input_embeddings().weight.shape[0]

    def batch(self, contexts: list[list[int]]) -> HyperBatch:
        """LZW over each context (hypertokens numbered after the model's rows), ``[bos]`` first
        when the model has one."""
        lzw = LZW(base_size=self.rows, max_merge=self.max_merge)
        start = [] if self.bos_token_id is None else [self.bos_token_id]
        encoded = [start + lzw.encode(ids) for ids in contexts]
        width = max(2, max(map(len, encoded)))
        ids = torch.zeros((len(contexts), width), dtype=torch.long)
        known = torch.zeros((len(contexts), width), dtype=torch.long)
        books, guesses = [], []
        for row, codes in enumerate(encoded):
            ids[row, : len(codes)] = torch.tensor(codes)
            runs = list(lzw.runs(codes[len(start):]))
            books.append(lzw.book(runs))
            # Code t is read knowing the hypertokens made by the codes before it; reading it makes
            # one more (the run before and code t's first token), which code t itself may be only
            # when that first token is the run before's own (KwKwK): so that one is guessed, not
            # taken from the codebook, whose entry would tell the first token to come.
            guess: list[tuple[int, ...] | None] = [None] * width
            made = 0
            for t in range(len(runs)):
                makes = t >= 1 and len(runs[t - 1]) < self.max_merge
                if t + len(start) >= 1:
                    known[row, t + len(start) - 1] = made
                    guess[t + len(start) - 1] = runs[t - 1] + runs[t - 1][:1] if makes else None
                made += makes
            guesses.append(guess)
        return HyperBatch(ids, torch.tensor(list(map(len, encoded))), books, known, guesses,
                          sum(map(len, contexts)))

    def hyper_rows(self, book: list[tuple[int, ...]]) -> torch.Tensor:
        """The hypertokens' embeddings (``[K, d]``), from the model's current rows."""
        weight = self.base.get_input_embeddings().weight
        if not book:
            return weight.new_zeros((0, weight.shape[1]))
        ids = torch.zeros((len(book), self.max_merge), dtype=torch.long, device=weight.device)
        for k, run in enumerate(book):
            ids[k, : len(run)] = torch.tensor(run)
        lengths = torch.tensor([len(run) for run in book], device=weight.device)
        return self.hyper(F.embedding(ids, weight), lengths)

    def forward(self, batch: HyperBatch, *, full: bool = False) -> Zip2zipOutput:
        weight = self.base.get_input_embeddings().weight
        device, rows = weight.device, weight.shape[0]
        hyper = [self.hyper_rows(book) for book in batch.books]
        ids = batch.ids.to(device)
        embedded = F.embedding(ids.clamp(max=rows - 1), weight)  # as nn.Embedding: its backward adds in a fixed order
        for row, h in enumerate(hyper):
            is_hyper = ids[row] >= rows
            if is_hyper.any():
                embedded[row, is_hyper] = h[ids[row, is_hyper] - rows]
        hidden = self.base.transformer(inputs_embeds=embedded).last_hidden_state
        base_logits = self.base.lm_head(hidden)  # [B, L, rows], the trainer's masks (removed ids) included
        most = max((len(book) for book in batch.books), default=0)
        # Columns: the base vocabulary, the codebook's hypertokens, then the guessed new one.
        hyper_logits = base_logits.new_full((*ids.shape, most + 1), float("-inf"))
        positions = torch.arange(most, device=device)
        targets = ids[:, 1:].clone()
        for row, h in enumerate(hyper):
            known = batch.known[row].to(device)
            if len(h):
                allowed = positions[: len(h)][None, :] < known[:, None]
                hyper_logits[row, :, : len(h)] = (hidden[row] @ h.T).masked_fill(~allowed, float("-inf"))
            guessed = [p for p, run in enumerate(batch.guess[row]) if run is not None]
            if guessed:
                rows_guessed = self.hyper_rows([batch.guess[row][p] for p in guessed])
                hyper_logits[row, guessed, most] = (hidden[row, guessed] * rows_guessed).sum(-1)
            # A code that is the guessed new hypertoken is scored in the guess's column.
            new = targets[row] == rows + known[:-1]
            targets[row, new] = rows + most
        log_probs = torch.log_softmax(torch.cat([base_logits, hyper_logits], dim=-1).float(), dim=-1)
        real = torch.arange(1, ids.shape[1], device=device)[None, :] < batch.lengths.to(device)[:, None]
        picked = log_probs[:, :-1].gather(-1, targets[..., None]).squeeze(-1)
        nats = -(picked * real).sum()
        lm_loss = nats / real.sum().clamp(min=1)
        reconstruction = self._reconstruction(hyper, batch.books)
        return Zip2zipOutput(lm_loss + self.reconstruct * reconstruction, lm_loss, reconstruction,
                             float(nats.detach()), int(real.sum()), log_probs.detach() if full else None)

    def _reconstruction(self, hyper: list[torch.Tensor], books: list[list[tuple[int, ...]]]) -> torch.Tensor:
        """f_ψ's cross-entropy: each base token of each hypertoken predicted back from its embedding."""
        weight = self.base.get_input_embeddings().weight
        embeddings = torch.cat(hyper) if hyper else weight.new_zeros((0, weight.shape[1]))
        if not len(embeddings):
            return weight.new_zeros(())
        targets = torch.full((len(embeddings), self.max_merge), -100, dtype=torch.long, device=weight.device)
        k = 0
        for book in books:
            for run in book:
                targets[k, : len(run)] = torch.tensor(run)
                k += 1
        slots = self.decoder(embeddings).view(len(embeddings), self.max_merge, -1)
        return F.cross_entropy((slots @ weight.T).flatten(0, 1), targets.flatten(), ignore_index=-100)


def hyper_parameters(model: Zip2zipLM) -> list[nn.Parameter]:
    """What zip2zip adds to the base model: the hyper-encoder's and the decoder's parameters."""
    return [*model.hyper.parameters(), *model.decoder.parameters()]


class HyperCache:
    """The hyper-embedding cache of one context (section 2.3): the rows of the hypertokens made so
    far, each computed once; a codebook that grew gets only its new rows computed. Valid while the
    model's weights stay as they are (inference)."""

    def __init__(self, model: Zip2zipLM) -> None:
        self.model = model
        self.rows: torch.Tensor | None = None

    def __call__(self, book: list[tuple[int, ...]]) -> torch.Tensor:
        have = 0 if self.rows is None else len(self.rows)
        if self.rows is None or have < len(book):
            new = self.model.hyper_rows(book[have:])
            self.rows = new if self.rows is None else torch.cat([self.rows, new])
        return self.rows[: len(book)]
