"""The documentation: README.md is a front page (at most 250 lines), and what README.md and docs/*.md cite exists —
every `bench/results` file (figures must be traceable to the run that measured them), every relative link to a
repository file, every `#anchor` of a link into a Markdown page, and every source path named in backticks (so a
module that moves takes its documentation with it)."""
from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

from .conftest import REPO

README_MAX_LINES = 250
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Pages other branches are writing at the time of this test; linked already. Each entry must be removed when its
# page lands (test_pending_pages_are_still_missing fails until it is).
PENDING: set[str] = set()

FENCE = re.compile(r"^```.*?^```[ \t]*$", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)\)")
# a results path, possibly a template (`compare-<stamp>.md`) or a prefix cut short (`search-under-writes-…`)
RESULTS_PATH = re.compile(r"bench/results/([A-Za-z0-9_.*-]*)(<[^>\s]*>[A-Za-z0-9_.-]*|…)?")
# a results file named without its folder, in backticks: `int8-20261123T2011*`, `…T151613Z.md`
# a repository path in backticks: `service/engine/live.py`, `tests/indexer/`
SOURCE_PATH = re.compile(r"`((?:models|indexer|service|tests|docker|bench|docs)/[A-Za-z0-9_./-]*)`")
DECISIONS = REPO / "docs" / "decisions.md"
# a retired experiment's script, named in decisions.md's table of them (its command and results stay there)
RETIRED_ROW = re.compile(r"^\| `(bench/[a-z0-9_/]+\.py)` \|", re.M)
# named on purpose though absent: gitignored, or said to be gone
NOT_IN_TREE = {"bench/.venv-peers/", "bench/baseline_server.py", *RETIRED_ROW.findall(DECISIONS.read_text())}
BARE_RESULT = re.compile(r"`(…[A-Za-z0-9_*-]*(?:\.md|\.json)"
                         r"|[A-Za-z0-9_.-]*-2026\d{4}T[A-Za-z0-9_*-]*(?:\.md|\.json)?)`")


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def prose(text: str) -> str:
    """The text outside fenced code blocks, where links and headings are Markdown."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = INLINE_CODE.sub(lambda m: m.group(0).strip("`"), heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path.read_text()).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return frozenset(out)


def results_citations(text: str) -> set[str]:
    """Glob patterns under bench/results/ for every results file the text cites."""
    found = set()
    for m in RESULTS_PATH.finditer(text):
        name, cut = m.group(1).rstrip("."), m.group(2)
        if cut:  # a template or a prefix: at least one file must fit it
            name = name + "*" + (re.sub(r"^<[^>]*>", "", cut) if cut.startswith("<") else "")
        if name:
            found.add(name)
    for m in BARE_RESULT.finditer(text):
        name = m.group(1)
        if name.endswith((".md", ".json", "*")):
            found.add(name.replace("…", "*"))
    return found


def test_readme_is_a_front_page() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move sections to docs/"
    # the two commands a newcomer runs come first, verbatim (test_packaging checks the second against .ci/run)
    commands = re.findall(r"```bash\n(.*?)\n```", "\n".join(lines), flags=re.S)
    assert commands[0].endswith("python -m service demo") and "pytest" in commands[1]


def test_the_front_pages_install_line_brings_what_its_commands_import() -> None:
    """The README's first install line is what a newcomer runs before "Your own corpus, in five lines": every
    package the front page's commands import (the client's httpx among them) must come with its extras."""
    import tomllib

    text = (REPO / "README.md").read_text()
    extras = re.search(r'pip install -e "\.\[([a-z,]+)\]"', text)
    assert extras, "no `pip install -e \".[...]\"` line in README.md"
    optional = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    installed = {re.split(r"[<>=\[ ;]", req)[0].lower() for extra in extras.group(1).split(",")
                 for req in optional[extra]}
    front = text.split("## Test it")[0]  # the run and the five lines, not the suite's own install
    used = {"strata_client": "client", "service": "serve", "indexer": "serve", "encoder ": "train"}
    for marker, extra in used.items():
        if marker in front:
            missing = {re.split(r"[<>=\[ ;]", req)[0].lower() for req in optional[extra]} - installed
            assert not missing, f"README's commands use {marker.strip()} but its install line lacks {sorted(missing)}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_cited_results_file_exists(page: Path) -> None:
    results = REPO / "bench" / "results"
    missing = sorted(p for p in results_citations(page.read_text()) if not any(results.glob(p)))
    assert not missing, f"{rel(page)} cites bench/results files that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(INLINE_CODE.sub("", prose(page.read_text()))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        path = (page.parent / file_part).resolve() if file_part else page
        if not path.is_relative_to(REPO):
            broken.append(f"{target} (outside the repository)")
            continue
        if rel(path) in PENDING and not path.exists():
            continue
        if not path.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target} (no heading #{anchor} in {rel(path)})")
    assert not broken, f"{rel(page)}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_source_path_named_exists(page: Path) -> None:
    named = set(SOURCE_PATH.findall(page.read_text())) - NOT_IN_TREE
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f"{rel(page)} names paths that are not in the tree: {missing}"


def test_every_results_file_is_cited_by_a_page() -> None:
    """bench/results keeps only what the documentation cites: a result nobody links is not kept in the tree."""
    results = REPO / "bench" / "results"
    patterns = set().union(*(results_citations(page.read_text()) for page in PAGES))
    cited = {path for pattern in patterns for path in results.glob(pattern)}
    uncited = sorted(p.name for p in results.iterdir() if p.is_file() and p not in cited)
    assert not uncited, f"bench/results files no page cites (cite them or delete them): {uncited}"


def test_retired_scripts_are_gone() -> None:
    """decisions.md's table of retired experiments names scripts that are no longer in the tree."""
    retired = RETIRED_ROW.findall(DECISIONS.read_text())
    assert retired, "docs/decisions.md lists no retired experiment"
    assert not [p for p in retired if (REPO / p).exists()], "a script listed as retired is still in the tree"


