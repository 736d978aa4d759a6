"""The long hostile run: the property-based suites of tests/service/test_hostile_inputs.py (every route
that takes a filter or a body: /search in each mode, a collection's search, /encode, /v1/embeddings, /v1/models,
PUT /documents, /documents/delete) and the store-level filter property of tests/indexer/test_corpus.py, with
`--examples` examples per route instead of CI's few, randomized (CI's subset is derandomized), each request sent
alone (CI sends neighbours beside it). The target: 0 × 5xx. Hypothesis' own statistics give the examples each
route ran; they are written to bench/results/hostile-long-<UTC>.md with the command and the machine's load.

    STRATA_DATA_DIR=/work/shared/data nice python bench/hostile_long.py [--examples 2000] [--only http|store]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = [
    "tests/service/test_hostile_inputs.py::test_the_filter_grammar_up_to_and_past_every_limit_never_fails",
    "tests/service/test_hostile_inputs.py::test_hostile_texts_and_ids_on_every_endpoint",
    "tests/indexer/test_corpus.py::test_filters_of_every_width_and_depth_match_brute_force_or_are_refused",
]
# hypothesis --hypothesis-show-statistics: "tests/x.py::test[route]:" then "- N passing examples, M failing ..."
BLOCK = re.compile(r"^(tests/\S+::\S+):\s*$")
COUNTS = re.compile(r"- (\d+) passing examples?, (\d+) failing examples?, (\d+) invalid examples?")


def parse(output: str) -> dict[str, tuple[int, int, int]]:
    """Per test id: (passing, failing, invalid) examples, summed over hypothesis' phases."""
    out: dict[str, tuple[int, int, int]] = {}
    current = None
    for line in output.splitlines():
        if m := BLOCK.match(line.strip()):
            current = m.group(1)
        elif current and (m := COUNTS.search(line)):
            p, f, i = out.get(current, (0, 0, 0))
            out[current] = (p + int(m.group(1)), f + int(m.group(2)), i + int(m.group(3)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=2000, help="hypothesis examples per route (default 2000)")
    ap.add_argument("--only", choices=["http", "store"], help="the HTTP routes only, or the store's property only")
    args = ap.parse_args()
    tests = [t for t in TESTS if args.only is None or (t.startswith("tests/service") == (args.only == "http"))]
    env = os.environ | {"STRATA_HOSTILE_EXAMPLES": str(args.examples), "STRATA_FILTER_EXAMPLES": str(args.examples),
                        "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    # a base folder of its own: pytest deletes all but the 3 newest numbered ones of a user, other runs' included
    base = Path(tempfile.mkdtemp(prefix="hostile-long-"))
    log = base.with_suffix(".log")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
           "--basetemp", str(base / "t"), *tests]
    print(f"pytest's output goes to {log} as it runs", flush=True)
    load_before = os.getloadavg()
    start = time.monotonic()
    with open(log, "w") as fh:
        r = subprocess.run(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, text=True)
    seconds = time.monotonic() - start
    r.stdout = log.read_text()
    shutil.rmtree(base, ignore_errors=True)
    counts = parse(r.stdout)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    summary = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "(no output)"
    lines = [
        f"# Hostile long run ({stamp})", "",
        f"Command: `STRATA_DATA_DIR=... nice python bench/hostile_long.py --examples {args.examples}"
        f"{' --only ' + args.only if args.only else ''}` (pytest exit "
        f"{r.returncode}: {summary}); {seconds / 60:.1f} min; load average before {load_before[0]:.1f}, after "
        f"{os.getloadavg()[0]:.1f} (2 cores shared with other jobs). Randomized (not derandomized), each request sent "
        "alone. A failing example is a 5xx or a wrong answer (see each test's assertions).", "",
        "| test (route) | passing | failing | invalid (filtered by hypothesis) |", "| --- | ---: | ---: | ---: |",
    ]
    lines += [f"| `{t.split('::', 1)[1]}` | {p} | {f} | {i} |" for t, (p, f, i) in sorted(counts.items())]
    total = sum(p for p, _, _ in counts.values())
    lines += ["", f"{total} passing examples over {len(counts)} routes/tests; "
              f"{sum(f for _, f, _ in counts.values())} failing."]
    if r.returncode:
        lines += ["", "Failures (the end of pytest's output):", "", "```", *r.stdout.splitlines()[-60:], "```"]
    out = REPO / "bench" / "results" / f"hostile-long-{stamp}.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwrote {out.relative_to(REPO)}")
    return r.returncode


if __name__ == "__main__":
    sys.exit(main())
