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

Which files are read, and the entries left out (unknown kinds, symlinks out of the folder, FIFOs, ...), is
`indexer.folder_walk`. Each file is read within the limits of `indexer.doc_limits`: the first `READ_BYTES` of a
Markdown, HTML or text file (a longer file is cut, and named as cut), a PDF's pages within `PDF_SECONDS`, an HTML
page nesting at most `MAX_HTML_DEPTH` levels. A file that cannot be read (not UTF-8, binary, a corrupt or
encrypted PDF, no text, past a limit) is skipped: its path and reason are kept on the source (`FileReport`, each
named once) and the build lists them in its final lines and its manifest; when no file could be read the build
stops naming them (`finish`). The PDF library's own warnings are not shown: the skip's reason says what matters.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from indexer.corpus_rows import CorpusFormatError, Doc, Fields, make_doc
from indexer.doc_limits import MAX_DOC_CHARS, MAX_HTML_DEPTH, PDF_SECONDS, READ_BYTES, html_depth, utf8_prefix
from indexer.folder_walk import KINDS, walk_folder

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token
    from selectolax.lexbor import LexborNode

log = logging.getLogger(__name__)

EXTRA_HINT = "pip install 'strata[files]'"
TITLE_CHARS = 300  # a title taken from a first line is cut here
PLACEHOLDER_TITLES = {"(anonymous)", "untitled", "(untitled)", "unknown", "no title"}  # what PDF writers put there
ROW_FIELDS = ("id", "path", "title", "mtime", "type", "text")  # what each file's row holds (`file_row`)
SHOWN_SKIPS = 20  # skipped files named in the message of a build where none could be read
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
_BLOCKS = frozenset("address article blockquote br dd details dialog div dl dt fieldset figcaption figure form h1 h2 "
                    "h3 h4 h5 h6 header hr li main ol p pre section summary table td th tr ul caption body html legend "
                    "option optgroup thead tbody tfoot menu hgroup search center".split())
# form controls and inline-block boxes: a space around each, not a line break (they may sit inside a sentence)
_SPACED = frozenset("button input label select textarea img output meter progress".split())
_INLINE_BREAKS = {"softbreak": " ", "hardbreak": "\n"}
_HTML_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9-]*)")
_AROUND_BREAK = re.compile(r"[ \t]*\n[ \t]*")
_CHROME = ("script", "style", "noscript", "template", "nav", "aside", "footer", "svg", "iframe")


class Unreadable(Exception):
    """A file skipped; the message is the reason."""


@dataclass
class FileReport:
    """What reading a folder found: files read and files skipped with their reasons."""

    read: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path relative to the folder, reason)
    cut: list[tuple[str, str]] = field(default_factory=list)  # files read in part: (path, what was kept)


def doc_files(folder: Path, follow_symlinks: bool = False) -> list[Path]:
    """The folder's files to read, recursively, in path order (`indexer.folder_walk`)."""
    return walk_folder(folder, follow_symlinks=follow_symlinks)[0]


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
            # a soft line break is a space between words, a hard one a line break: neither glues two words
            lines.append(_inline_text(tok))
            if heading and not title:
                title = " ".join(lines[-1].split())
            heading = False
        elif tok.type in ("fence", "code_block"):
            lines.append(tok.content.rstrip("\n"))
        elif tok.type == "html_block":  # raw HTML between the paragraphs: its text, as an HTML page gives it
            lines.append(_block_text_of(tok.content))
    return title[:TITLE_CHARS], "\n".join(ln for ln in lines if ln.strip())


def _inline_text(tok: Token) -> str:
    """An inline token's text: a soft break or a block's or form control's tag is a space, a hard break or `<br>` a
    line break, so none glues two words; other inline HTML tags join what they wrap, as in an HTML page."""
    parts = [_inline_tag(c.content) if c.type == "html_inline" else
             _INLINE_BREAKS.get(c.type, c.content) for c in tok.children or ()
             if c.type in ("text", "code_inline", "softbreak", "hardbreak", "html_inline")]
    return _AROUND_BREAK.sub("\n", "".join(parts)) if parts else tok.content


def _inline_tag(tag: str) -> str:
    name = m.group(1).lower() if (m := _HTML_TAG.match(tag)) else ""
    return "\n" if name == "br" else " " if name in _BLOCKS or name in _SPACED else ""


def _block_text_of(fragment: str) -> str:
    """The text of a fragment of HTML, a line per block (`_block_text`), without page chrome (scripts, styles, …);
    comments and tags alone give none. Nested past `MAX_HTML_DEPTH`: Unreadable, as an HTML page is."""
    from selectolax.lexbor import LexborHTMLParser

    depth = html_depth(fragment.encode("utf-8", "surrogatepass"))
    if depth > MAX_HTML_DEPTH:
        raise Unreadable(f"HTML in the Markdown nested {depth:,} levels deep, past the limit of {MAX_HTML_DEPTH:,}; "
                         f"not parsed")
    tree = LexborHTMLParser(fragment)
    tree.strip_tags(list(_CHROME))
    root = tree.body
    text = _block_text(root) if root is not None else ""
    return "\n".join(" ".join(ln.split()) for ln in text.splitlines() if ln.strip())


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

    depth = html_depth(data)
    if depth > MAX_HTML_DEPTH:
        raise Unreadable(f"HTML nested {depth:,} levels deep, past the limit of {MAX_HTML_DEPTH:,} (the parser's time "
                         f"grows with the depth); not parsed")
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
    """The text under `root`, a line break around each block element and a space around each form control only, so
    inline markup (`re<i>treat</i>ed`, links) splits no word. Iterative: a page may nest past the recursion limit."""
    out: list[str] = []
    stack: list[LexborNode | str] = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, str):  # what ends a block ("\n"), a control (" ") or another element ("")
            out.append(node)
        elif (tag := node.tag or "") == "-text":
            out.append(node.text_content or "")
        elif not tag.startswith("-"):  # comments and the like have no text to show
            sep = "\n" if tag in _BLOCKS else " " if tag in _SPACED else ""
            out.append(sep)
            stack.extend([sep, *reversed(list(node.iter(include_text=True)))])
    return "".join(out)


