"""What a build reads of hostile inputs (indexer/doc_limits.py, indexer/folder_walk.py, indexer/file_docs.py): a
folder's entries left out are each named with a reason, symlinks out of it are not followed unless asked, a
file is read once and only up to the limits, deep HTML is refused before it is parsed, and Markdown and HTML
keep the spaces between words. Real files on disk, the real parsers; the 200 MB case is measured by
bench/hostile_files.py (bench/results/hostile-files-*.md), not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from indexer import chunking, doc_limits, file_docs
from indexer.corpus import CorpusFormatError, open_corpus
from indexer.doc_limits import MAX_DOC_CHARS, MAX_HTML_DEPTH, encoding_prefix, html_depth
from indexer.folder_walk import walk_folder
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from tests.conftest import REPO

from .test_corpus_build import cli

pytest.importorskip("selectolax")
pytest.importorskip("markdown_it")


def test_a_folder_walk_names_every_entry_it_leaves_out_and_follows_symlinks_only_inside(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    (docs / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the folder\n")
    (docs / "a.md").write_text("# A\n\ntext\n")
    (docs / "sub" / "b.txt").write_text("b text\n")
    (docs / "photo.jpg").write_bytes(b"\xff\xd8")
    os.symlink(docs / "gone.txt", docs / "dangling.txt")
    os.symlink(outside / "secret.txt", docs / "out.txt")
    os.symlink(outside, docs / "outdir")
    os.symlink(docs / "a.md", docs / "alias.md")  # inside: followed
    os.symlink(docs, docs / "sub" / "loop")  # inside, but a loop: read once
    os.mkfifo(docs / "pipe.txt")
    (docs / "locked").mkdir()
    (docs / ".cache").mkdir()
    (docs / ".cache" / "x.md").write_text("# hidden\n")
    real_scandir = os.scandir

    def scandir(path: str | os.PathLike[str]) -> object:  # root reads any folder: refuse this one as a user's
        if Path(path) == docs / "locked":
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    t0 = time.perf_counter()
    files, skipped = walk_folder(docs)
    assert time.perf_counter() - t0 < 5  # a FIFO is never opened: nothing blocks
    assert [f.relative_to(docs).as_posix() for f in files] == ["a.md", "alias.md", "sub/b.txt"]
    reasons = {s.path: s.reason for s in skipped}
    assert reasons == {
        ".cache": "hidden (a name starting with '.')",
        "dangling.txt": f"a dangling symlink (to {docs / 'gone.txt'})",
        "locked": "cannot list: Permission denied",
        "out.txt": f"a symlink out of the folder (to {outside / 'secret.txt'}); --follow-symlinks follows it",
        "outdir": f"a symlink out of the folder (to {outside}); --follow-symlinks follows it",
        "photo.jpg": "not a document kind (.jpg; read: .htm, .html, .markdown, .md, .pdf, .txt)",
        "pipe.txt": "a FIFO, not a regular file",
        "sub/loop": "a symlink loop (its folder is already read)",
    }
    assert len(skipped) == len(reasons)  # each named once
    files, skipped = walk_folder(docs, follow_symlinks=True)
    assert [f.relative_to(docs).as_posix() for f in files] == ["a.md", "alias.md", "out.txt", "outdir/secret.txt",
                                                              "sub/b.txt"]
    assert not any(s.path.startswith("out") for s in skipped)


def test_a_folder_is_read_under_its_own_path_whatever_links_to_it_and_looping_links_are_named_loops(
        tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "zz_real" / "inner").mkdir(parents=True)
    (docs / "zz_real" / "inner" / "doc.txt").write_text("volcano notes\n")
    os.symlink(docs / "zz_real", docs / "a_link")  # sorts first: its files must not take the folder's ids
    os.symlink(docs / "zz_real" / "inner", docs / "b_link")
    os.symlink(docs / "loop2.txt", docs / "loop1.txt")
    os.symlink(docs / "loop1.txt", docs / "loop2.txt")
    files, skipped = walk_folder(docs)
    assert [f.relative_to(docs).as_posix() for f in files] == ["zz_real/inner/doc.txt"]
    assert {s.path: s.reason for s in skipped} == {
        "a_link": "a symlink to a folder already read (as zz_real)",
        "b_link": "a symlink to a folder already read (as zz_real/inner)",
        "loop1.txt": f"a symlink loop (to {docs / 'loop2.txt'}, which never reaches a file or folder)",
        "loop2.txt": f"a symlink loop (to {docs / 'loop1.txt'}, which never reaches a file or folder)",
    }


def test_a_fifo_or_device_as_data_is_refused_at_once(tmp_path: Path, tiny_exported: Path) -> None:
    os.mkfifo(tmp_path / "rows.jsonl")  # opened, it blocked the build until a writer came: forever
    for data in (tmp_path / "rows.jsonl", Path("/dev/null")):
        r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--data", str(data), "--root",
                            str(tmp_path / "root"), "--model", str(tiny_exported)], cwd=REPO, capture_output=True,
                           text=True, timeout=60)  # TimeoutExpired: blocked on the FIFO
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1] == (f"indexer build: error: data {data} is not a regular file or a "
                                                     f"folder (a FIFO, socket or device)")


def _pdf_with_bad_xref() -> bytes:
    """A readable PDF whose startxref is wrong: pypdf reads it and warns ("incorrect startxref pointer")."""
    from .test_file_docs import pdf

    data = pdf("Warned", ["Pelicans glide over the harbour."])
    head, _, tail = data.rpartition(b"startxref\n")
    return head + b"startxref\n" + b"12" + tail[tail.index(b"\n"):]


def test_a_build_lists_its_skips_once_in_its_final_lines_and_manifest_and_follows_symlinks_when_asked(
        tiny_exported: Path, tmp_path: Path) -> None:
    pytest.importorskip("reportlab")
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    outside.mkdir()
    (outside / "hostname.txt").write_text("lighthouse keeper\n")
    (docs / "a.md").write_text("# Notes\n\n" + "The sea is blue and the sky is blue.\n" * 20)
    (docs / "warned.pdf").write_bytes(_pdf_with_bad_xref())
    (docs / "deep.html").write_text("<html><body>" + "<div>" * 100_000 + "x" + "</div>" * 100_000 + "</body></html>")
    os.symlink(outside / "hostname.txt", docs / "host.txt")
    os.symlink(docs / "nowhere.md", docs / "dangling.md")
    os.mkfifo(docs / "pipe.md")
    root = tmp_path / "root"
    r = cli("build", "--data", str(docs), "--model", str(tiny_exported), "--root", str(root), "--threads", "1",
            "--no-eval")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    at = lines.index("files: 2 read (0 in part), 4 skipped:")
    assert lines[at + 1:at + 5] == [
        f"  skipped dangling.md: a dangling symlink (to {docs / 'nowhere.md'})",
        f"  skipped deep.html: HTML nested 100,000 levels deep, past the limit of {MAX_HTML_DEPTH:,} (the parser's "
        f"time grows with the depth); not parsed",
        f"  skipped host.txt: a symlink out of the folder (to {outside / 'hostname.txt'}); --follow-symlinks "
        f"follows it",
        "  skipped pipe.md: a FIFO, not a regular file"]
    out = r.stdout + r.stderr
    for name in ("dangling.md", "deep.html", "host.txt", "pipe.md"):
        assert out.count(name) == 1, (name, out)  # named once, not again by the log
    assert "startxref" not in out and "pypdf" not in out  # pypdf's own warnings stay quiet
    d = Manifest.load(IndexRoot(root).current_dir()).data
    assert d.skipped_files == 4 and [e.path for e in d.skipped] == ["dangling.md", "deep.html", "host.txt",
                                                                     "pipe.md"]
    assert d.n_docs == 2
    r = cli("build", "--data", str(docs), "--model", str(tiny_exported), "--root", str(root), "--threads", "1",
            "--no-eval", "--follow-symlinks", "--chunk", "8")
    assert r.returncode == 0, r.stderr
    assert "files: 3 read (0 in part), 3 skipped:" in r.stdout
    m = Manifest.load(IndexRoot(root).current_dir())
    assert m.data.n_docs == 3 and "host.txt" not in [e.path for e in m.data.skipped]
    passages = m.index.ntotal
    assert passages > 3 and m.passages is not None and m.passages.passages == passages
    # documents and passages counted apart: 3 files are 3 documents, not `passages` documents
    assert "files: 3 rows read" in r.stdout and f", 3 documents, {passages} passages, " in r.stdout, r.stdout
    assert f" over {passages} passages (" in r.stdout and f" over {passages} documents" not in r.stdout


def test_a_large_text_file_is_read_in_part_within_the_read_limit(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    limit = 1 << 20
    monkeypatch.setattr(file_docs, "READ_BYTES", limit)
    (tmp_path / "big.txt").write_bytes("Glacier é notes\n".encode() + "é".encode() * (limit * 10))  # 20 MiB
    (tmp_path / "small.md").write_text("# Small\n\ntext\n")
    src = open_corpus(tmp_path)
    tracemalloc.start()
    try:
        docs = {d.ext_id: d for d in src.docs()}
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    big = docs["big.txt"].text
    assert big.startswith("Glacier é notes\n") and len(big.encode()) <= limit  # a character cut in half dropped
    assert peak < 8 * limit, peak  # the 20 MiB file is never held whole
    assert src.files_report.cut == [("big.txt", "its first 1 MiB read, of 20 MiB")]
    assert src.files_report.read == 2 and src.files_report.skipped == []


def test_deep_html_is_refused_in_linear_time_before_it_is_parsed() -> None:
    depth = 500_000
    page = ("<html><body>" + "<div>" * depth + "deep" + "</div>" * depth + "</body></html>").encode()
    t0 = time.perf_counter()
    with pytest.raises(file_docs.Unreadable, match=f"HTML nested {depth:,} levels deep, past the limit of "):
        file_docs.html_text(page)
    assert time.perf_counter() - t0 < 10  # the parser alone took over 900 s on this page
    wide = ("<html><body>" + "<p>one <b>two</b><br>three<img src=x>" * 200_000 + "</body></html>").encode()
    assert html_depth(wide) == 1  # void and implied-end tags do not nest
    assert html_depth(b"<div><svg><path d='x'/><path/></svg><!-- <div><div> --></div>") == 2
    assert html_depth(b"<div><span><a>x</a></span></div></div></div><div>") == 3
    assert file_docs.html_text(b"<div>" * MAX_HTML_DEPTH + b"ok")[1] == "ok"  # at the limit: parsed


def test_markdown_and_html_keep_word_boundaries_across_soft_line_breaks(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text("# Guide\n\nThis page\nwalks you through the setup.  \nA hard break\n"
                                       "and *emphasis*\nacross lines.\n")
    (tmp_path / "page.html").write_text("<html><body><p>This page\nwalks you\n<a href='#'>through</a>\nthe "
                                        "setup, re<i>treat</i>ed.</p></body></html>")
    docs = {d.ext_id: d.text for d in open_corpus(tmp_path).docs()}
    assert docs["guide.md"] == "Guide\nThis page walks you through the setup.\nA hard break and emphasis across lines."
    assert "pagewalks" not in docs["page.html"] and docs["page.html"].split() == [
        "This", "page", "walks", "you", "through", "the", "setup,", "retreated."]



def test_markdown_keeps_word_boundaries_at_inline_html_breaks_and_the_text_of_html_blocks() -> None:
    """Markdown may hold HTML: a `<br>` inside a paragraph is a line break (it glued "one<br>two" into "onetwo"),
    other inline tags join what they wrap as the HTML loader does, and an HTML block's text is kept (it was
    dropped) with its own blocks on lines of their own."""
    text = file_docs.markdown_text("line one<br>line two<BR/>three <br />four\n\nword<span>inner</span>word\n\n"
                                   "<div>\n<p>html block</p><p>second</p>\n</div>\n\n<!-- a comment -->\n\nlast")[1]
    assert text.split("\n") == ["line one", "line two", "three", "four", "wordinnerword", "html block", "second",
                                 "last"], text
    page = "# Title<br>two\n\n<script>alert(1)</script>\n\nok"
    assert file_docs.markdown_text(page) == ("Title two", "Title\ntwo\nok")


FORM = ("<html><body><form><label>Name</label><input value='x'><button>Send</button></form>"
        "<table><thead><tr><th>Colour</th><th>Price</th></tr></thead><tr><td>red</td><td>cheap</td></tr></table>"
        "<select><option>North</option><option>South</option></select><ul><li>one</li><li>two</li></ul>"
        "<p>Press <button>Go</button>now, then<br>again<br/>and<BR >done; re<i>treat</i>ed.</p>"
        "<label>Notes</label><textarea>Quiet</textarea></body></html>")


def test_html_form_controls_and_blocks_separate_words_and_bm25_finds_them(tmp_path: Path,
                                                                         tiny_exported: Path) -> None:
    """Form controls (label, input, button, select, textarea) and table heads, options and list items each end a
    word: `<label>Name</label><button>Send</button>` glued "NameSend", found by no search for "send". Inline
    markup still joins what it wraps; Markdown's inline HTML the same."""
    from indexer.runtime.version import IndexVersion

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "form.html").write_text(FORM)
    text = {d.ext_id: d.text for d in open_corpus(docs).docs()}["form.html"]
    assert text.split() == ["Name", "Send", "Colour", "Price", "red", "cheap", "North", "South", "one", "two",
                            "Press", "Go", "now,", "then", "again", "and", "done;", "retreated.", "Notes", "Quiet"]
    assert text.splitlines()[:3] == ["Name Send", "Colour", "Price"], text
    md = file_docs.markdown_text("<label>Name</label><button>Send</button>, and <b>bo</b>ld<br>next")[1]
    assert md.split() == ["Name", "Send", ",", "and", "bold", "next"], md
    root = tmp_path / "root"
    r = cli("build", "--data", str(docs), "--model", str(tiny_exported), "--root", str(root), "--threads", "1")
    assert r.returncode == 0, r.stderr
    version = IndexVersion(IndexRoot(root).current_dir())
    try:
        for word in ("send", "price", "south", "quiet", "go"):
            ids = version.lexical_search([word], 3)[0][1]
            assert [version.store.documents(ids.tolist())[int(i)].ext_id for i in ids] == ["form.html"], word
    finally:
        version.close()