def test_pending_pages_are_still_missing() -> None:
    """Once a pending page exists, its links must be checked like any other: take it out of PENDING."""
    landed = sorted(p for p in PENDING if (REPO / p).exists())
    assert not landed, f"remove {landed} from tests/test_docs.py's PENDING"


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    """The extraction finds templates, prefixes, globs and bare names, and the slugs are GitHub's."""
    cited = results_citations("see `bench/results/compare-<stamp>.md`, `bench/results/search-under-writes-…`, "
                              "(`bench/results/int8-*.md`), `bench/results/x-20261123T1Z.json`. Also `…T151613Z.md`"
                              " and `int8-20261123T2011*`; not `bench/results/` itself.")
    assert cited == {"compare-*.md", "search-under-writes-*", "int8-*.md", "x-20261123T1Z.json", "*T151613Z.md",
                     "int8-20261123T2011*"}
    assert slug("Search modes: dense, lexical, hybrid") == "search-modes-dense-lexical-hybrid"
    assert slug("Scaling past one machine (Ray)") == "scaling-past-one-machine-ray"
    assert slug("`indexer build` options") == "indexer-build-options"
    page = tmp_path / "p.md"
    page.write_text("# A title\n\n```text\n# not a heading\n```\n## A title\n")
    assert anchors(page) == {"a-title", "a-title-1"}


ARCHITECTURE = REPO / "docs" / "ARCHITECTURE.md"
PACKAGE_ROW = re.compile(r"^\| `((?:models|indexer|service|strata_client)[a-z_/]*/)` \|([^|]*)\|", re.M)
DOTTED = re.compile(r"`((?:models|indexer|service|strata_client)(?:\.[a-z_0-9]+)+)")


