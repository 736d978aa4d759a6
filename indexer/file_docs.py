"""A folder of documents as a corpus: Markdown, HTML, PDF and plain-text files, one document per file.

Each file becomes a row `{"id": path, "path": path, "title": …, "mtime": …, "type": …, "text": …}` read the way
any corpus row is (`indexer.corpus_rows.make_doc`), so `--id-field`, `--title-field` and `--metadata-fields` work
as for JSONL: by default the id is the file's path relative to the folder (POSIX separators), the metadata is
`path`, `title`, `mtime` (modification time, ISO 8601 UTC to the second: ranges compare it as text) and `type`
(md, html, pdf, txt), and the title is metadata only (`--title-field title` also encodes it before the text).

Titles: Markdown's first heading (or a front matter `title:`), HTML's <title> (else its first <h1>), a PDF's
metadata title (else its first line of text; a placeholder such as reportlab's "(anonymous)" is no title), a text
file's first line.

Libraries, chosen on measured speed and text quality (docs/decisions.md): pypdf for PDF, selectolax for
HTML (page chrome — nav, aside, footer, a header outside the article, scripts — removed), markdown-it-py for
Markdown (text kept, markup and link URLs dropped). They are the `files` extra; a folder holding a kind whose
library is missing stops the build with the extra to install.

A file that cannot be read (not UTF-8, binary, a corrupt or encrypted PDF, no text) is skipped: its path and reason
are logged and kept on the source (`FileReport`), and the build counts them; when no file could be read the build
stops naming them (`finish`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.corpus_rows import CorpusFormatError, Doc, Fields, make_doc

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from selectolax.lexbor import LexborNode

log = logging.getLogger(__name__)

KINDS = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".pdf": "pdf", ".txt": "txt"}
EXTRA_HINT = "pip install 'strata[files]'"
TITLE_CHARS = 300  # a title taken from a first line is cut here
PLACEHOLDER_TITLES = {"(anonymous)", "untitled", "(untitled)", "unknown", "no title"}  # what PDF writers put there
ROW_FIELDS = ("id", "path", "title", "mtime", "type", "text")  # what each file's row holds (`file_row`)
SHOWN_SKIPS = 20  # skipped files named in the message of a build where none could be read
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_BLOCKS = frozenset(("address", "article", "blockquote", "br", "dd", "details", "dialog", "div", "dl", "dt",
                     "fieldset", "figcaption", "figure", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr",
                     "li", "main", "ol", "p", "pre", "section", "summary", "table", "td", "th", "tr", "ul",
                     "caption", "body", "html"))
_CHROME = ("script", "style", "noscript", "template", "nav", "aside", "footer", "svg", "iframe")


class Unreadable(Exception):
    """A file skipped; the message is the reason."""


@dataclass
class FileReport:
    """What reading a folder found: files read and files skipped with their reasons."""

    read: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path relative to the folder, reason)


def doc_files(folder: Path) -> list[Path]:
    """The folder's readable files, recursively, in path order; hidden files and folders are left out."""
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in KINDS and p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts))


# --- text of each kind -------------------------------------------------------------------------------------------

def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise Unreadable("binary data (NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"not UTF-8: {exc.reason} at byte {exc.start}") from None


def _first_line(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:TITLE_CHARS]


def plain_text(data: bytes) -> tuple[str, str]:
    """(title, text) of a plain-text file."""
    text = _decode(data)
    return _first_line(text), text


@functools.cache
def _markdown_parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark")  # built once: building it costs more than parsing a page


def markdown_text(source: str) -> tuple[str, str]:
    """(title, text) of Markdown: the text of its blocks, one per line (no markup, no link URLs); the title is a
    front matter `title:` or the first heading."""
    title = ""
    front = _FRONT_MATTER.match(source)
    if front is not None:
        source = source[front.end():]
        m = re.search(r"^title:\s*(.+?)\s*$", front.group(1), re.M)
        title = m.group(1).strip("'\"") if m else ""
    lines: list[str] = []
    heading = False
    for tok in _markdown_parser().parse(source):
        if tok.type == "heading_open":
            heading = True
        elif tok.type == "inline":
            parts = [c.content for c in tok.children or () if c.type in ("text", "code_inline")]
            lines.append("".join(parts) if parts else tok.content)
            if heading and not title:
                title = lines[-1].strip()
            heading = False
        elif tok.type in ("fence", "code_block"):
            lines.append(tok.content.rstrip("\n"))
    return title[:TITLE_CHARS], "\n".join(ln for ln in lines if ln.strip())


def _html_source(data: bytes) -> str:
    """The page as text: UTF-8 (a BOM honoured), else the charset its first 1024 bytes declare."""
    try:
        return _decode(data)
    except Unreadable:
        m = re.search(rb"""charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", data[:1024], re.I)
        if b"\x00" in data or m is None:
            raise
        try:
            return data.decode(m.group(1).decode("ascii"))
        except (LookupError, UnicodeDecodeError) as exc:
            raise Unreadable(f"not decodable as its declared charset {m.group(1).decode('ascii')}: {exc}") from None


def html_text(data: bytes) -> tuple[str, str]:
    """(title, text) of an HTML page: the body's text without page chrome (scripts, styles, nav, aside, footer,
    and a <header> outside <article>/<main>); the title is <title>, else the first <h1>."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(_html_source(data))
    node = tree.css_first("title")
    title = " ".join(node.text().split()) if node is not None else ""
    tree.strip_tags(list(_CHROME))
    for header in tree.css("header"):
        parent, inside = header.parent, False
        while parent is not None and not inside:
            inside = parent.tag in ("article", "main")
            parent = parent.parent
        if not inside:
            header.decompose()
    if not title and (h1 := tree.css_first("h1")) is not None:
        title = " ".join(h1.text().split())
    root = tree.body or tree.root
    text = _block_text(root) if root is not None else ""
    text = "\n".join(" ".join(ln.split()) for ln in text.splitlines() if ln.strip())
    return title[:TITLE_CHARS], text


def _block_text(root: LexborNode) -> str:
    """The text under `root` with a line break around each block element only, so that inline markup
    (`re<i>treat</i>ed`, links) does not split words or sentences. Iterative: a page may nest deeper than Python's
    recursion limit."""
    out: list[str] = []
    stack: list[LexborNode | None] = [root]
    while stack:
        node = stack.pop()
        tag = node.tag or "" if node is not None else ""
        if node is None:  # the end of a block
            out.append("\n")
        elif tag == "-text":
            out.append(node.text_content or "")
        elif not tag.startswith("-"):  # comments and the like have no text to show
            if tag in _BLOCKS:
                out.append("\n")
                stack.append(None)
            stack.extend(reversed(list(node.iter(include_text=True))))
    return "".join(out)


def pdf_text(path: Path) -> tuple[str, str]:
    """(title, text) of a PDF: every page's text; the title is the metadata title, else the first line."""
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):  # an empty user password opens many "protected" PDFs
            raise Unreadable("encrypted PDF (it needs a password)")
        pages = [page.extract_text() or "" for page in reader.pages]
        meta = reader.metadata
        title = (meta.title or "") if meta is not None else ""
    except Unreadable:
        raise
    except FileNotDecryptedError:
        raise Unreadable("encrypted PDF (it needs a password)") from None
    except PdfReadError as exc:
        raise Unreadable(f"not a readable PDF: {exc}") from None
    except Exception as exc:  # noqa: BLE001 (a damaged file can fail anywhere in a third-party parser)
        raise Unreadable(f"not a readable PDF: {type(exc).__name__}: {exc}") from None
    text = "\n".join(pages)
    title = " ".join(str(title).split())
    if title.lower() in PLACEHOLDER_TITLES:
        title = ""
    return (title or _first_line(text))[:TITLE_CHARS], text


