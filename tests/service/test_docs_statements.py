"""What the docs state about serving and building, checked on the real thing: search.md's sample build runs as
written and prints the flat index a build under the exact-search threshold makes; a fresh Docker volume (a
collections folder with no collection yet, as docker-compose.yml serves it) answers /health 200, /ready 503 and
/search 404, as operations.md says; the README's five lines name the port they serve on. (client.md's examples
run in tests/strata_client/test_docs_examples.py; written fields filtering at once, as client.md says, in
tests/strata_client/test_llamaindex.py::test_delete_ref_doc_on_a_version_built_without_the_field.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO, start_server, stop_server


def test_search_md_sample_build_prints_what_a_build_prints(tmp_path: Path, tiny_exported: Path) -> None:
    page = (REPO / "docs" / "search.md").read_text()
    block = page[page.index("$ cat docs.jsonl\n"):]
    rows = re.findall(r"^(\{.*\})$", block[: block.index("$ indexer build")], flags=re.M)
    said = re.search(r"^(built version \S+ in /tmp/faq: .*)$", block, flags=re.M).group(1)  # type: ignore[union-attr]
    data = tmp_path / "docs.jsonl"
    data.write_text("\n".join(rows) + "\n")
    r = subprocess.run([sys.executable, "-m", "indexer.cli", "build", "--data", str(data), "--root",
                        str(tmp_path / "faq"), "--model", str(tiny_exported), "--threads", "1"], cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    printed = next(line for line in r.stdout.splitlines() if line.startswith("built version "))
    shape = re.compile(r"built version \S+ in \S+: (.*), [\d.]+s")
    assert shape.fullmatch(printed) and shape.fullmatch(said.replace("/tmp/faq", "ROOT"))
    assert shape.fullmatch(printed).group(1) == shape.fullmatch(said).group(1), (printed, said)  # type: ignore
    # every line the sample shows, in order, is a line the build prints (its version, times and rates aside)
    shown = block[block.index("$ indexer build"):].split("\n", 1)[1].split("\n$ ", 1)[0].splitlines()

    def same(line: str) -> str:
        line = re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{6} in \S+:", "VERSION in ROOT:", line)
        return re.sub(r"\(\d[\d,]* rows/s", "(N rows/s", re.sub(r"\b\d+(\.\d+)?s\b", "Ts", line))

    assert [same(ln) for ln in shown] == [same(ln) for ln in r.stdout.splitlines()], (shown, r.stdout)


def test_a_fresh_volume_answers_as_operations_md_says(tmp_path: Path) -> None:
    page = " ".join((REPO / "docs" / "operations.md").read_text().split())
    assert "`/health` 200, `/ready` 503" in page and "`/search` 404" in page
    (tmp_path / "indexes").mkdir()
    srv = start_server(tmp_path, {"STRATA_COLLECTIONS_DIR": str(tmp_path / "indexes"),
                                  "STRATA_DEFAULT_COLLECTION": "quora"}, wait_ready=False)
    try:
        with srv.client() as c:
            assert c.get("/health").status_code == 200
            assert c.get("/ready").status_code == 503
            search = c.post("/search", json={"query": "anything"})
            assert search.status_code == 404, search.text
    finally:
        stop_server(srv)


def test_the_readmes_five_lines_name_their_port() -> None:
    readme = (REPO / "README.md").read_text()
    lines = readme[readme.index("## Your own corpus, in five lines"):].split("```text\n", 1)[1].split("```")[0]
    serve = next(line for line in lines.splitlines() if "python -m service" in line)
    port = re.search(r"STRATA_PORT=(\d+)", serve)
    assert port and f"127.0.0.1:{port.group(1)}" in lines
