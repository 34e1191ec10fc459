"""The paper's NER probe (section 3.2): frozen token features, a linear classifier, seqeval entity F1.

Features come from the encoder's final layer; each word is represented by its first sub-token.
They are extracted once (for every spec of a sweep in the same pass, sharing the layers the
specs have in common) and the classifier is trained on the cached features, so the backbone
never runs again per epoch. Defaults follow the official code: lr 5e-3, 3 epochs, batch 32
sentences, at most 32 tokens per sentence (the sink token included); words cut off by that
limit are predicted ``O`` and count against recall.

>>> sentences = read_conll_lines(["EU B-ORG", "rejects O", "", "Peter B-PER"])
>>> [(s.words, s.tags) for s in sentences]
[(('EU', 'rejects'), ('B-ORG', 'O')), (('Peter',), ('B-PER',))]
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from nosink.layerspec import Plan, Spec
from nosink.models import EncoderFromDecoder
from nosink.models.batching import batches, pad, pad_id
from nosink.models.texts import read_lines, tokenize
from nosink.models.words import first_tokens, join_words

__all__ = [
    "NERConfig",
    "NERResult",
    "Sentence",
    "evaluate_ner",
    "load_conll",
    "read_conll",
    "read_conll_lines",
    "train_probe",
    "word_features",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sentence:
    """One sentence of a CoNLL file: its words and their IOB2 tags."""

    words: tuple[str, ...]
    tags: tuple[str, ...]


@dataclass(frozen=True)
class NERConfig:
    """The probe's hyper-parameters (defaults: the official code's)."""

    lr: float = 5e-3  # AdamW learning rate of the linear classifier
    epochs: int = 3
    batch_size: int = 32  # sentences per optimisation step
    max_length: int = 32  # tokens per sentence fed to the encoder, the sink token included
    seed: int = 0
    extract_batch_size: int = 64  # sentences per forward pass when extracting features


@dataclass(frozen=True)
class NERResult:
    """Entity-level scores from seqeval on the evaluation sentences.

    ``predictions`` and ``gold`` keep the tags per evaluation sentence, so error bars can be computed
    afterwards: ``stats.bootstrap_ci(stats.ner_f1(result.gold, result.predictions))`` (see
    :mod:`nosink.evals.stats`). They are left out of :meth:`as_dict` and of the repr.
    """

    spec: str
    f1: float
    precision: float
    recall: float
    truncated_words: int  # evaluation words beyond max_length, predicted 'O'
    n_train: int
    n_eval: int
    predictions: tuple[tuple[str, ...], ...] = field(default=(), repr=False)  # per sentence, the probe's tags
    gold: tuple[tuple[str, ...], ...] = field(default=(), repr=False)  # per sentence, the evaluation tags

    def as_dict(self) -> dict[str, Any]:
        """The scores as a plain dict (for JSON), without the per-sentence tags."""
        return {k: v for k, v in asdict(self).items() if k not in ("predictions", "gold")}


def read_conll_lines(lines: Iterable[str]) -> list[Sentence]:
    """Parse CoNLL lines (``WORD ... TAG``; blank lines between sentences; ``-DOCSTART-`` skipped).

    Raises:
        ValueError: for a line with fewer than two columns.
    """
    sentences: list[Sentence] = []
    words: list[str] = []
    tags: list[str] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("-DOCSTART-"):
            if words:
                sentences.append(Sentence(tuple(words), tuple(tags)))
                words, tags = [], []
            continue
        parts = line.split()
        if len(parts) < 2:
            raise ValueError(f"line {number}: expected 'WORD ... TAG', got {line!r}")
        words.append(parts[0])
        tags.append(parts[-1])
    if words:
        sentences.append(Sentence(tuple(words), tuple(tags)))
    return sentences


def read_conll(path: str | Path) -> list[Sentence]:
    """Read one CoNLL-2003 file (``WORD POS CHUNK NER`` per line).

    Raises:
        FileNotFoundError: if the file is missing.
        ValueError: for a malformed line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no CoNLL file at {path}")
    return read_conll_lines(read_lines(path))


