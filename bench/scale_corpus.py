"""The corpora of `bench/scale.py`: Quora's real questions and their real vectors, grown to any size.

How a corpus of N documents is made (seeded, streamed to Parquet a file of `ROWS_PER_FILE` rows at a time):
- **Seeds.** The distinct questions of the Quora TSV (rows < 300,000 only: the held-out rows stay unseen), of which
  a sample of `SEED_TEXTS` is encoded once with the default encoder (all-MiniLM-L6-v2, mean pooling, exported to
  ONNX) and cached outside git (`STRATA_SCALE_CACHE`, default ~/.cache/strata-scale). Those are real texts with
  their real vectors.
- **Vectors.** Document i < SEED_TEXTS is seed i, as is. Past that, document i recombines two seeds a and b (drawn
  uniformly): its vector is `normalise(0.8·v_a + 0.2·v_b + noise)` with Gaussian noise of norm ~0.25: it lies near
  a real vector, a little towards another one, so the corpus keeps the real vectors' cluster structure (the thing
  IVF lists, k-means and recall depend on), without exact duplicates.
- **Texts.** Its text is the first half of a's words and the second half of b's (Quora's lengths), each word then
  replaced with probability `REPLACE` by a word of the **tail**, drawn by rank from a Zipf–Mandelbrot law (P(r) ∝
  (r + `TAIL_SCALE`)^-`TAIL_EXPONENT`): Quora's training words no seed uses (most frequent first), then Debian's
  English words (`apt-get install -y wamerican`, or `STRATA_WORDS`) Quora lacks, shuffled, then compounds of two
  (names, typos, model numbers). So the vocabulary grows with N as Quora's does (Heaps' law), where recombined seeds
  alone stop at ~9,400 terms: `python -m bench.scale_corpus vocab SIZES…` measures both (docs/scaling.md). The
  vector stays the seeds' (one word in sixteen differs, with words no query text, a seed's, holds as such).
- **Metadata.** `bucket` (0..99, uniform: `{"bucket": 7}` is a 1 % selective filter), `year` (2000..2025) and
  `lang` (8 values, skewed), the kind of fields a filter names.

Why the figures carry over: cost per document (bytes of codes, ids, store rows, postings) depends on the
dimension, the codec and text lengths, which are real; search cost depends on nlist, nprobe and how vectors
cluster (real clusters, blurred); BM25's cost on postings lengths and vocabulary, which follow a real collection's
(measured). What does not carry over: answer *quality* past the seeds (recombined texts are not real questions),
which is why recall is measured against exact search on the same vectors and not as nDCG.
"""

from __future__ import annotations

import functools
import json
import os
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import load, log

SEED_TEXTS = 10_000
ROWS_PER_FILE = 100_000
LANGS = ("en", "en", "en", "en", "de", "fr", "es", "pt", "it", "ja")
NOISE_NORM = 0.25
# The tail (module docstring), fitted to Quora's training rows at 20k, 100k and 422k documents (vocabulary and the
# share of terms seen once: bench/results/scale-vocab-*.md)
REPLACE, TAIL_EXPONENT, TAIL_SCALE = 0.06, 2.0, 6000
TEXT_VERSION = 2  # in the corpus folder's name: a cached corpus of other texts is not reused
WORDS = Path(os.environ.get("STRATA_WORDS", "/usr/share/dict/american-english"))


