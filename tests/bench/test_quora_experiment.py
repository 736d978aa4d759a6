"""bench/quora_experiment.py: the table it commits — paired per-seed deltas, untrained arms paired with every seed,
per-seed cost and load, and `--render` rewriting a rows file's table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.quora_experiment import CONTROL, STOCK, STOCK_CLS, main, paired, render


def row(arm: str, seed: int, paper: float, heldout: float, **extra: Any) -> dict[str, Any]:
    return {"arm": arm, "seed": seed, "paper_exact": paper, "paper_ivf": paper - 0.5, "heldout_exact": heldout,
            "heldout_ivf": heldout - 0.5, "stsb": 80.0, "sts_avg": 78.0, **extra}


ROWS = [
    row(STOCK, 0, 73.5, 71.5),
    row(STOCK_CLS, 0, 68.9, 66.6),
    row(CONTROL, 1, 73.0, 71.0, best_step=250, s_per_1k_steps=3432.4, load_before="1.97/2.02/2.20"),
    row(CONTROL, 2, 73.4, 71.6, best_step=500, s_per_1k_steps=12244.0, load_before="4.11/3.00/2.79"),
    row("LayerAtt→CLS", 1, 73.5, 71.2, best_step=375, s_per_1k_steps=5542.0, load_before="0.61/2.00/1.43"),
    row("LayerAtt→CLS", 2, 73.2, 71.9, best_step=375, s_per_1k_steps=5871.0, load_before="1.00/1.89/2.03",
        load_after="3.08/3.89/4.37"),
    row("mean→mean", 1, 74.3, 72.4),
]


def test_paired_deltas_match_seeds_and_pair_untrained_arms_with_every_seed() -> None:
    assert [round(d, 2) for d in paired(ROWS, "LayerAtt→CLS", CONTROL, "paper_exact")] == [0.5, -0.2]
    assert [round(d, 2) for d in paired(ROWS, "LayerAtt→CLS", STOCK, "heldout_exact")] == [-0.3, 0.4]
    # a seed the base lacks is not paired with anything
    extra = ROWS + [row("LayerAtt→CLS", 3, 74.0, 72.0)]
    assert len(paired(extra, "LayerAtt→CLS", CONTROL, "paper_exact")) == 2
    assert len(paired(extra, "LayerAtt→CLS", STOCK, "paper_exact")) == 3


def test_render_lists_cost_and_load_per_seed_and_every_run() -> None:
    md = render(ROWS, "python bench/quora_experiment.py --x")
    lines = md.splitlines()
    control = next(x for x in lines if x.startswith(f"| {CONTROL} | 1,2 |"))
    # the training cost of two seeds run under different load is listed, not averaged
    assert "| 250, 500 | 3432, 12244 | 1.97/2.02/2.20; 4.11/3.00/2.79 |" in control
    assert "73.20 ± 0.28" in control
    assert "| LayerAtt→CLS | 2 | 73.20 | 72.70 | 71.90 | 71.40 |" in md
    # a run's cost is shown with the load before and after it (other work sharing the cores slows it)
    assert "| 375 | 5871 | 1.00/1.89/2.03 → 3.08/3.89/4.37 |" in md
    delta = next(x for x in lines if x.startswith(f"| LayerAtt→CLS | {CONTROL} | paper_exact |"))
    assert "+0.50, -0.20" in delta and delta.endswith("| no |")
    delta = next(x for x in lines if x.startswith(f"| LayerAtt→CLS | {CONTROL} | heldout_exact |"))
    assert "+0.20, +0.30" in delta and delta.endswith("| yes |")
    # a served [CLS] is paired with the stock [CLS] too; the control (a trained [CLS]) is, the token mean is not
    assert f"| LayerAtt→CLS | {STOCK_CLS} | paper_exact | +4.45 ± 0.21 |" in md
    assert f"| {CONTROL} | {STOCK_CLS} |" in md
    assert f"| mean→mean | {STOCK} | paper_exact |" in md
    assert not [x for x in lines if x.startswith((f"| mean→mean | {STOCK_CLS} |", f"| {STOCK} | {STOCK_CLS} |"))]


def test_render_cli_rewrites_the_table_beside_the_rows(tmp_path: Path) -> None:
    rows_file = tmp_path / "quora-experiment-x.jsonl"
    rows_file.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    assert main(["--render", str(rows_file)]) == 0
    md = rows_file.with_suffix(".md").read_text()
    assert f"--render {rows_file}" in md and "| LayerAtt→CLS | 1 | 73.50 |" in md


@pytest.mark.parametrize("option", ["--render", "--resume"])
@pytest.mark.parametrize(("second_line", "reason"), [
    ('{"arm": "control CLS+MLP", "seed": 1', "line 2: not JSON"),
    ('["control CLS+MLP", 1]', 'line 2: a row needs an "arm" (text) and a "seed" (integer)'),
    ('{"arm": "control CLS+MLP", "seed": "1"}', 'line 2: a row needs an "arm"'),
])
def test_a_bad_rows_file_is_a_one_line_error_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, second_line: str, reason: str
) -> None:
    rows_file = tmp_path / "quora-experiment-x.jsonl"
    rows_file.write_text(json.dumps(ROWS[0]) + "\n" + second_line + "\n")
    with pytest.raises(SystemExit) as exit_:
        main([option, str(rows_file)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and f"error: {rows_file}, {reason}" in err and "Traceback" not in err
    assert not rows_file.with_suffix(".md").exists()  # nothing half-written beside it


def test_a_missing_rows_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--render", str(tmp_path / "absent.jsonl")])
    assert exit_.value.code == 2
    assert f"error: {tmp_path / 'absent.jsonl'}: cannot read the rows file (No such file or directory)" in (
        capsys.readouterr().err)