def _needs(module: str, package: str, kind: str, path: Path) -> None:
    """Stop the build (not skip the file) when a kind's library is missing: every such file would fail."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise CorpusFormatError(f"{path}: reading .{kind} files needs the {package} package, which is not "
                                f"installed: {EXTRA_HINT}") from None


def read_file(path: Path) -> tuple[str, str, str]:
    """(kind, title, text) of one file; `Unreadable` says why a file cannot be read."""
    kind = KINDS[path.suffix.lower()]
    if kind == "pdf":
        _needs("pypdf", "pypdf", kind, path)
        title, text = pdf_text(path)
    else:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise Unreadable(f"cannot open: {exc.strerror or exc}") from None
        if kind == "html":
            _needs("selectolax.lexbor", "selectolax", kind, path)
            title, text = html_text(data)
        elif kind == "md":
            _needs("markdown_it", "markdown-it-py", kind, path)
            title, text = markdown_text(_decode(data))
        else:
            title, text = plain_text(data)
    if not text.strip():
        raise Unreadable("no text in it" + (" (a scanned PDF needs OCR first)" if kind == "pdf" else ""))
    return kind, title, text


# --- the corpus reader -------------------------------------------------------------------------------------------

def file_row(path: Path, root: Path) -> dict[str, str]:
    """The row of one file (see the module docstring); raises `Unreadable`."""
    kind, title, text = read_file(path)
    rel = path.relative_to(root).as_posix()
    try:
        stamp = path.stat().st_mtime
    except OSError as exc:  # removed while the build ran
        raise Unreadable(f"cannot open: {exc.strerror or exc}") from None
    mtime = datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    row = {"id": rel, "path": rel, "title": title, "mtime": mtime, "type": kind, "text": text}
    if not title:
        del row["title"]
    return row


def file_docs(path: Path, root: Path, fields: Fields, report: FileReport,
              progress: Callable[[int], None] | None) -> Iterator[Doc]:
    """The document of the file at `path` (none when it is skipped: the report says why). A missing library or a
    field no file has stops the build instead (every file would fail alike)."""
    _check_fields(root, fields)
    try:
        row = file_row(path, root)
        try:
            doc = make_doc(row, fields, str(path))
        except CorpusFormatError as exc:  # e.g. a PDF whose text holds a lone surrogate: this file only
            raise Unreadable(str(exc).removeprefix(f"{path}: ")) from None
    except Unreadable as exc:
        report.skipped.append((path.relative_to(root).as_posix(), str(exc)))
        log.warning("%s: skipped: %s", path, exc)
    else:
        report.read += 1
        yield doc
    if progress is not None:
        try:
            progress(path.stat().st_size)
        except OSError:
            pass


def _check_fields(root: Path, fields: Fields) -> None:
    for role, name in (("id", fields.id), ("text", fields.text), ("title", fields.title)):
        if name is not None and name not in ROW_FIELDS:
            raise CorpusFormatError(f"{root}: no {role} field {name!r} in a folder of files; its fields: "
                                    f"{', '.join(ROW_FIELDS)}")


def finish(root: Path, report: FileReport) -> None:
    """Log how many files were read and skipped; when none could be read, stop naming them."""
    if report.read == 0 and report.skipped:
        shown = "; ".join(f"{p}: {why}" for p, why in report.skipped[:SHOWN_SKIPS])
        more = f"; … and {len(report.skipped) - SHOWN_SKIPS} more" if len(report.skipped) > SHOWN_SKIPS else ""
        raise CorpusFormatError(f"{root}: none of its {len(report.skipped)} files could be read: {shown}{more}")
    log.info("%s: %d files read, %d skipped", root, report.read, len(report.skipped))