def cache_dir() -> Path:
    d = Path(os.environ.get("STRATA_SCALE_CACHE", Path.home() / ".cache" / "strata-scale"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def encoder_dir() -> Path:
    """all-MiniLM-L6-v2 (mean) exported once into the cache."""
    out = cache_dir() / "minilm-mean"
    if not (out / "encoder.json").is_file():
        from models.checkpoint import default_checkpoint
        from models.export import export_encoder

        log(f"exporting the default encoder to {out}")
        export_encoder(default_checkpoint(), out, pooling="mean")
    return out


@functools.lru_cache(maxsize=1)
def quora_texts(path: Path) -> list[str]:
    """Distinct questions of rows < 300,000 (held-out rows never read into a bench corpus), in file order."""
    from indexer.quora import read_rows

    seen: dict[str, None] = {}
    for row in read_rows(path):
        if row.id >= 300_000:
            break
        for t in (row.question1, row.question2):
            t = t.strip()
            if t:
                seen.setdefault(t)
    return list(seen)


def seed_texts(quora: Path, n: int = SEED_TEXTS) -> list[str]:
    """`n` real questions drawn from the Quora TSV's training rows (seeded)."""
    allt = quora_texts(quora)
    rng = np.random.default_rng(0)
    return [allt[i] for i in np.sort(rng.choice(len(allt), size=min(n, len(allt)), replace=False))]


def seeds(quora: Path, n: int = SEED_TEXTS) -> tuple[list[str], np.ndarray]:
    """(texts, vectors) of the seeds, encoded once and cached."""
    texts, vecs_file = seed_texts(quora, n), cache_dir() / f"seeds-{n}.npy"
    if vecs_file.is_file():
        return texts, np.load(vecs_file)
    from indexer.runtime.encoder import OnnxEncoder

    log(f"encoding {len(texts)} Quora questions (cached in {cache_dir()})")
    vecs = OnnxEncoder(encoder_dir(), threads=2).encode(texts, 64, progress=True, desc="seeds").astype(np.float32)
    np.save(vecs_file, vecs)
    return texts, vecs


def held_out(quora: Path, n: int = 100) -> tuple[list[str], np.ndarray]:
    """The first `n` distinct held-out questions (rows >= 300,000: in no bench corpus) and their vectors (cached)."""
    from indexer.quora import read_rows

    texts = list(dict.fromkeys(q for r in read_rows(quora) if r.id >= 300_000 for q in (r.question1, r.question2)))[:n]
    vecs_file = cache_dir() / f"held-out-{n}.npy"
    if not vecs_file.is_file():
        from indexer.runtime.encoder import OnnxEncoder

        np.save(vecs_file, OnnxEncoder(encoder_dir(), threads=2).encode(texts, 64).astype(np.float32))
    return texts, np.load(vecs_file)


def dict_words() -> list[str]:
    """Debian's English word list (lowercase words only: no names, no possessives); a clear exit when missing."""
    if not WORDS.is_file():
        raise SystemExit(f"{WORDS} is missing: the scale corpus draws rare words from Debian's English word list. "
                         "Install it with `apt-get install -y wamerican` (or set STRATA_WORDS to a word list).")
    return [w for w in WORDS.read_text(encoding="utf-8").split() if w.isalpha() and w.islower()]


@dataclass(frozen=True)
class Tail:
    """The words replacing some of a grown document's words, by rank (module docstring)."""

    quora: list[str]  # Quora's training words no seed uses, most frequent first
    words: list[str]  # the word list's words Quora lacks, shuffled

    def ranks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        u = 1.0 - rng.random(n)  # in (0, 1]: a Zipf–Mandelbrot rank by inversion of its continuous law
        r = TAIL_SCALE * (u ** (-1.0 / (TAIL_EXPONENT - 1.0)) - 1.0)
        return np.minimum(r, len(self.quora) + len(self.words) ** 2 - 1).astype(np.int64)

    def word(self, r: int) -> str:
        q, d = len(self.quora), len(self.words)
        return self.quora[r] if r < q else self.words[r - q] if r < q + d else \
            self.words[(r - q) % d] + self.words[(r - q) // d % d]


def tail(quora: Path, seeds_: list[str]) -> Tail:
    """The tail of these seeds."""
    words = dict_words()  # first: a missing list fails before minutes of work
    split = re.compile(r"\w\w+").findall  # the analyser's tokens
    used = {w for t in seeds_ for w in split(t.lower())}
    counts = Counter(w for t in quora_texts(quora) for w in split(t.lower()))
    real = sorted((w for w in counts if w not in used), key=lambda w: (-counts[w], w))
    known = set(real) | used
    extra = [w for w in words if w not in known]
    return Tail(real, [extra[i] for i in np.random.default_rng(7).permutation(len(extra))])


def pairs(n_seeds: int, start: int, stop: int, seed: int) -> tuple[np.ndarray, ...]:
    """(ids, a, b) of documents [start, stop), the seeds each recombines, and the generator drawn next."""
    rng = np.random.default_rng([seed, start])
    idx = np.arange(start, stop)
    a = np.where(idx < n_seeds, idx % n_seeds, rng.integers(0, n_seeds, stop - start))
    return idx, a, rng.integers(0, n_seeds, stop - start), rng  # type: ignore[return-value]


def grown_texts(texts: list[str], tl: Tail, start: int, stop: int, seed: int) -> list[str]:
    """The texts of documents [start, stop) (module docstring): seeds, then halves of two with some tail words."""
    s = len(texts)
    idx, a, b, _ = pairs(s, start, stop, seed)
    docs: list[list[str]] = []
    for i, ai, bi in zip(idx.tolist(), a.tolist(), b.tolist(), strict=True):
        wa, wb = texts[ai].split(), texts[bi].split()
        docs.append([] if i < s else wa[: max(1, len(wa) // 2)] + wb[len(wb) // 2 :])
    lens = [len(d) for d in docs]
    flat = [w for d in docs for w in d]
    rng = np.random.default_rng([seed, start, TEXT_VERSION])  # its own stream: the vectors stay as they were
    hit = np.flatnonzero(rng.random(len(flat)) < REPLACE)
    for h, r in zip(hit.tolist(), tl.ranks(rng, len(hit)).tolist(), strict=True):
        flat[h] = tl.word(r)
    out, k = [], 0
    for i, ai, n in zip(idx.tolist(), a.tolist(), lens, strict=True):
        out.append(texts[ai] if i < s else " ".join(flat[k : k + n]))
        k += n
    return out


def make_rows(texts: list[str], vecs: np.ndarray, tl: Tail, start: int, stop: int, seed: int
              ) -> tuple[list[str], np.ndarray, dict[str, list[object]]]:
    """Documents [start, stop) of the corpus (see the module docstring): texts, unit vectors, metadata."""
    n, s, dim = stop - start, len(texts), vecs.shape[1]
    idx, a, b, rng = pairs(s, start, stop, seed)
    out_texts = grown_texts(texts, tl, start, stop, seed)
    noise = rng.normal(size=(n, dim)).astype(np.float32) * (NOISE_NORM / np.sqrt(dim))
    v = np.where((idx < s)[:, None], vecs[a], 0.8 * vecs[a] + 0.2 * vecs[b] + noise)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    meta = {"bucket": rng.integers(0, 100, n).tolist(), "year": rng.integers(2000, 2026, n).tolist(),
            "lang": [LANGS[k] for k in rng.integers(0, len(LANGS), n)]}
    return out_texts, v.astype(np.float32), meta


def corpus(quora: Path, n_docs: int, seed: int = 1) -> Path:
    """The folder of Parquet files of an `n_docs` corpus (id, text, vector, bucket, year, lang), made once."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = cache_dir() / f"corpus-{n_docs}-s{seed}-t{TEXT_VERSION}"
    done = folder / ".complete"
    if done.is_file():
        return folder
    tl = tail(quora, seed_texts(quora))
    texts, vecs = seeds(quora)
    folder.mkdir(parents=True, exist_ok=True)
    dim = vecs.shape[1]
    for k, start in enumerate(range(0, n_docs, ROWS_PER_FILE)):
        path = folder / f"part-{k:05d}.parquet"
        if path.is_file():  # resumable: parts are written whole (renamed into place)
            continue
        stop = min(n_docs, start + ROWS_PER_FILE)
        t, v, meta = make_rows(texts, vecs, tl, start, stop, seed)
        table = pa.table({"id": pa.array(np.arange(start, stop), pa.int64()), "text": t,
                          "vector": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim), **meta})
        tmp = path.with_suffix(".tmp")
        pq.write_table(table, tmp)
        tmp.rename(path)
        log(f"corpus {n_docs}: rows {start}-{stop} written")
    done.write_text("ok")
    return folder


def queries(quora: Path, n: int = 300, seed: int = 99) -> np.ndarray:
    """Query vectors: real seed vectors perturbed like documents (so they sit where documents are) but drawn
    with another seed, so that none is a document."""
    texts, vecs = seeds(quora)
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, len(vecs), n), rng.integers(0, len(vecs), n)
    noise = rng.normal(size=(n, vecs.shape[1])).astype(np.float32) * (NOISE_NORM / np.sqrt(vecs.shape[1]))
    q = 0.8 * vecs[a] + 0.2 * vecs[b] + noise
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def query_texts(quora: Path, n: int = 300, seed: int = 99) -> list[str]:
    texts = seed_texts(quora)
    return [texts[i] for i in np.random.default_rng(seed).integers(0, len(texts), n)]


def vocabulary(docs: Iterable[str], sizes: list[int]) -> list[dict[str, object]]:
    """Terms (as the lexical index analyses them), their document frequencies, words per document: at each size."""
    from indexer.runtime.lexical import Analyzer

    terms, df, lens, out = Analyzer("english", "english").terms, Counter[str](), array("H"), []
    for i, text in enumerate(docs, 1):
        df.update(set(terms(text)))
        lens.append(min(len(text.split()), 65535))
        if i in sizes:
            d, w = np.fromiter(df.values(), np.int64, len(df)), np.array(lens, dtype=np.uint16)
            out.append({"docs": i, "terms": len(df), "df1_share": round(float(np.mean(d == 1)), 3),
                        "df_p50_p90_p99_p999": [round(float(x)) for x in np.percentile(d, [50, 90, 99, 99.9])],
                        "df_max": int(d.max()), "words_p10_p50_p90": np.percentile(w, [10, 50, 90]).tolist(),
                        "words_mean": round(float(w.mean()), 2)})
            log(f"{out[-1]}")
    return out


def grown_docs(quora: Path, n: int, seed: int = 1) -> Iterator[str]:
    texts = seed_texts(quora)
    tl = tail(quora, texts)
    for start in range(0, n, ROWS_PER_FILE):
        yield from grown_texts(texts, tl, start, min(n, start + ROWS_PER_FILE), seed)


def vocab_report(quora: Path, sizes: list[int], stamp: str) -> str:
    real = quora_texts(quora)
    rows = [("Quora, training rows", vocabulary(real, sorted({*(s for s in sizes if s < len(real)), len(real)}))),
            ("scale corpus", vocabulary(grown_docs(quora, max(sizes)), sizes))]
    lines = [f"# Vocabulary of the scale corpus beside Quora's ({stamp})", "", f"`python -m bench.scale_corpus vocab "
             f"{' '.join(map(str, sizes))}` (load {load()}). Terms as the lexical index analyses them; df: documents "
             "holding a term; Heaps' exponent: log(terms ratio) / log(documents ratio) from the row above.", "",
             "| collection | documents | terms | Heaps' exponent | share of terms with df=1 | df p50 / p90 / p99 / "
             "p99.9 | max df | words per document p10 / p50 / p90 (mean) |", "|---" * 8 + "|"]
    for name, stats in rows:
        for prev, r in zip([None, *stats[:-1]], stats, strict=True):
            heaps = f"{np.log(r['terms'] / prev['terms']) / np.log(r['docs'] / prev['docs']):.2f}" if prev else ""
            lines.append(f"| {name} | {r['docs']:,} | {r['terms']:,} | {heaps} | {r['df1_share']} | "
                         f"{' / '.join(map(str, r['df_p50_p90_p99_p999']))} | {r['df_max']:,} | "
                         f"{' / '.join(f'{x:g}' for x in r['words_p10_p50_p90'])} ({r['words_mean']}) |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    import argparse
    import logging
    from datetime import datetime, timezone

    from indexer.runtime.paths import data_dir

    p = argparse.ArgumentParser(description="make a scale corpus (Parquet), or measure its vocabulary beside Quora's")
    p.add_argument("what", choices=("corpus", "vocab"))
    p.add_argument("sizes", nargs="+", type=int)
    p.add_argument("--quick", action="store_true", help="vocab: the scale corpus only, as JSON on stdout, no file")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    q = data_dir() / "quora_duplicate_questions.partial.tsv.gz"
    dict_words()  # a missing word list fails first
    if args.what == "corpus":
        for size in args.sizes:
            print(corpus(q, size))
    elif args.quick:
        print(json.dumps(vocabulary(grown_docs(q, max(args.sizes)), args.sizes)))
    else:
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")
        out = Path(__file__).parent / "results" / f"scale-vocab-{stamp}.md"
        out.write_text(vocab_report(q, args.sizes, stamp))
        print(out.read_text())