def _is_module(path: Path) -> bool:
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _names_something(dotted: str) -> bool:
    """A module, or a name defined at the top of the longest module it starts with (`service.engine.Collection`)."""
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        path = REPO.joinpath(*parts[:n])
        if _is_module(path):
            if n == len(parts):
                return True
            source = (path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py")
            return re.search(rf"^(?:class|def|async def) {parts[n]}\b|^{parts[n]}\b.*=|\b{parts[n]}\b.*import|"
                             rf"import.*\b{parts[n]}\b", source.read_text(), re.M) is not None
    return False


def test_architecture_names_only_modules_that_exist() -> None:
    """docs/ARCHITECTURE.md's package table names its modules bare (`searcher` in the `service/engine/` row): each
    must be a module or package there (the CLIs' names, `encoder` and `indexer`, excepted); every dotted module
    (`indexer.runtime.writes`; a class or function after it is allowed) and every `path/to/module.py` must exist."""
    text = ARCHITECTURE.read_text()
    missing = []
    rows = PACKAGE_ROW.findall(text)
    assert {pkg for pkg, _ in rows} >= {"models/", "indexer/", "indexer/runtime/", "service/", "service/engine/"}
    for pkg, owns in rows:
        for name in re.findall(r"`([a-z_][a-z0-9_]*)`(?! CLI)", owns):
            if not _is_module(REPO / pkg / name):
                missing.append(f"{pkg}{name}")
    for dotted in set(DOTTED.findall(text)):
        if not _names_something(dotted):
            missing.append(dotted)
    for path in set(re.findall(r"`((?:models|indexer|service|strata_client|tests|bench)/[A-Za-z0-9_/]+\.py)", text)):
        if not (REPO / path).is_file():
            missing.append(path)
    assert not missing, f"docs/ARCHITECTURE.md names modules that do not exist: {sorted(missing)}"


PRODUCT = ("models", "indexer", "service", "strata_client")


def test_the_module_map_matches_the_tree() -> None:
    """docs/ARCHITECTURE.md is the one module map: every package of the product has a row, and every module and
    subpackage in it is named in that row (a module added without its row entry, or a row naming a module that
    moved, fails here or in the test above)."""
    text = ARCHITECTURE.read_text()
    rows = {pkg: set(re.findall(r"`([a-z_][a-z0-9_]*)`", owns)) for pkg, owns in PACKAGE_ROW.findall(text)}
    unlisted = []
    for init in sorted(p for top in PRODUCT for p in (REPO / top).rglob("__init__.py")):
        package = init.parent
        pkg = rel(package) + "/"
        named = rows.get(pkg)
        if named is None:
            unlisted.append(f"{pkg} (no row)")
            continue
        children = [p.stem for p in package.glob("*.py") if p.stem not in ("__init__", "__main__")]
        children += [d.name for d in package.iterdir() if (d / "__init__.py").is_file()]
        unlisted += [f"{pkg}{name}" for name in sorted(children) if name not in named]
    assert not unlisted, f"docs/ARCHITECTURE.md's package table does not name: {unlisted}"


def test_the_front_page_states_the_exact_search_threshold_the_code_uses() -> None:
    """README and docs/cli.md say below how many vectors (not documents: passages count) `--index auto` searches
    exactly: `ann.AUTO_FLAT_BELOW`."""
    from indexer.runtime.ann import AUTO_FLAT_BELOW

    for page in (REPO / "README.md", REPO / "docs" / "cli.md"):
        text = " ".join(page.read_text().split())
        assert f"below {AUTO_FLAT_BELOW:,} vectors" in text and f"{AUTO_FLAT_BELOW:,} documents" not in text, page


# Labels of rounds of work: the tree says what is true now, not which round of work made it so.
# A label is a word of work ("session", "issue", "round", "stop", "phase", "sprint") and its number, in prose or in a
# name (a test named after an issue's number), or the current session named as such.
ROUND_LABEL = re.compile(r"(?<![A-Za-z0-9-])(?:sessions?|issues?|rounds?|stops?|phases?|sprints?)[ _-]#?\d+(?!\d)"
                         r"|\bthis session\b", re.I)
DATED_HEADING = re.compile(r"^#{1,6} .*\b20\d\d-\d\d(?:-\d\d)?\b", re.M)
TEXT_SUFFIXES = {".md", ".py", ".sh", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".ini", ".lua", ".html", ".js"}
NOT_SCANNED = {".git", "__pycache__", "results", "work", "build", "dist", "node_modules", "shared"}


def tree_texts() -> list[Path]:
    """The repository's own text files: source, docs, scripts, configuration (bench/results holds raw output)."""
    out = []
    for path in REPO.rglob("*"):
        parts = path.relative_to(REPO).parts
        if any(p in NOT_SCANNED or p.startswith(".venv") or p.endswith(".egg-info") for p in parts[:-1]):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name.startswith("Dockerfile")):
            out.append(path)
    return out


