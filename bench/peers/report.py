"""The Markdown of a `bench/compare.py` run: the issue's targets first (met or not, and where the time goes when
not), then each part's table with Strata/peer ratios."""

from __future__ import annotations

from typing import Any

from bench.common import safe_ratio

STRATA = "Strata"


def table(head: list[str], rows: list[list[Any]]) -> str:
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join("–" if c is None else str(c) for c in r) + " |" for r in rows)])


def _http(res: dict[str, Any], server_prefix: str, kind: str, clients: int) -> dict[str, Any] | None:
    return next((r for r in res.get("http", []) if r["server"].startswith(server_prefix) and r["kind"] == kind
                 and r["clients"] == clients), None)


def _enc(res: dict[str, Any], name_prefix: str) -> dict[str, Any] | None:
    return next((r for r in res.get("encoding", {}).get("rows", []) if r["encoder"].startswith(name_prefix)), None)


def _took(res: dict[str, Any], kind: str) -> Any:
    b = res.get("strata_breakdown") or {}
    return b.get("server_took_ms_p50" if kind == "search" else "encode_request_took_ms_p50")


def _client(res: dict[str, Any], kind: str) -> Any:
    b = res.get("strata_breakdown") or {}
    return b.get("client_ms_p50" if kind == "search" else "encode_request_client_ms_p50")


def targets(res: dict[str, Any]) -> list[list[Any]]:
    """[target, measured, met, note] rows; met is None where a side was not measured."""
    out: list[list[Any]] = []
    serving_enc = _enc(res, "Strata int8") or _enc(res, "Strata fp32")

    s1 = _http(res, STRATA, "search", 1)
    if s1:
        b = res.get("strata_breakdown") or {}
        note = ""
        if s1["p50_ms"] > 3 and b:
            rest = round(b["server_took_ms_p50"] - b["encode_ms_p50"] - b["search_ms_p50"], 2)
            note = (f"sequential requests: the client waits {b['client_ms_p50']} ms (p50), the server's took_ms is "
                    f"{b['server_took_ms_p50']}: encode {b['encode_ms_p50']}, FAISS search {b['search_ms_p50']}, "
                    f"{rest} in the server outside those two (queue hand-off, document fetch, response model); "
                    f"the other {round(b['client_ms_p50'] - b['server_took_ms_p50'], 2)} ms are HTTP, JSON and the "
                    "client, on the same 2 loaded cores")
        out.append(["`/search` p50 ≤ 3 ms at 1 client", f"{s1['p50_ms']} ms", s1["p50_ms"] <= 3, note])

    for kind in ("search", "encode"):
        s32 = _http(res, STRATA, kind, 32)
        if s32 and serving_enc:
            share = safe_ratio(s32["rps"], serving_enc["sentences_per_s_b64"])
            note = ""
            if share is not None and share < 0.9:
                note = (f"one text per request: each request pays HTTP + JSON + scheduling on cores the encoder "
                        f"and the load generator share; {serving_enc['encoder']} alone encodes "
                        f"{serving_enc['sentences_per_s_b64']} sent/s at batch 64")
            out.append([f"`/{kind}` req/s at 32 clients ≥ 90 % of the encoder's batch-64 rate",
                        f"{s32['rps']} req/s = {share:.0%}" if share is not None else "–",
                        None if share is None else share >= 0.9, note])

    for peer, kinds in (("infinity-emb", ("encode",)), ("txtai", ("encode", "search"))):
        for kind in kinds:
            s8, p8 = _http(res, STRATA, kind, 8), _http(res, peer, kind, 8)
            if s8 is None or p8 is None:
                out.append([f"≥ 2× {peer}'s req/s at 8 clients, `/{kind}`-equivalent", "not measured", None, ""])
                continue
            r = safe_ratio(s8["rps"], p8["rps"])
            note = ""
            if r is not None and r < 2:
                note = (f"Strata p50 {s8['p50_ms']} ms vs {p8['p50_ms']} ms at 8 clients; at 1 client Strata's "
                        f"`/{kind}` took {_took(res, kind)} ms in the server of the client's {_client(res, kind)} ms")
            out.append([f"≥ 2× {peer}'s req/s at 8 clients, `/{kind}`-equivalent",
                        f"{r}× ({s8['rps']} vs {p8['rps']})" if r is not None else "not measured",
                        None if r is None else r >= 2, note])

    for q in ("fp32", "int8"):
        s, f = _enc(res, f"Strata {q}"), _enc(res, f"fastembed on Strata's {q}")
        r = safe_ratio(s["sentences_per_s_b64"], f["sentences_per_s_b64"]) if s and f else None
        out.append([f"encoder ≥ 1.5× fastembed on the same {q} encoder.onnx (batch 64)",
                    f"{r}×" if r is not None else "not measured", None if r is None else r >= 1.5, ""])

    i8, f32 = _enc(res, "Strata int8"), _enc(res, "Strata fp32")
    if i8 and f32:
        det = i8["repeat_bitwise_equal"]
        out.append(["int8 deterministic (same texts twice: bitwise equal; batch 1 vs 64)",
                    f"repeat equal: {det}; batch 1 vs 64 max |Δ| {i8['batch1_vs_batch64_max_abs_diff']:.2e}", det, ""])
        gate = (res["models"].get("int8") or {}).get("quality_gate") or {}
        if gate:
            drops = {k: gate[k] for k in ("mrr_drop", "stsb_drop") if k in gate}
            ok = all(v <= gate.get("max_drop", 0.5) for v in drops.values())
            out.append(["int8 within the export's quality gate",
                        ", ".join(f"{k} {v}" for k, v in drops.items()) + f" (max {gate.get('max_drop')})", ok, ""])
        r = safe_ratio(i8["sentences_per_s_b64"], f32["sentences_per_s_b64"])
        details = (res["models"].get("int8") or {}).get("quantization_details") or {}
        note = ""
        if r is not None and r < 1.8 and details.get("float_ops"):
            note = f"still float in the int8 graph: {details['float_ops']}"
        out.append(["int8 ≥ 1.8× fp32 sentences/s (batch 64)", f"{r}×", None if r is None else r >= 1.8, note])
    return out


