"""`indexer build --data FOLDER` of Markdown, HTML, PDF and text files (indexer/file_docs.py): real files written
here (PDFs with reportlab, encrypted ones with pypdf), read by the real libraries, built by the real CLI with the
tiny encoder, searched through the real BM25 index and SQLite filters."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from indexer.corpus import CorpusFormatError, detect_format, open_corpus
from indexer.runtime.layout import IndexRoot
from indexer.runtime.manifest import Manifest
from indexer.runtime.version import IndexVersion

from .test_corpus_build import cli, snapshot

pytest.importorskip("reportlab")

MTIME = 1_700_000_000  # 2023-11-14T22:13:20Z


def pdf(title: str | None, paragraphs: list[str]) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

    buf = io.BytesIO()
    doc = SimpleDocTemplate(buf, pagesize=A4, **({"title": title} if title else {}))
    style = getSampleStyleSheet()["BodyText"]
    flow = []
    for i, p in enumerate(paragraphs):
        flow += [PageBreak()] if i else []
        flow.append(Paragraph(p, style))
    doc.build(flow)
    return buf.getvalue()


def encrypted(data: bytes) -> bytes:
    from pypdf import PdfReader, PdfWriter

    w = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    w.encrypt(user_password="secret", owner_password="owner")
    out = io.BytesIO()
    w.write(out)
    return out.getvalue()


HTML = ("<!doctype html><html><head><title>Glacier  report</title><script>var tracker='zebracode';</script>"
        "<style>p{color:red}</style></head><body><header><nav><a href='/'>Homepage navigation</a></nav></header>"
        "<main><article><header><h1>Ice</h1></header><p>The <a href='/g'>glacier</a> retreated <b>quickly</b> "
        "during the warm de<i>cade</i>.</p></article></main><aside>Related sidebar</aside>"
        "<footer>Copyright boilerplate</footer></body></html>")
MARKDOWN = ("# Volcano notes\n\nBasalt **lava** flows from [the vent](https://example.org/volcano-url) "
            "and `magma` cools.\n\n## Later\n\n- pumice floats\n")


def write_folder(folder: Path) -> dict[str, str]:
    """Four good files (one per kind, one in a subfolder) and two bad ones; returns path → a word only it has."""
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.md").write_text(MARKDOWN, encoding="utf-8")
    (folder / "sub" / "page.html").write_text(HTML, encoding="utf-8")
    (folder / "paper.pdf").write_bytes(pdf("Orchid study", ["Orchids bloom in humid greenhouses.",
                                                            "A second page about pollinating wasps."]))
    (folder / "plain.txt").write_text("Lighthouse keeper\nThe lighthouse lamp turns all night.\n", encoding="utf-8")
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj <</Type /Catalog >> garbage without xref\n")
    (folder / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (folder / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n")  # not a document kind: skipped, named
    for p in folder.rglob("*"):
        if p.is_file():
            os.utime(p, (MTIME, MTIME))
    os.utime(folder / "plain.txt", (MTIME + 86_400 * 400, MTIME + 86_400 * 400))  # 2024-12-18
    return {"notes.md": "basalt", "sub/page.html": "glacier", "paper.pdf": "wasps", "plain.txt": "lighthouse"}


def test_each_kind_gives_its_title_text_and_metadata_and_bad_files_are_skipped_with_a_reason(tmp_path: Path) -> None:
    write_folder(tmp_path)
    (tmp_path / "locked.pdf").write_bytes(encrypted(pdf("Secret", ["classified text"])))
    (tmp_path / "empty.md").write_text("   \n", encoding="utf-8")
    (tmp_path / "latin1.txt").write_bytes("café crème".encode("latin-1"))
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.md").write_text("# hidden\n", encoding="utf-8")
    src = open_corpus(tmp_path)
    assert src.format == "files"
    docs = {d.ext_id: d for d in src.docs()}
    assert set(docs) == {"notes.md", "sub/page.html", "paper.pdf", "plain.txt"}
    md, html, paper, txt = docs["notes.md"], docs["sub/page.html"], docs["paper.pdf"], docs["plain.txt"]
    assert md.metadata == {"path": "notes.md", "title": "Volcano notes", "mtime": "2023-11-14T22:13:20Z",
                           "type": "md"}
    assert md.text == "Volcano notes\nBasalt lava flows from the vent and magma cools.\nLater\npumice floats"
    # the page's chrome (scripts, nav, a header outside the article, aside, footer) is gone; the article's kept,
    # a line per block: inline markup splits no word
    assert html.metadata["title"] == "Glacier report" and html.metadata["type"] == "html"
    assert html.text == "Ice\nThe glacier retreated quickly during the warm decade."
    assert paper.metadata["title"] == "Orchid study" and "humid greenhouses" in paper.text
    assert "pollinating wasps" in paper.text  # every page
    assert txt.metadata["title"] == "Lighthouse keeper" and txt.metadata["mtime"] == "2024-12-18T22:13:20Z"
    skipped = dict(src.files_report.skipped)
    assert set(skipped) == {"broken.pdf", "binary.txt", "locked.pdf", "empty.md", "latin1.txt", "image.png",
                            ".hidden"}
    assert skipped["image.png"].startswith("not a document kind (.png; read: .htm, .html")
    assert skipped[".hidden"] == "hidden (a name starting with '.')"  # named once, not each file in it
    assert skipped["broken.pdf"].startswith("not a readable PDF")
    assert skipped["binary.txt"] == "binary data (NUL bytes), not text"
    assert skipped["locked.pdf"] == "encrypted PDF (it needs a password)"
    assert skipped["empty.md"] == "no text in it"
    assert skipped["latin1.txt"].startswith("not UTF-8: invalid continuation byte at byte 3")
    assert src.files_report.read == 4


def test_a_pdf_without_a_metadata_title_takes_its_first_line_and_the_id_field_can_be_chosen(tmp_path: Path) -> None:
    (tmp_path / "a.pdf").write_bytes(pdf(None, ["Harbour tides rise twice a day."]))
    (tmp_path / "b.md").write_text("---\ntitle: 'From front matter'\n---\n# Heading\n\ntext\n", encoding="utf-8")
    docs = {d.ext_id: d for d in open_corpus(tmp_path, id_field="title", title_field="title").docs()}
    assert set(docs) == {"Harbour tides rise twice a day.", "From front matter"}
    assert docs["From front matter"].text == "From front matter Heading\ntext"  # --title-field joins it
    with pytest.raises(CorpusFormatError, match="no id field 'name' in a folder of files; its fields: id, path"):
        list(open_corpus(tmp_path, id_field="name").docs())


def test_a_beir_or_jsonl_folder_with_documents_beside_it_keeps_its_format(tmp_path: Path) -> None:
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "text": "x"}\n', encoding="utf-8")
    (tmp_path / "README.md").write_text("# About this set\n", encoding="utf-8")
    assert detect_format(tmp_path) == "beir"
    (tmp_path / "corpus.jsonl").rename(tmp_path / "rows.jsonl")
    assert detect_format(tmp_path) == "jsonl"
    (tmp_path / "rows.jsonl").unlink()
    assert detect_format(tmp_path) == "files"


def test_json_under_a_hidden_folder_neither_makes_a_folder_jsonl_nor_is_read(tmp_path: Path) -> None:
    (tmp_path / ".vscode").mkdir()
    (tmp_path / ".vscode" / "settings.json").write_text('{\n  "editor.tabSize": 2\n}\n', encoding="utf-8")
    (tmp_path / "guide.md").write_text("# Soil\n\nSoil needs compost.\n", encoding="utf-8")
    assert detect_format(tmp_path) == "files"  # was "jsonl", then failed on settings.json:1
    (tmp_path / "rows.jsonl").write_text('{"id": "d1", "text": "x"}\n', encoding="utf-8")
    assert [d.ext_id for d in open_corpus(tmp_path).docs()] == ["d1"]  # settings.json is not read


def test_a_sites_json_settings_beside_markdown_leave_it_a_folder_of_documents(tmp_path: Path) -> None:
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "soil.md").write_text("# Soil\n\nSoil needs compost.\n", encoding="utf-8")
    (tmp_path / "package.json").write_text('{\n  "name": "site"\n}\n', encoding="utf-8")
    (tmp_path / "guides" / "_meta.json").write_text('{\n  "soil": "Soil"\n}\n', encoding="utf-8")
    assert detect_format(tmp_path) == "files"  # was "jsonl", then failed on _meta.json:1
    src = open_corpus(tmp_path)
    assert [d.ext_id for d in src.docs()] == ["guides/soil.md"]
    assert dict(src.files_report.skipped)["package.json"].startswith("not a document kind (.json;")
    (tmp_path / "rows.json").write_text('{"id": "d1", "text": "x"}\n', encoding="utf-8")  # rows: JSONL again
    assert detect_format(tmp_path) == "jsonl"


def test_a_missing_library_stops_the_build_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    (tmp_path / "a.pdf").write_bytes(pdf("t", ["some text"]))
    monkeypatch.setitem(sys.modules, "pypdf", None)  # what an environment without the files extra imports
    with pytest.raises(CorpusFormatError, match=r"a.pdf: reading .pdf files needs the pypdf package, which is "
                                                r"not installed: pip install 'strata\[files\]'"):
        list(open_corpus(tmp_path).docs())


def test_build_of_a_folder_of_files_is_searchable_filterable_and_counts_skips(tiny_exported: Path,
                                                                              tmp_path: Path) -> None:
    words = write_folder(tmp_path / "docs")
    root = tmp_path / "root"
    r = cli("build", "--data", str(tmp_path / "docs"), "--model", str(tiny_exported), "--root", str(root),
            "--threads", "1")
    assert r.returncode == 0, r.stderr
    # the final lines name each skipped entry once with its reason; the log does not repeat them
    assert "files: 4 read (0 in part), 3 skipped:\n  skipped binary.txt: binary data (NUL bytes), not text\n" \
           "  skipped broken.pdf: not a readable PDF" in r.stdout, r.stdout
    assert "  skipped image.png: not a document kind (.png;" in r.stdout
    assert "broken.pdf" not in r.stderr and "binary.txt" not in r.stderr, r.stderr
    folder = IndexRoot(root).current_dir()
    d = Manifest.load(folder).data
    assert (d.format, d.rows_read, d.n_docs, d.skipped_files) == ("files", 4, 4, 3)
    assert [(e.path, e.reason[:20]) for e in d.skipped] == [("binary.txt", "binary data (NUL byt"),
                                                           ("broken.pdf", "not a readable PDF: "),
                                                           ("image.png", "not a document kind ")]
    assert d.metadata_schema == {"mtime": "str", "path": "str", "title": "str", "type": "str"}
    version = IndexVersion(folder)
    try:
        for path, word in words.items():  # each file is one document, found by a word only it holds
            scores, ids = version.lexical_search([word], 3)[0]
            hits = version.store.documents(ids.tolist())
            assert len(ids) == 1 and hits[int(ids[0])].ext_id == path, (word, hits)
            assert hits[int(ids[0])].metadata["path"] == path
        newer = version.store.filter_ids({"mtime": {"gte": "2024-01-01T00:00:00Z"}})
        pdfs = version.store.filter_ids({"type": "pdf"})
        docs = version.store.documents([*newer.tolist(), *pdfs.tolist()])
        assert [docs[i].ext_id for i in newer.tolist()] == ["plain.txt"]
        assert [docs[i].ext_id for i in pdfs.tolist()] == ["paper.pdf"]
    finally:
        version.close()


def test_a_jsonl_folder_names_each_other_file_it_does_not_read(tiny_exported: Path, tmp_path: Path) -> None:
    docs, root = tmp_path / "docs", tmp_path / "root"
    (docs / ".git").mkdir(parents=True)
    (docs / "rows.jsonl").write_text('{"id": 1, "text": "basalt lava"}\n', encoding="utf-8")
    (docs / "more.csv").write_text("id,text\n2,granite quarry\n", encoding="utf-8")  # was left out unsaid
    (docs / "README.md").write_text("# About\n", encoding="utf-8")
    (docs / ".git" / "HEAD").write_text("ref\n", encoding="utf-8")
    r = cli("build", "--data", str(docs), "--model", str(tiny_exported), "--root", str(root), "--threads", "1")
    assert r.returncode == 0, r.stderr
    why = "this folder is read as jsonl (its *.jsonl, *.ndjson, *.json files)"
    assert f"jsonl folder: 2 other files not read:\n  skipped README.md: {why}\n  skipped more.csv: {why}\n" \
        in r.stdout, r.stdout
    d = Manifest.load(IndexRoot(root).current_dir()).data
    assert (d.n_docs, d.skipped_files, [e.path for e in d.skipped]) == (1, 2, ["README.md", "more.csv"])


def test_one_markdown_file_builds_one_document(tiny_exported: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text(MARKDOWN, encoding="utf-8")  # was read as a Quora TSV: "expected the header"
    r = cli("build", "--data", str(tmp_path / "notes.md"), "--model", str(tiny_exported), "--root",
            str(tmp_path / "root"), "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "files: 1 read (0 in part), 0 skipped" in r.stdout
    version = IndexVersion(IndexRoot(tmp_path / "root").current_dir())
    try:
        [doc] = version.store.documents(version.lexical_search(["basalt"], 3)[0][1].tolist()).values()
        assert (doc.ext_id, doc.metadata["title"], doc.metadata["type"]) == ("notes.md", "Volcano notes", "md")
    finally:
        version.close()


def test_a_folder_where_no_file_can_be_read_exits_2_naming_each(tiny_exported: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    (docs / "binary.txt").write_bytes(b"\x00\x01\x02")
    root = tmp_path / "root"
    r = cli("build", "--data", str(docs), "--model", str(tiny_exported), "--root", str(root), "--threads", "1")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    error = r.stderr.strip().splitlines()[-1]
    assert error.startswith(f"indexer build: error: {docs}: no file could be read (2 skipped): binary.txt: "
                            f"binary data (NUL bytes), not text; broken.pdf: not a readable PDF"), error
    assert snapshot(root) == (None, [], [])