def load_conll(source: str | Path, split: str) -> list[Sentence]:
    """CoNLL-2003 ``split`` (``train``, ``dev``/``validation``, ``test``) from a folder or the hub.

    A folder holds ``train.txt``, ``dev.txt`` and/or ``test.txt``; anything else is taken as a hub
    dataset id (``eriktks/conll2003``) and read with the ``datasets`` package.

    Raises:
        FileNotFoundError: if the folder lacks the split's file.
    """
    folder = Path(source)
    if folder.is_dir():
        name = {"validation": "dev", "dev": "dev", "train": "train", "test": "test"}.get(split, split)
        return read_conll(folder / f"{name}.txt")
    import datasets

    hub_split = "validation" if split == "dev" else split
    data = datasets.load_dataset(str(source), split=hub_split)
    names = data.features["ner_tags"].feature.names
    return [Sentence(tuple(r["tokens"]), tuple(names[t] for t in r["ner_tags"])) for r in data]


def word_features(
    encoder: EncoderFromDecoder,
    sentences: Sequence[Sentence],
    specs: Sequence[str | Spec],
    config: NERConfig = NERConfig(),
    show_progress_bar: bool = True,
) -> tuple[dict[str, list[torch.Tensor]], list[list[bool]]]:
    """Final-layer features of each word's first sub-token, for every spec in one pass.

    Returns:
        ``({spec: [per sentence (n_kept_words, D) float16 tensor]}, kept)`` where ``kept[s][w]``
        says whether word ``w`` of sentence ``s`` fit within ``max_length``.

    Raises:
        ValueError: if the tokenizer cannot give character offsets (a slow tokenizer).
    """
    tok = encoder.tokenizer
    if tok is None or not getattr(tok, "is_fast", False):
        raise ValueError("the NER probe needs a fast tokenizer (character offsets) on the encoder")
    sink = encoder.sink_ids()
    if config.max_length - len(sink) < 1:
        raise ValueError(f"max_length={config.max_length} leaves no room for words after {len(sink)} sink token(s)")
    joined = [join_words(s.words) for s in sentences]
    tokens = tokenize(tok, [text for text, _ in joined], sink=sink, max_length=config.max_length)
    assert tokens.offsets is not None  # a fast tokenizer gives offsets
    firsts = [
        [None if f is None else f + len(sink) for f in first_tokens(offsets, spans)]
        for offsets, (_, spans) in zip(tokens.offsets, joined, strict=True)
    ]

    # A baseline encoder (evals.baselines.TokenFeatures) has no layer specs: its names pass through.
    runs = [encoder.plan_for(spec) if isinstance(encoder, EncoderFromDecoder) else str(spec) for spec in specs]
    names = [run.name if isinstance(run, Plan) else run for run in runs]  # compiled once, run per batch
    feats: dict[str, list[torch.Tensor]] = {n: [None] * len(sentences) for n in names}  # type: ignore[list-item]
    pad_value = pad_id(tok)
    groups = batches(tokens.lengths, config.extract_batch_size)
    with torch.inference_mode():
        for idx in tqdm(groups, desc="NER features", disable=not show_progress_bar, unit="batch"):
            ids, mask, _ = pad(tokens, idx, pad_value)  # right padding: word indices count from the row's start
            for name, hidden in encoder.forward_specs(ids, mask, runs).items():
                hidden = hidden.float().cpu()
                for r, i in enumerate(idx):
                    keep = [f for f in firsts[i] if f is not None]
                    feats[name][i] = hidden[r, keep].half()
    kept = [[f is not None for f in fs] for fs in firsts]
    return feats, kept


