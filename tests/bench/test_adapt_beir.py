"""bench/adapt_beir.py's reading of its results: what each gate rule would have written, from the recorded dev gain
and the evaluated rows (the arm itself, or the refused selected checkpoint's `ungated (best …)` row)."""

from __future__ import annotations

from bench.adapt_beir import render, verdict, would_adapt, written_by


def arm(name: str, *, adapted: bool, best_step: int, delta: float, ci: tuple[float, float], dense: list[float],
        rule: str = "significant") -> dict[str, object]:
    gate = {"rule": rule, "adapted": adapted, "delta": delta, "ci": list(ci), "items": 100, "resamples": 2000}
    return {"arm": name, "adaptation": {"adapted": adapted, "best_step": best_step, "stock_score": 80.0,
                                        "best_score": 80.0 + delta, "gate": gate},
            "ci_dense": dense, "ci_hybrid": [0.0, 0.0, 0.0], "dense": {"ndcg_at_10": 70.0}, "hybrid": {}}


def test_each_gate_rule_is_read_from_the_recorded_gain() -> None:
    clear = arm("crops:1", adapted=True, best_step=25, delta=2.0, ci=(0.5, 3.5), dense=[1.5, 0.2, 2.8])
    small = arm("crops:2", adapted=False, best_step=25, delta=0.3, ci=(-0.9, 1.4), dense=[0.0, 0.0, 0.0])
    refused = {"arm": "crops:2 ungated (best, step 25)", "ci_dense": [-0.6, -1.1, -0.1], "dense": {}, "hybrid": {}}
    dropped = arm("crops:3", adapted=False, best_step=0, delta=0.0, ci=(0.0, 0.0), dense=[0.0, 0.0, 0.0])
    res = {"dataset": "nfcorpus", "split": {"selection": "s", "corpus": "c", "eval_queries": 1, "dev_queries": 1},
           "arms": [clear, small, refused, dropped]}
    assert [would_adapt(a["adaptation"], "significant") for a in (clear, small, dropped)] == [True, False, False]
    assert [would_adapt(a["adaptation"], "better") for a in (clear, small, dropped)] == [True, True, False]
    assert written_by(res, small, "better") is refused and written_by(res, small, "significant") is None
    assert written_by(res, clear, "better") is clear
    text = verdict({"datasets": [res]})
    assert "- `crops`, gate `significant`: adapts in 1 of 3 runs (nfcorpus 1: +1.50*); stock elsewhere." in text
    assert ("- `crops`, gate `better`: adapts in 2 of 3 runs (nfcorpus 1: +1.50*, nfcorpus 2: -0.60*); stock "
            "elsewhere.") in text
    table = render({"stamp": "t", "command": "c", "machine": "m", "settings": "s", "bootstrap": 2000,
                    "datasets": [res]})
    assert "| crops:2 | kept stock (`better`: adapt) | 80.0 → 80.3 (25) | +0.30 [-0.90, +1.40] |" in table
