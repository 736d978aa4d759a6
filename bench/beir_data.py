"""Prepare the public BEIR datasets the BEIR benchmark (`bench/beir.py`) runs on, in BEIR layout
(`corpus.jsonl`, `queries.jsonl`, `qrels/test.tsv`), from copies in public GitHub repositories, and check them.

    python bench/beir_data.py --list
    python bench/beir_data.py              # every dataset into $STRATA_DATA_DIR/beir (or /work/shared/data/beir)
    python bench/beir_data.py scifact --out /tmp/beir --mirrors /work/.mirror

Nothing is downloaded: each source file is read from a bare git snapshot of its repository (`--mirrors DIR` holds
`owner+name/repo`, as the search tools' `fetch` lays them out), at the commit recorded in `bench/BEIR_SOURCES.md`,
and refused unless its sha256 is the recorded one. A source is one of: BEIR's own dataset zip (its members written
as they are, dev/train qrels kept; NFCorpus), one file per prepared file, gunzipped when it ends in `.gz` (ArguAna,
as Hugging Face's BeIR copies ship them), or a table the corpus is rebuilt from (SciFact). Every prepared dataset
is then checked against the counts of the BEIR paper (Thakur et al. 2021, Table 1: corpus size, test queries) and
its own judged qrels (a qrel naming a document missing from the corpus is refused beyond the number BEIR's own
files have: 5 in ArguAna, 0 elsewhere), and its files' sha256 are written to `PREPARED.json` beside them. Data
is never written inside the repository.

`quora-heldout` is built from the shared Quora TSV (`indexer.quora.load_split(..., "heldout")`: rows with id
>= 300,000, every unique question a document, queries = the question1 of duplicate pairs, gold = their
duplicates), the evaluation-only split that nothing in Strata trains or tunes on.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tokenize
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class SourceFile:
    """One file of a public repository at one commit, with the sha256 it must have."""

    repo: str
    commit: str
    path: str
    sha256: str

    def read(self, mirrors: Path) -> bytes:
        git_dir = mirrors / self.repo.replace("/", "+") / "repo"
        if not git_dir.is_dir():
            raise PrepareError(f"no snapshot of {self.repo} under {mirrors} (fetch github:{self.repo} first)")
        got = subprocess.run(["git", "--git-dir", str(git_dir), "cat-file", "blob", f"{self.commit}:{self.path}"],
                             capture_output=True, check=False)
        if got.returncode != 0:
            raise PrepareError(f"{self.repo}@{self.commit[:10]}:{self.path}: {got.stderr.decode().strip()}")
        digest = hashlib.sha256(got.stdout).hexdigest()
        if digest != self.sha256:
            raise PrepareError(f"{self.repo}@{self.commit[:10]}:{self.path}: sha256 {digest}, expected {self.sha256}")
        return got.stdout


@dataclass(frozen=True)
class Expected:
    """The counts a complete copy has (BEIR paper, Table 1; qrels counted on the official files)."""

    docs: int
    test_queries: int
    test_qrels: int
    # qrels naming a document the official corpus lacks (BEIR's own files; 0 everywhere but ArguAna)
    dangling_qrels: int = 0


@dataclass(frozen=True)
class Dataset:
    name: str
    expected: Expected
    sources: dict[str, SourceFile] = field(default_factory=dict)
    # sha256 of each prepared file: the preparation is deterministic, so a different digest is a different dataset
    outputs: dict[str, str] = field(default_factory=dict)
    note: str = ""


class PrepareError(RuntimeError):
    pass


TWIST = ("TwistXXF/PaperPilot-Reproduction", "5471766d700d7825c2aad84a37f2746698ade6f5")
DOTDORAG = ("franciszekparma/DotDoRAG", "f9a0aa4eeb3fcfeb77d2c55e2e0c2be30ef8732d")
PROYECTOIB = ("ecazar/ProyectoIB", "eb37295a166b5438a3c21043c105a7d6333232c4")

DATASETS: dict[str, Dataset] = {
    "scifact": Dataset(
        name="scifact",
        expected=Expected(docs=5183, test_queries=300, test_qrels=339),
        sources={
            # the SciFact corpus (allenai/scifact "corpus" config, 5,183 abstracts) as a CSV whose `abstract`
            # column is the numpy repr of the sentence list; BEIR's text is the sentences joined by a space
            "corpus": SourceFile("sumithra-p-v/claimverifier", "b42f1c3444b28884ddcfadffafbfe223646c6c37",
                                 "data/scifact.zip",
                                 "a798a7046af0f6fa04476448459ce7cafeea5bd90d4d99c53a0e27dc5e1a4673"),
            "queries": SourceFile(*TWIST, "data/scifact/queries.jsonl",
                                  "8ff84a7c903f722981cd8d595c022660140c51867b27608a6d4910db86080313"),
            "qrels/test.tsv": SourceFile(*TWIST, "data/scifact/qrels/test.tsv",
                                         "68c0ac63f1c24b9e8ce497649694f09b2d0850bab7ec2b103cc66996f5f8b3a3"),
        },
        outputs={
            "corpus.jsonl": "d2d0b03f01859f5392dcfd1cd53179ae3d6fdd1291bfa579b2e34b1665e1cef1",
            "queries.jsonl": "8ff84a7c903f722981cd8d595c022660140c51867b27608a6d4910db86080313",
            "qrels/test.tsv": "68c0ac63f1c24b9e8ce497649694f09b2d0850bab7ec2b103cc66996f5f8b3a3",
        },
        note="corpus rebuilt from the SciFact corpus CSV (see BEIR_SOURCES.md)",
    ),
    "nfcorpus": Dataset(
        name="nfcorpus",
        # 12,334 test qrels counted on the official qrels/test.tsv (BEIR Table 1 gives 38.2 judged per query)
        expected=Expected(docs=3633, test_queries=323, test_qrels=12_334),
        sources={
            # BEIR's own nfcorpus.zip, byte for byte (md5 a89dba18a62ef92f7d323ec890a0d38d, the one BEIR lists);
            # committed there and deleted later, so it lives in that commit only
            "zip": SourceFile(*DOTDORAG, "data/nfcorpus.zip",
                              "efe5be03f8c5b86a5870102d0599d227c8c6e2484328e68c6522560385671b0b"),
        },
        outputs={
            "corpus.jsonl": "10cc83ef1826b1425e6a87090b5140b39b27755d5a27e48215a88611c899991f",
            "queries.jsonl": "d024e6621b84925d485ae473d316a0c3af31c62c8068a59fb29d22f7613aef2a",
            "qrels/test.tsv": "f8fba6ef3d4dd9c3a242a8ba4ae38276fc3622fce7dcbae764766d564542fd2a",
            "qrels/dev.tsv": "b1d38b5e8f78c4a5820bce2b7ec2db54911d7690dc601e76811846b211180bd8",
            "qrels/train.tsv": "6336b80f9bffc4f063f3aa450047ad35c0b7c534efe4a6ba35e16dbace047f6a",
        },
        note="BEIR's nfcorpus.zip as is",
    ),
    "arguana": Dataset(
        name="arguana",
        # 5 test qrels name a counter-argument missing from BEIR's corpus (beir-cellar/beir's GitHub threads #101 and
        # #172: "an issue with the original dataset"); they stay, as in BEIR, MTEB and Anserini, and score 0
        expected=Expected(docs=8674, test_queries=1406, test_qrels=1406, dangling_qrels=5),
        sources={
            # the Hugging Face BeIR/arguana files (corpus/queries gzipped, as that dataset ships them) and
            # BeIR/arguana-qrels' test.tsv, committed together with BeIR's loading script `arguana.py`
            "corpus.jsonl": SourceFile(*PROYECTOIB, "data/corpus.jsonl.gz",
                                       "6572c13e17aa51d42c0498e765c70cfc9f15550a2140213ea267767e3a9f9134"),
            "queries.jsonl": SourceFile(*PROYECTOIB, "data/queries.jsonl.gz",
                                        "faae9bb245700b764c29d98a1972d1b10ebb8dfb4e7bb349741e8d4f20d29b13"),
            "qrels/test.tsv": SourceFile(*PROYECTOIB, "data/test.tsv",
                                         "0c47b481fa8b47fb9ca5e74bc8a017bdea14518c0e4a5d21345291180b3aca76"),
        },
        outputs={
            "corpus.jsonl": "0627982cec4ee896df6dc98604ef6b499c83fd87a19eaaeb3f23b88bbef6cbce",
            "queries.jsonl": "f8b7c903f95d9a2d291de3915a8fac25085e9db679f19f59fea4145bfd1df618",
            "qrels/test.tsv": "0c47b481fa8b47fb9ca5e74bc8a017bdea14518c0e4a5d21345291180b3aca76",
        },
        note="BeIR/arguana (Hugging Face) files, gunzipped",
    ),
    "quora-heldout": Dataset(
        name="quora-heldout",
        # load_split(..., "heldout") on the 404,043-row shared TSV (not a BEIR set: counted on that file)
        expected=Expected(docs=172_608, test_queries=29_169, test_qrels=37_709),
        outputs={
            "corpus.jsonl": "560a7ed2e95cf3190d42016d9d273d0f8d522b5d8423f95ec032b173830420a9",
            "queries.jsonl": "fcb41318e6ffaa783da83b7eaabc84fc5aa03a29920d46ec96d099012dd313df",
            "qrels/test.tsv": "256f7b43297a5a2d81f5fe760ee7171d07b2e7e437a7dd4f465cfd627c16dced",
        },
        note="built from the shared Quora TSV, rows with id >= 300,000",
    ),
}


def default_out() -> Path:
    base = os.environ.get("STRATA_DATA_DIR")
    return Path(base) / "beir" if base else Path("/work/shared/data/beir")


def say(msg: str) -> None:
    print(f"beir_data: {msg}", file=sys.stderr, flush=True)


def _sentences(numpy_repr: str) -> list[str]:
    """The strings of a numpy array repr such as "['a.' 'b.'\\n 'c.']" (each element is a Python literal)."""
    return [ast.literal_eval(t.string) for t in tokenize.generate_tokens(io.StringIO(numpy_repr).readline)
            if t.type == tokenize.STRING]


def _scifact_corpus(zip_bytes: bytes) -> bytes:
    csv.field_size_limit(1 << 30)
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        text = zf.read("corpus_train.csv").decode("utf-8")
    return _jsonl({"_id": row["doc_id"], "title": row["title"], "text": " ".join(_sentences(row["abstract"])),
                   "metadata": {}} for row in csv.DictReader(io.StringIO(text, newline="")))


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _jsonl(rows: Iterable[dict[str, object]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")


def prepare_scifact(ds: Dataset, out: Path, mirrors: Path) -> None:
    say("scifact: reading sources")
    for key, src in ds.sources.items():
        data = src.read(mirrors)
        if key == "corpus":
            say("scifact: rebuilding corpus.jsonl from the SciFact corpus CSV")
            _write(out / "corpus.jsonl", _scifact_corpus(data))
        elif key == "queries":
            _write(out / "queries.jsonl", data)
        else:
            _write(out / key, data)


BEIR_ZIP_FILES = ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv", "qrels/dev.tsv", "qrels/train.tsv")


def extract_beir_zip(zip_bytes: bytes, folder: str, out: Path) -> list[str]:
    """Write BEIR's files of one dataset zip (`<folder>/corpus.jsonl`, `queries.jsonl`, `qrels/*.tsv`) as they
    are; the test qrels, corpus and queries must be there, dev/train qrels are kept when present."""
    written = []
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        members = set(zf.namelist())
        for rel in BEIR_ZIP_FILES:
            member = f"{folder}/{rel}"
            if member not in members:
                if rel.endswith(("dev.tsv", "train.tsv")):
                    continue
                raise PrepareError(f"the {folder} zip has no {member} (members: {sorted(members)[:8]})")
            _write(out / rel, zf.read(member))
            written.append(rel)
    return written


def prepare_beir_zip(ds: Dataset, out: Path, mirrors: Path) -> None:
    say(f"{ds.name}: reading {ds.sources['zip'].repo}:{ds.sources['zip'].path}")
    written = extract_beir_zip(ds.sources["zip"].read(mirrors), ds.name, out)
    say(f"{ds.name}: wrote {', '.join(written)}")


def prepare_files(ds: Dataset, out: Path, mirrors: Path) -> None:
    """One source file per prepared file (keyed by its path in the BEIR layout); a `.gz` source is gunzipped."""
    for rel, src in ds.sources.items():
        say(f"{ds.name}: {rel} from {src.repo}:{src.path}")
        data = src.read(mirrors)
        if src.path.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                raise PrepareError(f"{src.repo}:{src.path}: not a whole gzip file ({e})") from e
        _write(out / rel, data)


def prepare_quora_heldout(ds: Dataset, out: Path, mirrors: Path) -> None:
    sys.path.insert(0, str(REPO_ROOT))
    from indexer.quora import load_split
    from indexer.runtime.paths import default_quora_source

    src = Path(default_quora_source())
    if not src.is_file():
        raise PrepareError(f"no local Quora TSV ({src}); set STRATA_DATA_DIR")
    say(f"quora-heldout: reading {src}")
    split = load_split(src, "heldout")
    c, ev = split.corpus, split.evalset
    _write(out / "corpus.jsonl", _jsonl({"_id": str(i), "title": "", "text": t}
                                        for i, t in zip(c.ids.tolist(), c.texts, strict=True)))
    _write(out / "queries.jsonl", _jsonl({"_id": str(i), "text": t}
                                         for i, t in zip(ev.query_ids.tolist(), ev.query_texts, strict=True)))
    _write(out / "qrels" / "test.tsv", ("query-id\tcorpus-id\tscore\n" + "".join(
        f"{i}\t{d}\t1\n" for i, gold in zip(ev.query_ids.tolist(), ev.gold, strict=True) for d in sorted(gold))
    ).encode("utf-8"))


PREPARERS: dict[str, Callable[[Dataset, Path, Path], None]] = {
    "scifact": prepare_scifact,
    "nfcorpus": prepare_beir_zip,
    "arguana": prepare_files,
    "quora-heldout": prepare_quora_heldout,
}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check(ds: Dataset, folder: Path) -> dict[str, object]:
    """Counts of the prepared folder, refused when they are not the published ones or when a judged document
    or query is missing."""
    doc_ids: set[str] = set()
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            row = json.loads(line)
            if not isinstance(row.get("_id"), str) or not isinstance(row.get("text"), str):
                raise PrepareError(f"{folder / 'corpus.jsonl'}:{n}: no string _id / text")
            doc_ids.add(row["_id"])
    query_ids: set[str] = set()
    with open(folder / "queries.jsonl", encoding="utf-8") as fh:
        for line in fh:
            query_ids.add(json.loads(line)["_id"])
    judged: dict[str, int] = {}
    n_qrels = 0
    dangling: list[str] = []
    with open(folder / "qrels" / "test.tsv", encoding="utf-8", newline="") as fh:
        next(fh)
        for line in fh:
            q, d, s = line.rstrip("\r\n").split("\t")
            n_qrels += 1
            judged[q] = judged.get(q, 0) + (int(s) > 0)
            if d not in doc_ids:
                dangling.append(d)
            if q not in query_ids:
                raise PrepareError(f"{folder}: qrels name query {q!r}, not in queries.jsonl")
    if len(dangling) != ds.expected.dangling_qrels:
        raise PrepareError(f"{folder}: {len(dangling)} qrels name documents not in the corpus (expected "
                           f"{ds.expected.dangling_qrels}), e.g. {dangling[:3]}")
    counts = {"docs": len(doc_ids), "test_queries": len(judged), "test_qrels": n_qrels,
              "queries_in_file": len(query_ids), "dangling_qrels": len(dangling)}
    exp = ds.expected
    if exp.docs:
        wanted = {"docs": exp.docs, "test_queries": exp.test_queries, "test_qrels": exp.test_qrels}
        bad = {k: (counts[k], v) for k, v in wanted.items() if counts[k] != v}
        if bad:
            raise PrepareError(f"{ds.name}: counts differ from the BEIR paper (got, expected): {bad}")
    return counts


def prepare(name: str, out_root: Path, mirrors: Path, force: bool) -> Path:
    ds = DATASETS[name]
    out = out_root / name
    stamp = out / "PREPARED.json"
    if stamp.is_file() and not force:
        say(f"{name}: already prepared in {out} (checking)")
    else:
        PREPARERS[name](ds, out, mirrors)
    counts = check(ds, out)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "PREPARED.json")
    record = {"dataset": name, "counts": counts, "note": ds.note,
              "sources": {k: vars(v) for k, v in ds.sources.items()},
              "files": {str(p.relative_to(out)): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
                        for p in files}}
    for rel, want in ds.outputs.items():
        got = record["files"].get(rel, {}).get("sha256")  # type: ignore[union-attr]
        if got != want:
            raise PrepareError(f"{out / rel}: sha256 {got}, expected {want} (use --force to rebuild)")
    _write(stamp, (json.dumps(record, indent=2) + "\n").encode())
    say(f"{name}: ready in {out}: {counts}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("datasets", nargs="*", help=f"datasets to prepare (default: all of {', '.join(DATASETS)})")
    p.add_argument("--out", type=Path, default=default_out(), help="data root (default: %(default)s)")
    p.add_argument("--mirrors", type=Path, default=Path("/work/.mirror"),
                   help="folder of bare repository snapshots, owner+name/repo (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild even when PREPARED.json exists")
    p.add_argument("--list", action="store_true", help="list the datasets and their sources, then exit")
    args = p.parse_args(argv)
    if args.list:
        for ds in DATASETS.values():
            print(f"{ds.name}: {ds.note}")
            for key, src in ds.sources.items():
                print(f"  {key}: {src.repo}@{src.commit[:10]}:{src.path}")
        return 0
    unknown = [n for n in args.datasets if n not in DATASETS]
    if unknown:
        p.error(f"unknown dataset(s) {', '.join(unknown)}; known: {', '.join(DATASETS)}")
    if (args.out.resolve()).is_relative_to(REPO_ROOT):
        p.error(f"--out {args.out} is inside the repository; data is never committed")
    failed = 0
    for i, name in enumerate(args.datasets or list(DATASETS), 1):
        say(f"[{i}/{len(args.datasets or DATASETS)}] {name}")
        try:
            prepare(name, args.out, args.mirrors, args.force)
        except PrepareError as e:
            say(f"error: {e}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