def render(res: dict[str, Any]) -> str:
    mark = {True: "yes", False: "**no**", None: "–"}
    lines = [
        f"# Strata and its peers side by side, {res['finished_at']}",
        "",
        f"Command: `{res['command']}` ({res['wall_min']} min)  ",
        f"Machine: {res['cores']} cores, shared; load average (1/5/15 min) {res['loadavg_start']} at start, "
        f"{res['loadavg_end']} at end. Rounds are interleaved across systems (A B C … A B C …, "
        f"{res['rounds']} rounds); figures are medians over rounds, so the ratios are what to read.",
        "",
        "Models: " + "; ".join(f"{k}: `{v['dir']}` ({v.get('quantization') or 'fp32'})"
                               for k, v in res["models"].items()),
        "",
        "Peer versions (each group in its own venv under bench/.venv-peers/): "
        + "; ".join(f"{name}: " + ", ".join(f"{k} {v}" for k, v in vers.items())
                    for name, vers in res["peer_versions"].items()),
        "",
        "## Targets",
        "",
        table(["target", "measured", "met", "where the time goes"],
              [[t, m, mark[ok], n] for t, m, ok, n in targets(res)]),
    ]
    if res.get("notes"):
        lines += ["", *(f"- {n}" for n in res["notes"])]
    if "encoding" in res:
        e = res["encoding"]
        base = e["rows"][0]["sentences_per_s_b64"] if e["rows"] else None
        lines += ["", f"## 1. Encoding ({e['texts']} Quora questions per round, {e['threads']} threads each, "
                  f"{e['rounds']} rounds; one-text latency over {e['single']} calls per round)", "",
                  table(["encoder", "sent/s b64", "× ST torch", "rounds", "one text p50 ms", "p99 ms",
                         "min cos vs ST torch", "repeat bitwise equal", "b1 vs b64 max abs Δ"],
                        [[r["encoder"], r["sentences_per_s_b64"], safe_ratio(r["sentences_per_s_b64"], base),
                          " / ".join(map(str, r["rounds_b64"])), r["single_p50_ms"], r["single_p99_ms"],
                          r["min_cosine_vs_ref"], r["repeat_bitwise_equal"],
                          f"{r['batch1_vs_batch64_max_abs_diff']:.1e}"] for r in e["rows"]])]
    if "retrieval" in res:
        r = res["retrieval"]
        lines += ["", f"## 2. Retrieval (paper protocol, {r['rows_read']:,} rows: {r['docs']:,} documents; "
                  f"{r['queries']:,} of {r['queries_total']:,} queries, seed 0; single queries, 1 thread)", "",
                  table(["index", "search", "ms/query", "× faster than exact", "MRR@10", "Δ vs exact",
                         "Recall@10 vs exact", "MB", "build s"],
                        [[x["index"], x["search"], x["ms_per_query"], x["speedup_vs_exact"], x["mrr_at_10"],
                          x["mrr_vs_exact"], x["recall_vs_exact"], x["memory_mb"], x["build_s"]] for x in r["rows"]])]
    if "http" in res:
        lines += ["", "## 3. Serving over HTTP on 127.0.0.1 (one text per request; the load generator shares the "
                  f"cores; {res['seconds']:.0f} s per round)", ""]
        b = res["builds"].get("serving", {})
        lines += [f"Corpus: paper protocol, {b.get('rows', 0):,} rows, {b.get('docs', 0):,} documents; Strata "
                  f"{b.get('index')}; txtai: its own index of the same ids and texts "
                  f"({res['builds'].get('txtai', {}).get('config', {})}), built in "
                  f"{res['builds'].get('txtai', {}).get('seconds')} s. infinity-emb has no search: `/encode` only.", ""]
        if "int8" in res["models"]:
            lines += ["Strata serves its int8 export (its cosine to the fp32 reference is the quantization's, "
                      "inside the export's quality gate); the peers serve fp32.", ""]
        lines += [table(["server", "started in s", "min cos vs ST torch (256 queries)", "peak RSS GB (process tree)"],
                        [[s["name"], s["startup_s"], s.get("min_cosine_vs_ref", s.get("cosine_error")),
                          s.get("peak_rss_gb")] for s in res["servers"]])]
        if res.get("infinity_default_pooling"):
            lines += ["", f"infinity-emb with its default pooling (`auto`, no `--pooling-method`): "
                      f"{res['infinity_default_pooling']} — below 0.999 means it did not use this model's mean "
                      "pooling."]
        strata = {(r["kind"], r["clients"]): r for r in res["http"] if r["server"] == STRATA}
        rows = []
        for r in res["http"]:
            s = strata.get((r["kind"], r["clients"]))
            rows.append([r["server"], r["kind"], r["clients"], r["requests"], r["rps"],
                         " / ".join(map(str, r["rps_rounds"])), r["p50_ms"], r["p95_ms"], r["p99_ms"],
                         None if r["server"] == STRATA else safe_ratio(s["rps"], r["rps"]) if s else None,
                         None if r["server"] == STRATA else safe_ratio(r["p50_ms"], s["p50_ms"]) if s else None,
                         r["peak_rss_gb"]])
        rows.sort(key=lambda x: (x[1], x[2], x[0] != STRATA))
        lines += ["", table(["server", "request", "clients", "requests", "req/s", "rounds", "p50 ms", "p95 ms",
                             "p99 ms", "Strata req/s ×", "Strata p50 × faster", "peak RSS GB"], rows)]
        if res.get("strata_breakdown"):
            lines += ["", f"Strata `/search`, 1 client, sequential: {res['strata_breakdown']}"]
    if res.get("peer_errors"):
        lines += ["", "## Peers that failed", ""]
        for name, err in res["peer_errors"].items():
            lines += [f"**{name}**", "", "```", err, "```", ""]
    return "\n".join(lines) + "\n"