def test_a_long_row_is_cut_before_anything_tokenizes_it(tmp_path: Path, tiny_exported: Path) -> None:
    from indexer.ingest import ingest
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.store_writer import CorpusStoreWriter

    rows = [{"id": "long", "text": "glacier " * (MAX_DOC_CHARS // 4)}, {"id": "short", "text": "sea"}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    src = open_corpus(tmp_path / "c.jsonl")
    assert [len(d.text) for d in src.docs()] == [MAX_DOC_CHARS, 3] and src.texts_cut == 1
    encoder = OnnxEncoder(tiny_exported, threads=1)
    seen: list[int] = []
    real_encode = encoder.encode

    def encode(texts: list[str], *args: object, **kwargs: object) -> object:
        seen.extend(len(t) for t in texts)
        return real_encode(texts, *args, **kwargs)

    encoder.encode = encode  # type: ignore[method-assign]
    writer = CorpusStoreWriter(tmp_path / "store.sqlite")
    res = ingest(src, writer, encoder, progress=False, vectors_path=tmp_path / "v.f32")
    writer.finish({})
    assert res.texts_cut == 1 and res.n_docs == 2
    assert max(seen) == encoder.meta.max_length * doc_limits.CHARS_PER_TOKEN  # the encoder never sees the rest
    long_text = rows[0]["text"]
    assert (real_encode([long_text[:MAX_DOC_CHARS]]) == real_encode([encoding_prefix(long_text, 64)])).all()


def test_passages_per_document_are_bounded(tmp_path: Path, tiny_exported: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer import ingest_passages
    from indexer.ingest import ingest
    from indexer.runtime.encoder import OnnxEncoder
    from indexer.runtime.passages import Splitter
    from indexer.runtime.store_writer import CorpusStoreWriter

    monkeypatch.setattr(ingest_passages, "MAX_PASSAGES", 3)
    text = " ".join(f"the sea is blue number {i}." for i in range(200))
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "d", "text": text}) + "\n" + '{"id": "e", "text": "sky"}\n')
    encoder = OnnxEncoder(tiny_exported, threads=1)
    writer = CorpusStoreWriter(tmp_path / "store.sqlite")
    res = ingest(open_corpus(tmp_path / "c.jsonl"), writer, encoder, progress=False, vectors_path=tmp_path / "v",
                 splitter=Splitter(encoder.tokenizer, 16, 2, encoder.meta.max_length))
    writer.finish({})
    assert (res.n_docs, res.passages, res.passages_cut) == (4, 4, 1)  # d's first 3 passages, e's one


def test_a_folder_is_read_once_when_chunk_auto_samples_it(tmp_path: Path, tiny_exported: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer.runtime.encoder import OnnxEncoder

    for i in range(5):
        (tmp_path / f"d{i}.md").write_text(f"# Doc {i}\n\n" + "the sea is blue. " * (20 if i % 2 else 1))
    reads: list[str] = []
    real = file_docs.read_file

    def counted(path: Path) -> tuple[str, str, str, str | None]:
        reads.append(path.name)
        return real(path)

    monkeypatch.setattr(file_docs, "read_file", counted)
    src = open_corpus(tmp_path)
    splitter, info = chunking.resolve("auto", None, src, OnnxEncoder(tiny_exported, threads=1))
    assert splitter is not None and info.reason.startswith("--chunk auto, first 5 documents: on")
    heard: list[int] = []
    assert [d.ext_id for d in src.docs(progress=heard.append)] == [f"d{i}.md" for i in range(5)]
    assert sorted(reads) == [f"d{i}.md" for i in range(5)]  # each file read once, not once more for the sample
    assert sum(heard) == sum(p.stat().st_size for p in tmp_path.iterdir())  # the sample's bytes are counted too
    assert src.files_report.read == 5


def test_a_parquet_corpus_without_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib

    (tmp_path / "c.parquet").write_bytes(b"PAR1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what an environment with `serve` alone imports
    with pytest.raises(CorpusFormatError, match=r"c.parquet: reading Parquet needs the pyarrow package, which is not "
                                                r"installed: pip install 'strata\[parquet\]'$"):
        open_corpus(tmp_path / "c.parquet")
    extras = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert any(dep.startswith("pyarrow") for dep in extras["parquet"])


def test_a_row_past_the_row_limit_is_refused_naming_its_line_without_being_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from indexer import corpus_files

    limit = 1 << 20
    monkeypatch.setattr(corpus_files, "MAX_ROW_BYTES", limit)
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": 1, "text": "sea"}\n' + json.dumps({"id": 2, "text": "glacier " * (limit // 2)}) + "\n")
    src = open_corpus(path)
    tracemalloc.start()
    try:
        with pytest.raises(CorpusFormatError, match=r"c.jsonl:2: a row longer than 1 MiB, the limit of one row"):
            list(src.docs())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * limit, peak  # the 4 MiB line is never held whole