@contextlib.contextmanager
def _quiet_pypdf() -> Iterator[None]:
    """pypdf's own warnings (through logging and `warnings`) hidden: a damaged file's skip says why in one line."""
    logger = logging.getLogger("pypdf")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def _pdf_pages(reader: object, path: Path) -> tuple[list[str], bool]:
    """(the pages' text, whether it was cut at `MAX_DOC_CHARS`), within `PDF_SECONDS`."""
    pages: list[str] = []
    chars, start = 0, time.monotonic()
    for n, page in enumerate(reader.pages, 1):  # type: ignore[attr-defined]
        pages.append(page.extract_text() or "")
        chars += len(pages[-1]) + 1
        if chars > MAX_DOC_CHARS:
            return pages, True
        if time.monotonic() - start > PDF_SECONDS:
            raise Unreadable(f"reading its pages took over {PDF_SECONDS:.0f} s (stopped at page {n})")
    return pages, False


def pdf_text(path: Path) -> tuple[str, str, bool]:
    """(title, text, whether the text was cut) of a PDF: its pages' text up to `MAX_DOC_CHARS`; the title is the
    metadata title, else the first line."""
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PdfReadError

    try:
        with _quiet_pypdf():
            reader = PdfReader(path)
            if reader.is_encrypted and not reader.decrypt(""):  # an empty user password opens many PDFs
                raise Unreadable("encrypted PDF (it needs a password)")
            pages, cut = _pdf_pages(reader, path)
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
    return (title or _first_line(text))[:TITLE_CHARS], text, cut


def _needs(module: str, package: str, kind: str, path: Path) -> None:
    """Stop the build (not skip the file) when a kind's library is missing: every such file would fail."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        raise CorpusFormatError(f"{path}: reading .{kind} files needs the {package} package, which is not "
                                f"installed: {EXTRA_HINT}") from None


def _head(path: Path) -> tuple[bytes, int | None]:
    """The file's first `READ_BYTES` (a character cut in half dropped) and its size when it holds more."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(READ_BYTES + 1)
            size = os.fstat(fh.fileno()).st_size if len(data) > READ_BYTES else None
    except OSError as exc:
        raise Unreadable(f"cannot open: {exc.strerror or exc}") from None
    return (utf8_prefix(data[:READ_BYTES], True), size) if size is not None else (data, None)


def read_file(path: Path) -> tuple[str, str, str, str | None]:
    """(kind, title, text, what was kept when the file was read in part, else None) of one file; `Unreadable`
    says why a file cannot be read."""
    kind = KINDS[path.suffix.lower()]
    kept: str | None = None
    if kind == "pdf":
        _needs("pypdf", "pypdf", kind, path)
        title, text, cut = pdf_text(path)
        if cut:
            kept = f"its pages' text cut at {MAX_DOC_CHARS:,} characters"
    else:
        data, size = _head(path)
        if size is not None:
            kept = f"its first {READ_BYTES // 2**20} MiB read, of {size / 2**20:,.0f} MiB"
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
    return kind, title, text, kept


# --- the corpus reader -------------------------------------------------------------------------------------------

def file_row(path: Path, root: Path) -> tuple[dict[str, str], str | None]:
    """The row of one file (see the module docstring) and what was kept of a file read in part (else None);
    raises `Unreadable`."""
    kind, title, text, kept = read_file(path)
    rel = path.relative_to(root).as_posix()
    try:
        stamp = path.stat().st_mtime
    except OSError as exc:  # removed while the build ran
        raise Unreadable(f"cannot open: {exc.strerror or exc}") from None
    mtime = datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    row = {"id": rel, "path": rel, "title": title, "mtime": mtime, "type": kind, "text": text}
    if not title:
        del row["title"]
    return row, kept


def file_docs(path: Path, root: Path, fields: Fields, report: FileReport,
              progress: Callable[[int], None] | None) -> Iterator[Doc]:
    """The document of the file at `path` (none when it is skipped: the report says why). A missing library or a
    field no file has stops the build instead (every file would fail alike)."""
    _check_fields(root, fields)
    rel = path.relative_to(root).as_posix()
    try:
        row, kept = file_row(path, root)
        try:
            doc = make_doc(row, fields, str(path))
        except CorpusFormatError as exc:  # e.g. a PDF whose text holds a lone surrogate: this file only
            raise Unreadable(str(exc).removeprefix(f"{path}: ")) from None
    except Unreadable as exc:
        report.skipped.append((rel, str(exc)))
        log.debug("%s: skipped: %s", path, exc)  # named once, in the build's final lines and its manifest
    else:
        report.read += 1
        if kept is not None:
            report.cut.append((rel, kept))
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
    """Log how many files were read, cut and skipped; when none could be read, stop naming the skipped ones."""
    report.skipped.sort()
    if report.read == 0 and report.skipped:
        shown = "; ".join(f"{p}: {why}" for p, why in report.skipped[:SHOWN_SKIPS])
        more = f"; … and {len(report.skipped) - SHOWN_SKIPS} more" if len(report.skipped) > SHOWN_SKIPS else ""
        raise CorpusFormatError(f"{root}: no file could be read ({len(report.skipped)} skipped): {shown}{more}")
    log.info("%s: %d files read (%d of them in part), %d entries skipped", root, report.read, len(report.cut),
             len(report.skipped))
