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

* Generation reads a code at a time (:class:`Zip2zipReader`: the transformer's key/value cache,
  the hyper-embedding cache and the codebook grow together) and emits only codes the LZW encoder
  itself would have made, so decompressing the output and compressing it again gives the same
  codes (:func:`generate`).

    z2z = Zip2zipLM(gpt2, max_merge=3)
    batch = z2z.batch([ids_of_one_context, ...])      # LZW per context
    loss = z2z(batch).loss
    finetune(z2z, contexts, steps=100, batch=4, lr=3e-3)
    z2z.save("model-z2z", tokenizer, stamp)           # a model folder plus zip2zip.json/.safetensors
    model, tokenizer = Zip2zipLM.load("model-z2z")
    generate(model, tokenizer, "Merge branch", max_bytes=64).text
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from tokenizer_service.bpe import BPETokenizer
from tokenizer_service.corpus import oldest, read_corpus
from tokenizer_service.errors import CorpusError, OutputError, TokmaintError
from tokenizer_service.lzw import LZW, Codebook, contexts
from tokenizer_service.output_dir import check_file_set
from tokenizer_service.settings import Number, whole
from trainer.byte_level import LN2, ContextFull
from trainer.config import Zip2zipSettings

CONFIG, WEIGHTS = "zip2zip.json", "zip2zip.safetensors"  # what a zip2zip model adds to a model folder