def train_probe(
    features: Sequence[torch.Tensor], labels: Sequence[Sequence[int]], num_labels: int, config: NERConfig = NERConfig()
) -> nn.Linear:
    """Train a linear classifier on cached word features (AdamW, cross-entropy over words).

    Args:
        features: per sentence, ``(n_words, D)`` features.
        labels: per sentence, the label index of each of those words.
        num_labels: number of tags.
        config: learning rate, epochs, batch size and seed.

    Raises:
        ValueError: if features and labels do not line up, or there is nothing to train on.
    """
    if len(features) != len(labels):
        raise ValueError(f"{len(features)} feature rows but {len(labels)} label rows")
    pairs = [(f, torch.as_tensor(y, dtype=torch.long)) for f, y in zip(features, labels, strict=True) if len(y)]
    for f, y in pairs:
        if f.shape[0] != y.shape[0]:
            raise ValueError(f"a sentence has {f.shape[0]} word features but {y.shape[0]} labels")
    if not pairs:
        raise ValueError("no labelled words to train the probe on")
    torch.manual_seed(config.seed)
    probe = nn.Linear(pairs[0][0].shape[1], num_labels)
    optimizer = torch.optim.AdamW(probe.parameters(), lr=config.lr)
    rng = random.Random(config.seed)
    for _ in range(config.epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for start in range(0, len(order), config.batch_size):
            chunk = [pairs[i] for i in order[start : start + config.batch_size]]
            x = torch.cat([f for f, _ in chunk]).float()  # (words, D)
            y = torch.cat([t for _, t in chunk])
            loss = nn.functional.cross_entropy(probe(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return probe


def evaluate_ner(
    encoder: EncoderFromDecoder,
    train: Sequence[Sentence],
    evaluation: Sequence[Sentence],
    specs: Sequence[str | Spec] | None = None,
    config: NERConfig = NERConfig(),
    show_progress_bar: bool = True,
) -> list[NERResult]:
    """Entity F1 of the linear probe for each spec (default: the encoder's own spec).

    Raises:
        ValueError: if the evaluation set has tags the training set never shows.
    """
    from seqeval.metrics import f1_score, precision_score, recall_score

    specs = list(specs) if specs is not None else [encoder.spec]
    tags = sorted({t for s in train for t in s.tags})
    unseen = sorted({t for s in evaluation for t in s.tags} - set(tags))
    if unseen:
        raise ValueError(f"evaluation tags {unseen} never occur in the training sentences")
    index = {t: i for i, t in enumerate(tags)}
    train_feats, train_kept = word_features(encoder, train, specs, config, show_progress_bar)
    eval_feats, eval_kept = word_features(encoder, evaluation, specs, config, show_progress_bar)
    train_labels = [
        [index[t] for t, k in zip(s.tags, kept, strict=True) if k] for s, kept in zip(train, train_kept, strict=True)
    ]
    truncated = sum(not k for kept in eval_kept for k in kept)
    gold = [list(s.tags) for s in evaluation]
    gold_tags = tuple(tuple(tags) for tags in gold)  # shared by every spec's result
    results = []
    for name in train_feats:
        probe = train_probe(train_feats[name], train_labels, len(tags), config)
        predicted = []
        with torch.no_grad():
            for feats, kept in zip(eval_feats[name], eval_kept, strict=True):
                guesses = iter(probe(feats.float()).argmax(-1).tolist() if len(feats) else [])
                predicted.append([tags[next(guesses)] if k else "O" for k in kept])
        results.append(
            NERResult(
                spec=name,
                f1=float(f1_score(gold, predicted)),
                precision=float(precision_score(gold, predicted)),
                recall=float(recall_score(gold, predicted)),
                truncated_words=truncated,
                n_train=len(train),
                n_eval=len(evaluation),
                predictions=tuple(tuple(tags) for tags in predicted),
                gold=gold_tags,
            )
        )
        logger.info("NER %s: F1 %.4f", name, results[-1].f1)
    return results
