"""Which library reads each kind of file for `indexer build --data DIR` (indexer/file_docs.py): speed and text
quality of candidates, measured side by side on generated files whose body text is known.

    python bench/file_loaders.py [--docs 120] [--sentences 40] [--out bench/results/file-loaders-<stamp>]

Body text: real Wikipedia sentences (/work/shared/data/train/wiki1m_for_simcse.head11914.txt.gz, or
$STRATA_DATA_DIR/train/...), `--sentences` per document, in paragraphs of 5. Each document is written as
- HTML: a page with the body in <article><p> (with inline <b>, <a> and a word split by <i>), wrapped in
  boilerplate a real site carries (a <nav> menu of 30 links, a <header>, an <aside> of related links, a <footer>
  with copyright text, <script> and <style>);
- PDF: reportlab's platypus paragraphs (several pages per document), with a metadata title;
- Markdown: headings, emphasis, links with URLs, inline code and a list around the same sentences.
Quality is token recall and precision of the extracted text against the body's tokens (lowercase `\\w+`, as
multisets): recall = body tokens found, precision = extracted tokens that are body tokens (boilerplate, URLs and
markup lower it). Time is per file, each candidate reading every file in turn, rounds interleaved; the median
round is reported. A candidate whose library is not installed is listed as skipped.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import platform
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

WIKI = "train/wiki1m_for_simcse.head11914.txt.gz"
TOKEN = re.compile(r"\w+")


def sentences() -> list[str]:
    base = Path(os.environ.get("STRATA_DATA_DIR", "/work/shared/data"))
    with gzip.open(base / WIKI, "rt", encoding="utf-8") as fh:
        return [s.strip() for s in fh if len(s.split()) >= 6]


def make_bodies(n_docs: int, per_doc: int) -> list[list[str]]:
    sents = sentences()
    return [sents[i * per_doc:(i + 1) * per_doc] for i in range(n_docs)]


def esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def paragraphs(body: list[str]) -> list[str]:
    return [" ".join(body[i:i + 5]) for i in range(0, len(body), 5)]


NAV = "".join(f'<li><a href="/section/{i}">Section {i} menu item</a></li>' for i in range(30))


def inline_markup(p: str) -> str:
    """Inline elements on words of the body, as pages have them (a link, bold, a word split by <i>)."""
    words = p.split(" ")
    if len(words) > 8:
        words[2] = f"<b>{words[2]}</b>"
        words[5] = f'<a href="/wiki/{words[5]}">{words[5]}</a>'
        w = words[7]
        words[7] = f"{w[:len(w) // 2]}<i>{w[len(w) // 2:]}</i>" if len(w) > 3 else w
    return " ".join(words)


def html_page(title: str, body: list[str]) -> str:
    paras = "".join(f"<p>{inline_markup(esc(p))}</p>" for p in paragraphs(body))
    return (f"<!doctype html><html><head><title>{esc(title)}</title><meta charset='utf-8'>"
            "<style>body{font-family:sans-serif} .nav li{display:inline}</style>"
            "<script>window.analytics=function(){return 'tracking pixel loaded';};</script></head><body>"
            f"<header><div class='logo'>Example Encyclopedia</div><nav class='nav'><ul>{NAV}</ul></nav></header>"
            f"<main><article><h1>{esc(title)}</h1>{paras}</article>"
            "<aside><h3>Related articles</h3><ul>" + "".join(f"<li><a href='/r/{i}'>Related story number {i}</a>"
                                                                "</li>" for i in range(10)) + "</ul></aside></main>"
            "<footer><p>Copyright 2026 Example Encyclopedia contributors. All rights reserved. Privacy policy. "
            "Terms of use. Contact us. Cookie settings.</p></footer></body></html>")


def markdown_doc(title: str, body: list[str]) -> str:
    out = [f"# {title}", ""]
    for i, p in enumerate(paragraphs(body)):
        words = p.split(" ")
        if len(words) > 8:  # emphasis, a link with a URL and inline code on words of the body
            words[2] = f"**{words[2]}**"
            words[5] = f"[{words[5]}](https://example.org/wiki/page_{i}?ref=md)"
            words[7] = f"`{words[7]}`"
        out += [f"## Part {i}" if i else "", " ".join(words), ""]
    out += ["- " + body[0][:40], ""]
    return "\n".join(out)


def pdf_bytes(title: str, body: list[str]) -> bytes:
    from reportlab.lib.pagesizes import A4
    from reportlab.lib.styles import getSampleStyleSheet
    from reportlab.platypus import Paragraph, SimpleDocTemplate

    buf = io.BytesIO()
    doc = SimpleDocTemplate(buf, pagesize=A4, title=title)
    style = getSampleStyleSheet()["BodyText"]
    doc.build([Paragraph(esc(p), style) for p in paragraphs(body)])
    return buf.getvalue()


# --- the candidates ----------------------------------------------------------------------------------------------

def pdf_pypdf(data: bytes) -> str:
    from pypdf import PdfReader

    return "\n".join(p.extract_text() or "" for p in PdfReader(io.BytesIO(data)).pages)


def pdf_pdfminer(data: bytes) -> str:
    from pdfminer.high_level import extract_text

    return extract_text(io.BytesIO(data))


def html_selectolax_body(data: bytes) -> str:
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(data)
    tree.strip_tags(["script", "style", "noscript", "template"])
    return tree.body.text(separator=" ") if tree.body else ""


def html_selectolax_strata(data: bytes) -> str:
    """What Strata ships (indexer/file_docs.py): selectolax, page chrome (nav/header/footer/aside) removed."""
    from indexer.file_docs import html_text

    return html_text(data)[1]


def html_trafilatura(data: bytes) -> str:
    import trafilatura

    return trafilatura.extract(data.decode("utf-8"), include_comments=False) or ""


def html_bs4_lxml(data: bytes) -> str:
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(data, "lxml")
    for t in soup(["script", "style", "nav", "header", "footer", "aside", "noscript", "template"]):
        t.decompose()
    return soup.body.get_text(" ") if soup.body else ""


def md_raw(data: bytes) -> str:
    return data.decode("utf-8")


def md_strata(data: bytes) -> str:
    """What Strata ships: markdown-it-py tokens, text kept, markup and link URLs dropped."""
    from indexer.file_docs import markdown_text

    return markdown_text(data.decode("utf-8"))[1]


CANDIDATES: dict[str, dict[str, Callable[[bytes], str]]] = {
    "pdf": {"pypdf": pdf_pypdf, "pdfminer.six": pdf_pdfminer},
    "html": {"selectolax (body)": html_selectolax_body, "selectolax (Strata: chrome removed)": html_selectolax_strata,
             "trafilatura": html_trafilatura, "beautifulsoup4+lxml (chrome removed)": html_bs4_lxml},
    "md": {"raw text": md_raw, "markdown-it-py (Strata)": md_strata},
}


def quality(extracted: str, body: list[str]) -> tuple[float, float]:
    want = Counter(TOKEN.findall(" ".join(body).lower()))
    got = Counter(TOKEN.findall(extracted.lower()))
    common = sum((want & got).values())
    return common / max(sum(want.values()), 1), common / max(sum(got.values()), 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=120)
    ap.add_argument("--sentences", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    bodies = make_bodies(args.docs, args.sentences)
    files = {
        "pdf": [pdf_bytes(f"Document {i}", b) for i, b in enumerate(bodies)],
        "html": [html_page(f"Document {i}", b).encode() for i, b in enumerate(bodies)],
        "md": [markdown_doc(f"Document {i}", b).encode() for i, b in enumerate(bodies)],
    }
    rows = []
    for kind, cands in CANDIDATES.items():
        times: dict[str, list[float]] = {n: [] for n in cands}
        texts: dict[str, list[str]] = {}
        skipped = []
        for name, fn in list(cands.items()):
            try:
                fn(files[kind][0])
            except ImportError as exc:
                skipped.append(f"{name}: {exc}")
                times.pop(name)
        for _ in range(args.rounds):
            for name in times:
                fn = cands[name]
                t0 = time.perf_counter()
                texts[name] = [fn(data) for data in files[kind]]
                times[name].append((time.perf_counter() - t0) / len(files[kind]))
        for name in times:
            q = [quality(t, b) for t, b in zip(texts[name], bodies, strict=True)]
            rows.append({"kind": kind, "candidate": name, "ms_per_file": 1000 * statistics.median(times[name]),
                         "recall": statistics.mean(r for r, _ in q), "precision": statistics.mean(p for _, p in q)})
        rows += [{"kind": kind, "candidate": s, "skipped": True} for s in skipped]
    with open("/proc/loadavg") as fh:
        load = fh.read().split()[:3]
    sizes = {k: sum(map(len, v)) / len(v) / 1024 for k, v in files.items()}
    meta = {"docs": args.docs, "sentences_per_doc": args.sentences, "rounds": args.rounds, "load_avg": load,
            "cpus": os.cpu_count(), "python": platform.python_version(), "mean_file_kib": sizes,
            "stamp": datetime.now(timezone.utc).strftime("%Y%m%dT%H%MZ")}
    lines = [f"# File loaders: {args.docs} documents × {args.sentences} Wikipedia sentences",
             "", f"`python bench/file_loaders.py --docs {args.docs} --sentences {args.sentences} --rounds "
                 f"{args.rounds}`; load average {' '.join(load)} on {os.cpu_count()} CPUs (times are ratios within "
                 f"one run). Mean file size KiB: " + ", ".join(f"{k} {v:.1f}" for k, v in sizes.items()), "",
             "| kind | candidate | ms/file | token recall | token precision |", "|---|---|---:|---:|---:|"]
    for r in rows:
        if r.get("skipped"):
            lines.append(f"| {r['kind']} | {r['candidate']} (not installed) | | | |")
        else:
            lines.append(f"| {r['kind']} | {r['candidate']} | {r['ms_per_file']:.2f} | {r['recall']:.4f} | "
                         f"{r['precision']:.4f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(report)


if __name__ == "__main__":
    main()