def _read_config(path: Path, *, d: int) -> dict[str, Any]:
    """A zip2zip folder's ``zip2zip.json`` (for a model of width ``d``), every field checked; a
    :class:`TokmaintError` names each one missing or wrong.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / CONFIG
    >>> _ = path.write_text('{"max_merge": 3, "layers": 1, "heads": 5}')
    >>> _read_config(path, d=32)
    Traceback (most recent call last):
    ...
    tokenizer_service.errors.TokmaintError: ...zip2zip.json is not a zip2zip config: no 'reconstruct'; heads 5 \
does not divide the model's width 32
    """
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise TokmaintError(f"{path} is not a zip2zip config: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise TokmaintError(f"{path} is not a zip2zip config: not a JSON object")
    # The ranges zip2zip's settings allow (trainer.config.Zip2zipSettings), checked as the options are.
    rules = {"max_merge": whole(1, 64), "layers": whole(0, 2), "heads": whole(1), "reconstruct": Number(float, low=0)}
    reasons = []
    for key, rule in rules.items():
        if key not in config:
            reasons.append(f"no {key!r}")
        elif not rule.allows(config[key]):
            reasons.append(f"{key} must be {rule.describe()}, got {config[key]!r}")
    if rules["heads"].allows(config.get("heads")) and d % config["heads"]:
        reasons.append(f"heads {config['heads']} does not divide the model's width {d}")
    if reasons:
        raise TokmaintError(f"{path} is not a zip2zip config: {'; '.join(reasons)}")
    return config


class HyperEncoder(nn.Module):
    """f_φ: a hypertoken's embedding from its base tokens' rows (``[K, M, d]``, ``lengths`` of
    them real): their mean, plus what the transformer layers add (zero at the start: their
    output layer starts at zero, so an untrained encoder is mean pooling)."""

    def __init__(self, d: int, max_merge: int, *, layers: int = 1, heads: int = 2) -> None:
        super().__init__()
        self.layers, self.heads = layers, heads
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

    def __init__(
        self,
        base: nn.Module,
        *,
        max_merge: int = 3,
        layers: int = 1,
        reconstruct: float = 0.1,
        bos_token_id: int | None = None,
    ) -> None:
        super().__init__()
        self.base, self.max_merge, self.reconstruct = base, max_merge, reconstruct
        d = base.get_input_embeddings().weight.shape[1]
        self.hyper = HyperEncoder(d, max_merge, layers=layers)
        self.decoder = nn.Linear(d, max_merge * d)  # f_ψ: a hypertoken's embedding back to its base tokens
        self.bos_token_id = bos_token_id

    def save(self, out: str | Path, tokenizer: BPETokenizer, stamp: dict[str, Any]) -> dict[str, Any]:
        """The base model as a model folder (``trainer.export.write_model_folder``: any model
        reader loads it as the plain model) plus the hyper-encoder and f_ψ (``zip2zip.safetensors``)
        and their shape (``zip2zip.json``)."""
        from safetensors.torch import save_file

        from trainer.export import write_model_folder

        def write(folder: Path) -> None:
            (folder / CONFIG).write_text(
                json.dumps(
                    {
                        "max_merge": self.max_merge,
                        "layers": self.hyper.layers,
                        "heads": self.hyper.heads,
                        "reconstruct": self.reconstruct,
                    },
                    indent=2,
                ),
                encoding="utf-8",
            )
            weights = {
                **{f"hyper.{k}": v for k, v in self.hyper.state_dict().items()},
                **{f"decoder.{k}": v for k, v in self.decoder.state_dict().items()},
            }
            save_file({k: v.detach().cpu().contiguous() for k, v in weights.items()}, str(folder / WEIGHTS))

        self.base.config.bos_token_id = self.base.config.eos_token_id = self.bos_token_id
        return write_model_folder(self.base, tokenizer, stamp, out, extra=write)

    @classmethod
    def load(
        cls, path: str | Path, *, max_merge: int | None = None, device: str | None = None
    ) -> tuple["Zip2zipLM", BPETokenizer]:
        """A folder :meth:`save` wrote, or any model ``trainer.export.load_model`` reads (a folder
        or a checkpoint) with an untrained hyper-encoder: mean pooling, the zero-parameter
        baseline, of ``max_merge`` (default 3) base tokens a hypertoken."""
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        from trainer.export import load_model

        base, tokenizer, _ = load_model(path, device=device)
        config_path = Path(path) / CONFIG
        if not config_path.is_file():
            plain = cls(base, max_merge=max_merge or 3, layers=0, bos_token_id=base.config.bos_token_id)
            return plain.eval(), tokenizer
        config = _read_config(config_path, d=base.get_input_embeddings().weight.shape[1])
        if max_merge is not None and max_merge != config["max_merge"]:
            raise TokmaintError(
                f"{path} was trained with hypertokens of at most {config['max_merge']} base tokens, "
                f"not {max_merge}: leave the merge size out, or give {config['max_merge']}"
            )
        model = cls(
            base,
            max_merge=config["max_merge"],
            layers=config["layers"],
            reconstruct=config["reconstruct"],
            bos_token_id=base.config.bos_token_id,
        )
        model.hyper = HyperEncoder(
            model.decoder.in_features, config["max_merge"], layers=config["layers"], heads=config["heads"]
        )
        try:
            weights = load_file(str(Path(path) / WEIGHTS))
            model.hyper.load_state_dict(
                {k.removeprefix("hyper."): v for k, v in weights.items() if k.startswith("hyper.")}
            )
            model.decoder.load_state_dict(
                {k.removeprefix("decoder."): v for k, v in weights.items() if k.startswith("decoder.")}
            )
        except (SafetensorError, OSError, RuntimeError) as exc:  # truncated, corrupt, or another shape's
            raise TokmaintError(
                f"{Path(path) / WEIGHTS} is not the hyper-encoder {CONFIG} describes: {' '.join(str(exc).split())}"
            ) from None
        return model.to(next(base.parameters()).device).eval(), tokenizer

    @property
    def positions(self) -> int:
        """The codes the model reads in one context, its bos included."""
        config = self.base.config
        return getattr(config, "n_positions", None) or config.max_position_embeddings

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
            runs = list(lzw.runs(codes[len(start) :]))
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
        return HyperBatch(ids, torch.tensor(list(map(len, encoded))), books, known, guesses, sum(map(len, contexts)))

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
        return Zip2zipOutput(
            lm_loss + self.reconstruct * reconstruction,
            lm_loss,
            reconstruction,
            float(nats.detach()),
            int(real.sum()),
            log_probs.detach() if full else None,
        )

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


def finetune(
    model: Zip2zipLM, windows: list[list[int]], *, steps: int, batch: int, lr: float, progress: bool = False
) -> float:
    """``steps`` AdamW steps over ``windows`` (contexts of base ids) in order, round and round,
    the base model's parameters and (with hypertokens) zip2zip's own; the last loss."""
    from tqdm import tqdm

    params = list(model.base.parameters()) + (hyper_parameters(model) if model.max_merge > 1 else [])
    optimizer = torch.optim.AdamW(params, lr=lr)
    model.train()
    loss = math.nan
    bar = tqdm(range(steps), disable=not progress, unit="step", desc="zip2zip")
    for step in bar:
        start = (step * batch) % len(windows)
        out = model(model.batch(windows[start : start + batch]))
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        loss = out.lm_loss.item()
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
    model.eval()
    return loss


def byte_lengths(tokenizer: BPETokenizer) -> dict[int, int]:
    """How many bytes each id of the version spells (what :func:`bits_per_byte` counts).

    >>> tok = BPETokenizer.train(["ab ab"], vocab_size=258)
    >>> tok.id_to_token[257], byte_lengths(tok)[257]  # " ab"
    ('Ġab', 3)
    """
    return {i: len(tokenizer.token_bytes(t)) for t, i in tokenizer.vocab.items()}


@torch.no_grad()
def bits_per_byte(model: Zip2zipLM, windows: Sequence[Sequence[int]], token_bytes: dict[int, int]) -> dict[str, Any]:
    """Each context's codes scored from ``[bos]`` (−log2 q of each), over the bytes its base ids
    spell (``token_bytes``: :func:`byte_lengths`): the same bytes plain and byte-level evaluation
    count, so the figures compare across vocabularies and with hypertokens."""
    model.eval()
    nats = codes = 0.0
    for window in windows:
        out = model(model.batch([list(window)]))
        nats, codes = nats + out.nats, codes + out.codes
    n_bytes = sum(token_bytes[i] for w in windows for i in w)
    tokens = sum(map(len, windows))
    return {
        "bits_per_byte": nats / LN2 / max(1, n_bytes),
        "bytes": n_bytes,
        "base_tokens": tokens,
        "codes": int(codes),
        "reduction": 1 - codes / tokens if tokens else 0.0,
    }


class Zip2zipReader:
    """One context read a code at a time, as generation reads it: the transformer's key/value
    cache, the hyper-embedding cache and the codebook grow with each code. After each read, the
    log-probabilities of the next code over the base rows, then the codebook's hypertokens, then
    the new one (``Codebook.new``; −inf when reading the next code makes none): what
    :meth:`Zip2zipLM.forward` gives that position, computed once."""

    def __init__(self, model: Zip2zipLM) -> None:
        self.model = model
        self.codebook = Codebook(LZW(base_size=model.rows, max_merge=model.max_merge))
        self.cache = HyperCache(model)
        self.past: Any = None
        self.read_codes = 0  # positions taken, the bos included

    @torch.no_grad()
    def read(self, codes: Sequence[int]) -> torch.Tensor:
        """Read ``codes`` (the bos first on the first read, when the model has one); the next
        code's log-probabilities (``[rows + len(entries) + 1]``)."""
        model = self.model
        weight = model.base.get_input_embeddings().weight
        start = [] if self.read_codes or model.bos_token_id is None else [model.bos_token_id]
        if not codes and not start:
            raise ValueError("read at least one code")
        if self.read_codes + len(start) + len(codes) > model.positions:
            raise ContextFull(
                f"{self.read_codes + len(start) + len(codes)} codes are more than the model's "
                f"{model.positions} positions"
            )
        for code in codes:
            self.codebook.read(code)
        hyper = self.cache(self.codebook.entries)
        embedded = torch.stack([weight[c] if c < model.rows else hyper[c - model.rows] for c in [*start, *codes]])
        out = model.base.transformer(inputs_embeds=embedded[None], past_key_values=self.past, use_cache=True)
        self.past, self.read_codes = out.past_key_values, self.read_codes + len(start) + len(codes)
        hidden = out.last_hidden_state[0, -1]
        new = self.codebook.new
        new_logit = (hidden @ model.hyper_rows([new])[0])[None] if new is not None else hidden.new_full((1,), -math.inf)
        logits = torch.cat([model.base.lm_head(hidden), hidden @ hyper.T, new_logit])
        return torch.log_softmax(logits.float(), dim=-1)


@dataclass
class Generation:
    """What :func:`generate` made: every code of the context (the prompt's first, no bos), how
    many are the prompt's, the base ids generated, and their bytes."""

    codes: list[int]
    prompt_codes: int
    base_ids: list[int] = field(default_factory=list)
    data: bytes = b""

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", errors="replace")


@torch.no_grad()
def generate(
    model: Zip2zipLM, tokenizer: BPETokenizer, prompt: str, *, max_bytes: int, seed: int = 0, progress: bool = False
) -> Generation:
    """Codes sampled after ``prompt`` (its base tokens, compressed with LZW) until ``max_bytes``
    bytes follow it or the context is full; the codebook grows with the output. Only codes the
    encoder would have made are drawn (none that starts with a token extending the run before
    into a known hypertoken), nor special tokens or ids the version does not have: the output
    decompresses to base ids whose compression is the output again."""
    from tqdm import tqdm

    rows = model.rows
    device = model.base.get_input_embeddings().weight.device
    spelled = [
        tokenizer.token_bytes(tokenizer.id_to_token[i]) if i in tokenizer.id_to_token else None for i in range(rows)
    ]
    never = torch.tensor(
        [b is None or tokenizer.id_to_token[i] in tokenizer.special_tokens for i, b in enumerate(spelled)],
        device=device,
    )
    lzw = LZW(base_size=rows, max_merge=model.max_merge)
    prompt_codes = lzw.encode(tokenizer.encode(prompt))
    reader = Zip2zipReader(model)
    generator = torch.Generator(device=device).manual_seed(seed)
    made = Generation(codes=list(prompt_codes), prompt_codes=len(prompt_codes))
    data = bytearray()
    log_probs = reader.read(prompt_codes)
    bar = tqdm(total=max_bytes, disable=not progress, unit="B")
    while len(data) < max_bytes:
        book = reader.codebook
        firsts = torch.tensor(
            [run[0] for run in book.entries] + [book.new[0] if book.new else 0], device=device, dtype=torch.long
        )
        banned_first = torch.zeros(rows, dtype=torch.bool, device=device)
        banned_first[list(book.continuing)] = True
        banned = torch.cat([never | banned_first, banned_first[firsts] | never[firsts]])
        weights = torch.softmax(log_probs.masked_fill(banned, -math.inf), dim=-1)
        code = int(torch.multinomial(weights, 1, generator=generator))  # a column is the code it scores
        run = (code,) if code < rows else book.entries[code - rows] if code - rows < len(book.entries) else book.new
        spelled_run = b"".join(spelled[i] for i in run)
        made.codes.append(code)
        made.base_ids.extend(run)
        data += spelled_run
        bar.update(len(spelled_run))
        try:
            log_probs = reader.read([code])
        except ContextFull:  # what the model reads at once is full: the text ends here
            break
    bar.close()
    made.data = bytes(data)
    return made


def train_zip2zip(
    model_path: str | Path,
    corpus: str | Path,
    out: str | Path,
    settings: Zip2zipSettings | None = None,
    *,
    progress: bool = False,
) -> dict[str, Any]:
    """``tokmaint trainer zip2zip``: the model at ``model_path`` (a folder or a checkpoint)
    fine-tuned on ``corpus``'s LZW-compressed contexts (``trainer.config.Zip2zipSettings``),
    written to ``out`` as a zip2zip folder (:meth:`Zip2zipLM.save`); its figures. ``out`` is
    checked before the model is read: never the model's own folder, and a folder
    :meth:`Zip2zipLM.save` may write (``tokenizer_service.output_dir.write_file_set``'s rule)."""
    from trainer.export import STAMP, load_model

    if Path(out).resolve() == Path(model_path).resolve():
        raise OutputError(
            f"--out {out} is --model's folder: the fine-tuned model would replace the one it is made from; "
            "choose another --out"
        )
    # The marker's command is write_model_folder's, which Zip2zipLM.save writes with.
    check_file_set(out, command="trainer export", legacy=STAMP)
    settings = settings or Zip2zipSettings()
    started = time.perf_counter()
    base, tokenizer, stamp = load_model(model_path)
    documents = read_corpus(corpus, progress=progress)
    texts = [d.text for d in (oldest(documents, settings.max_mb) if settings.max_mb else documents)]
    torch.manual_seed(settings.seed)
    model = Zip2zipLM(
        base, max_merge=settings.max_merge, layers=settings.layers, bos_token_id=base.config.bos_token_id
    ).to(next(base.parameters()).device)
    fits = model.positions - 1
    context = fits if settings.context is None else settings.context
    if context > fits:
        raise TokmaintError(
            f"--context {context} is more than the model reads in one context ({fits} tokens after "
            "the one its text starts from)"
        )
    windows = [w[:fits] for w in contexts(tokenizer.encode_batch(texts), context=context)]
    if not windows:
        raise CorpusError(Path(corpus), "no document with a token in it to train on")
    loss = finetune(model, windows, steps=settings.steps, batch=settings.batch, lr=settings.lr, progress=progress)
    written = model.save(out, tokenizer, stamp)
    return {
        **written,
        "max_merge": model.max_merge,
        "layers": settings.layers,
        "contexts": len(windows),
        "context": context,
        "steps": settings.steps,
        "last_loss": loss,
        "seconds": time.perf_counter() - started,
    }