def test_no_labels_of_rounds_of_work_in_the_tree() -> None:
    """Docs, docstrings and comments carry no labels of the rounds of work that produced them; the one dated
    page is docs/decisions.md, and no heading elsewhere carries a date."""
    label = "iss" + "ue 3"  # spelled apart so that this file passes its own test
    assert ROUND_LABEL.search(f"as {label}5 found") and ROUND_LABEL.search("Sess" + "ion 24: the swap")
    assert not ROUND_LABEL.search("--rounds 3") and not ROUND_LABEL.search("round {r + 1}")
    assert ROUND_LABEL.search("def test_iss" + "ue_35_filters():") and ROUND_LABEL.search("as this " + "session found")
    assert ROUND_LABEL.search("iss" + "ue-12") and not ROUND_LABEL.search("bm25s_2 tissue 3")
    found = []
    for path in tree_texts():
        text = path.read_text(errors="replace")
        found += [f"{rel(path)}: {m.group(0)!r}" for m in ROUND_LABEL.finditer(text)]
        if path.suffix == ".md" and path != DECISIONS:
            found += [f"{rel(path)}: dated heading {m.group(0)!r}" for m in DATED_HEADING.finditer(prose(text))]
    assert not found, f"labels of rounds of work: {found}"


# A measured figure in a docstring goes stale with the machine and the code: times, rates, speed-ups and shares of
# time belong on the docs page that owns them (with their result file); the docstring says the purpose. Sizes are
# not matched: those left in docstrings are arithmetic from dimensions (537k × 384 float32), not measurements.
FIGURE = re.compile(r"(?<![\w.])~?\d[\d,.]*(?:[–-]\d[\d,.]*)?"
                    r"(?:\s?(?:ms|µs|us|sec|seconds|CPU-seconds|min|minutes|hours)|\s[sh])\b"
                    r"|\d[\d,.]*\s?(?:docs|documents|texts|sentences|sent|req|requests|queries)/s\b"
                    r"|\d[\d.]*\s?[x×]\s(?:faster|slower|fewer|more|less)\b"
                    r"|\d[\d.]*\s?%\s(?:of\s(?:the\s)?(?:\S+\s)?)?(?:CPU|time)\b")
# (module, figure): definitions and arithmetic, not measurements
FIGURES_ALLOWED = {
    ("indexer/runtime/progress.py", "182 texts/s"),  # the format of a log line, shown as an example
    ("indexer/runtime/progress.py", "2 s"),  # the status file's write interval
    ("indexer/runtime/progress.py", "10 s"),  # the longest interval between progress lines
    ("indexer/runtime/faiss/kmeans.py", "30x fewer"),  # nlist against groups + probe · nlist/groups at 10M
    ("service/routers/stats.py", "5 minutes"),  # the windows /stats reports
    ("strata_client/types.py", "5 minutes"),  # the same windows, in the client's type
}


def docstring_figures(source: str) -> list[tuple[str, str]]:
    """(module, class or function name, figure) of every figure FIGURE finds in a docstring of `source`."""
    tree = ast.parse(source)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, kinds))]
    return [(getattr(n, "name", "<module>"), m.group(0)) for n in nodes
            for m in FIGURE.finditer(ast.get_docstring(n, clean=False) or "")]


def test_no_docstring_quotes_a_measured_figure() -> None:
    found = [f"{rel(p)}: {name}: {fig!r}" for pkg in ("models", "indexer", "service", "strata_client")
             for p in sorted((REPO / pkg).rglob("*.py"))
             for name, fig in docstring_figures(p.read_text()) if (rel(p), fig) not in FIGURES_ALLOWED]
    assert not found, f"docstrings quoting measured figures (move each to the docs page that owns it): {found}"


def test_the_figure_check_finds_measured_figures_and_passes_definitions() -> None:
    source = ('"""Sorting 10M ids: 4.1 s; placing them 0.3 s, 13× faster."""\n\n\n'
              'class C:\n    """p50 12.5 ms at 170 docs/s, ~7% of the encoder\'s time; 5 % of CPU; '
              '1-1.7 CPU-seconds."""\n\n\n'
              'def f() -> None:\n    """A 429s\' wait; 8 MiB chunks; 384 × 4 bytes; ETA 16m 24s; 2x the rows."""\n')
    assert docstring_figures(source) == [("<module>", "4.1 s"), ("<module>", "0.3 s"), ("<module>", "13× faster"),
                                         ("C", "12.5 ms"), ("C", "170 docs/s"), ("C", "7% of the encoder\'s time"),
                                         ("C", "5 % of CPU"), ("C", "1-1.7 CPU-seconds")]


def test_every_metric_family_is_documented() -> None:
    """Each family `/metrics` exposes is named in the docs (`strata_texts_encoded_total` was in none)."""
    from service.engine.metrics import Metrics

    docs = "".join(p.read_text() for p in (REPO / "docs").glob("*.md"))
    names = {m.name for m in Metrics().registry.collect()}
    assert names and not [n for n in names if n not in docs and f"{n}_total" not in docs], names
