// Strata's search page: POST /search (or /collections/NAME/search), GET /stats, /ready and /collections, nothing else. No libraries and no build step. Every text that
// comes from the server is set with textContent (never innerHTML): a document's text cannot become markup.
"use strict";

(() => {
  const KEY_STORAGE = "strata.apiKey"; // sessionStorage only: the key dies with the tab
  const STATS_EVERY_MS = 5000;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);

  const state = {
    key: sessionStorage.getItem(KEY_STORAGE) || "",
    authRequired: false,
    pending: null, // the search to run again once a key is given
    stats: null,
    collections: [], // GET /collections: those this key may read
    windowIndex: 0,
  };

  // -- HTTP -------------------------------------------------------------------------------------------------
  function headers(withBody) {
    const h = { Accept: "application/json" };
    if (withBody) h["Content-Type"] = "application/json";
    if (state.key) h.Authorization = "Bearer " + state.key;
    return h;
  }

  async function call(method, path, body) {
    let response;
    try {
      response = await fetch(path, {
        method,
        headers: headers(body !== undefined),
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (err) {
      return { ok: false, status: 0, error: "The server did not answer. Is it running?" };
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (response.ok) return { ok: true, status: response.status, data };
    return { ok: false, status: response.status, data, error: describe(response, data) };
  }

  // The `detail` of an error body: a sentence, or FastAPI's list of validation errors.
  function detail(data) {
    if (!data || data.detail === undefined) return "";
    const d = data.detail;
    if (typeof d === "string") return d;
    if (Array.isArray(d)) {
      return d.map((e) => {
        const where = (e.loc || []).filter((part) => part !== "body").join(".");
        return (where ? where + ": " : "") + (e.msg || "");
      }).join("; ");
    }
    return JSON.stringify(d);
  }

  function describe(response, data) {
    const why = detail(data);
    switch (response.status) {
      case 401:
        return state.key ? "The API key was refused (" + why + "). Enter another one."
          : "This server needs an API key.";
      case 403:
        return "This API key may not do that: " + why;
      case 413:
        return "The request is too large: " + why;
      case 422:
        return "The server cannot take this search: " + why;
      case 429: {
        const after = response.headers.get("Retry-After");
        return "The server is busy" + (after ? "; try again in " + after + " s" : "") + ". (" + why + ")";
      }
      case 503:
        return "The index is not ready: " + why.replace(/^not ready: /, "") + ". Try again in a moment.";
      case 504:
        return "The search took too long: " + why;
      default:
        return "The server answered " + response.status + (why ? ": " + why : ".");
    }
  }

  // -- messages and the key ---------------------------------------------------------------------------------
  function showMessage(text, status) {
    const box = $("message");
    box.textContent = text;
    box.dataset.status = String(status);
    box.hidden = false;
  }

  function hideMessage() {
    const box = $("message");
    box.hidden = true;
    box.textContent = "";
    delete box.dataset.status;
  }

  function askForKey(text) {
    $("key-message").textContent = text;
    $("key-form").hidden = false;
    $("api-key").value = "";
    $("api-key").focus();
  }

  function showKeyState() {
    $("key-state").hidden = !state.key;
  }

  function useKey(event) {
    event.preventDefault();
    const key = $("api-key").value.trim();
    if (!key) {
      $("api-key").focus();
      return;
    }
    state.key = key;
    sessionStorage.setItem(KEY_STORAGE, key);
    $("key-form").hidden = true;
    hideMessage();
    showKeyState();
    refreshStats();
    loadCollections();
    if (state.pending) {
      const again = state.pending;
      state.pending = null;
      runSearch(again.query, again.topK, again.mode);
    } else {
      $("query").focus();
    }
  }

  function forgetKey() {
    state.key = "";
    sessionStorage.removeItem(KEY_STORAGE);
    showKeyState();
    if (state.authRequired) askForKey("This server needs an API key.");
  }

  // -- search -----------------------------------------------------------------------------------------------
  function fmtMs(ms) {
    if (ms === null || ms === undefined) return "–";
    return ms < 10 ? ms.toFixed(2) : ms < 100 ? ms.toFixed(1) : ms.toFixed(0);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // The server's snippet is HTML: the passage escaped, the query's terms in <mark>. It is not parsed as markup:
  // split at the <mark> tags, each piece unescaped and set as text, so nothing else in it can become an element.
  const ENTITIES = { "&amp;": "&", "&lt;": "<", "&gt;": ">", "&quot;": '"', "&#x27;": "'" };
  function unescapeText(text) {
    return text.replace(/&(amp|lt|gt|quot|#x27);/g, (m) => ENTITIES[m]);
  }

  function snippetNode(snippet) {
    const node = el("p", "hit-text hit-snippet");
    snippet.split(/(<mark>[^<]*<\/mark>)/).forEach((piece) => {
      const marked = /^<mark>([^<]*)<\/mark>$/.exec(piece);
      if (marked) node.append(el("mark", "", unescapeText(marked[1])));
      else if (piece) node.append(document.createTextNode(unescapeText(piece)));
    });
    return node;
  }

  function renderHits(hits) {
    const list = $("hits");
    list.replaceChildren();
    for (const hit of hits) {
      const item = el("li", "hit");
      const p = hit.passage;
      item.append(p && typeof p.snippet === "string" ? snippetNode(p.snippet) : el("p", "hit-text", hit.text));
      const meta = el("p", "hit-meta");
      meta.append(el("span", "score", "score " + Number(hit.score).toFixed(3)),
        el("span", "hit-id", "id " + String(hit.id)));
      if (p) {
        meta.append(el("span", "hit-passage", "passage " + (Number(p.index) + 1) + " of " + Number(p.count) +
          " · characters " + Number(p.start) + "–" + Number(p.end)));
      }
      item.append(meta);
      if (hit.metadata && typeof hit.metadata === "object" && Object.keys(hit.metadata).length) {
        const dl = el("dl", "metadata");
        for (const [name, value] of Object.entries(hit.metadata)) {
          const shown = typeof value === "string" ? value : JSON.stringify(value);
          const pair = el("div");
          pair.append(el("dt", "", name), el("dd", "", shown));
          dl.append(pair);
        }
        item.append(dl);
      }
      list.append(item);
    }
  }

  async function runSearch(query, topK, mode) {
    const button = $("search-button");
    button.disabled = true;
    $("hits").setAttribute("aria-busy", "true");
    $("summary").textContent = "Searching…";
    hideMessage();
    const started = performance.now();
    const request = { query, top_k: topK };
    if (mode) request.mode = mode; // none: the index's default mode
    const collection = $("collection").value;
    const path = collection ? "/collections/" + encodeURIComponent(collection) + "/search" : "/search";
    const result = await call("POST", path, request);
    const roundTrip = performance.now() - started;
    button.disabled = false;
    $("hits").removeAttribute("aria-busy");
    if (!result.ok) {
      renderHits([]);
      $("summary").textContent = "";
      showMessage(result.error, result.status);
      if (result.status === 401) {
        state.authRequired = true;
        state.pending = { query, topK, mode };
        askForKey(result.error);
      }
      return;
    }
    const body = result.data;
    renderHits(body.hits || []);
    const n = (body.hits || []).length;
    const st = body.stages || {};
    const stages = [["encode", st.encode_ms], ["dense", st.dense_ms], ["lexical", st.lexical_ms],
      ["fusion", st.fusion_ms], ["lookup", st.lookup_ms]].filter(([, ms]) => ms > 0)
      .map(([name, ms]) => name + " " + fmtMs(ms) + " ms").join(", ");
    $("summary").textContent = n + (n === 1 ? " hit" : " hits") + " · " + (body.mode || "dense") + " · " +
      fmtMs(body.took_ms) + " ms on the server (" + stages + "), " + fmtMs(roundTrip) +
      " ms round trip · " + (collection ? "collection " + collection + " · " : "") + "version " +
      body.index_version +
      (body.truncated ? " · query cut to the model's token limit" : "");
    setTimeout(refreshStats, 300);
  }

  function onSearch(event) {
    event.preventDefault();
    const form = $("search-form");
    if (!form.reportValidity()) return;
    runSearch($("query").value, Number($("top-k").value), $("mode").value);
  }

  // -- the collections (a selector when the server serves more than one this key may read) ----------------------
  async function loadCollections() {
    const result = await call("GET", "/collections");
    if (!result.ok) return; // no key yet (401): loaded again once one is given
    const list = result.data.collections || [];
    state.collections = list;
    const select = $("collection");
    const keep = select.value;
    select.replaceChildren();
    for (const c of list) {
      const docs = c.documents === null || c.documents === undefined ? "" : " · " + c.documents + " docs";
      const option = el("option", "", c.name + (c.default ? " (default)" : "") + docs);
      option.value = c.name;
      select.append(option);
    }
    const names = list.map((c) => c.name);
    select.value = names.includes(keep) ? keep : names.includes(result.data.default) ? result.data.default :
      names[0] || "";
    $("collection-field").hidden = list.length < 2;
    showModes();
  }

  // -- the index card and the chart -------------------------------------------------------------------------
  function fact(list, name, value) {
    const pair = el("div");
    pair.append(el("dt", "", name), el("dd", "", value));
    list.append(pair);
  }

  function fixed(value, digits) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(digits);
  }

  function renderIndex(stats) {
    const facts = $("index-facts");
    facts.replaceChildren();
    const index = stats.index;
    const stateLine = $("index-state");
    if (!stats.ready || !index) {
      stateLine.textContent = "Not ready: " + (stats.reason || "no index loaded");
      stateLine.dataset.ready = "false";
      return;
    }
    stateLine.textContent = "Ready";
    stateLine.dataset.ready = "true";
    const model = index.model.split(/[\\/]/).filter(Boolean).pop() || index.model;
    fact(facts, "Version", index.version);
    fact(facts, "Documents", index.documents.toLocaleString("en") + (index.passages === null ||
      index.passages === undefined ? "" : " · " + index.passages.toLocaleString("en") + " passages"));
    fact(facts, "Encoder", model + " · " + index.pooling + " pooling · " + index.dim + " dims");
    fact(facts, "MRR@10", fixed(index.mrr_at_10, 3) + (index.exact_mrr_at_10 !== null &&
      index.exact_mrr_at_10 !== undefined ? " (exact search " + fixed(index.exact_mrr_at_10, 3) + ")" : ""));
    fact(facts, "Recall@10", fixed(index.recall_at_10, 3));
    if (index.report_state === "pending" || index.report_state === "running") {
      // the build published before its report: the gate's figures so far, exact search and the modes to come
      fact(facts, "Evaluation", "report " + index.report_state + " (served meanwhile)");
    } else if (index.report_state === "failed") {
      fact(facts, "Evaluation", "report failed (see /ready)");
    }
    if (index.kind === "flat") {
      fact(facts, "Index", "flat (exact search)");
    } else if (index.kind === "hnsw") {
      fact(facts, "Index", "hnsw · ef_search " + index.search_params.ef_search);
    } else {
      fact(facts, "nprobe", index.nprobe + " of " + index.nlist + " lists");
    }
    const lex = index.lexical;
    fact(facts, "Lexical", lex ? "BM25 k1 " + lex.k1 + " b " + lex.b + " · " + lex.engine + " · stemmer " +
      lex.stemmer + " · stopwords " + lex.stopwords : "none (dense only)");
    fact(facts, "Default mode", index.default_mode || "dense");
    showModes();
  }

  // The modes the chosen collection takes. The index card (/stats) describes the default collection: its lexical
  // index and default mode apply to it only. Another collection's default mode comes from /collections; whether
  // it has a lexical index is not listed there, so every mode is offered and the server says when one is not.
  function showModes() {
    const chosen = $("collection").value;
    const listed = state.collections.find((c) => c.name === chosen);
    const index = state.stats && state.stats.index;
    const isDefault = !listed || listed.default;
    const lex = isDefault ? !index || Boolean(index.lexical) : true;
    const mode = isDefault ? index && index.default_mode : listed.default_mode;
    const select = $("mode");
    for (const option of select.options) {
      // lexical and hybrid need the version's lexical index
      option.disabled = !lex && (option.value === "lexical" || option.value === "hybrid");
    }
    if (select.selectedOptions.length && select.selectedOptions[0].disabled) select.value = "";
    select.options[0].textContent = "Index default (" + (mode || "dense") + ")";
  }

  function renderLive(stats) {
    const w = stats.windows[state.windowIndex] || stats.windows[0];
    $("live-caption").textContent = w.seconds >= 120 ? "Last " + w.seconds / 60 + " minutes" : "Last minute";
    const body = $("live-table").tBodies[0];
    body.replaceChildren();
    for (const [name, part] of [["total", w.total_ms], ["encode", w.encode_ms], ["search", w.search_ms]]) {
      const row = el("tr");
      const head = el("th", "", name);
      head.scope = "row";
      row.append(head, el("td", "", fmtMs(part.p50)), el("td", "", fmtMs(part.p95)), el("td", "", fmtMs(part.p99)));
      body.append(row);
    }
    $("live-rate").textContent = countOf(w.requests, "request") + ", " + fmtRate(w.requests_per_s) + " requests/s";
    const modes = w.modes || {};
    $("live-modes").textContent = "By mode: " + ["dense", "lexical", "hybrid"]
      .map((m) => m + " " + (modes[m] || 0)).join(" · ");
  }

  function svg(tag, attrs) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
    return node;
  }

  // A round axis maximum: 1, 2 or 5 times a power of ten, at least `value`.
  function niceMax(value) {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  }

  function renderChart(stats) {
    const chart = $("chart");
    for (const node of Array.from(chart.childNodes)) {
      if (node.nodeName !== "title" && node.nodeName !== "desc") node.remove();
    }
    const points = stats.series;
    const left = 36, right = 290, top = 22, bottom = 130;
    const width = right - left, height = bottom - top;
    const latencies = points.flatMap((p) => [p.p50_ms, p.p95_ms]).filter((v) => v !== null);
    const msMax = niceMax(Math.max(0, ...latencies));
    const rpsMax = niceMax(Math.max(0, ...points.map((p) => p.requests_per_s)));
    const slot = width / Math.max(points.length, 1);
    const x = (i) => left + slot * (i + 0.5);
    const yMs = (v) => bottom - (v / msMax) * height;
    const yRps = (v) => bottom - (v / rpsMax) * height;

    // requests/s as bars behind the latency lines
    points.forEach((p, i) => {
      if (p.requests_per_s > 0) {
        const y = yRps(p.requests_per_s);
        chart.append(svg("rect", { class: "bar", x: x(i) - slot * 0.35, y, width: slot * 0.7, height: bottom - y }));
      }
    });
    for (const f of [0, 0.5, 1]) {
      const y = bottom - f * height;
      chart.append(svg("line", { class: "grid", x1: left, x2: right, y1: y, y2: y }));
      const ms = svg("text", { class: "axis ms", x: left - 4, y: y + 3, "text-anchor": "end" });
      ms.textContent = fmtTick(f * msMax, msMax / 2);
      const rps = svg("text", { class: "axis rps", x: right + 4, y: y + 3, "text-anchor": "start" });
      rps.textContent = fmtTick(f * rpsMax, rpsMax / 2);
      chart.append(ms, rps);
    }
    for (const [key, cls] of [["p95_ms", "line p95"], ["p50_ms", "line p50"]]) {
      let d = "", pen = "M";
      points.forEach((p, i) => {
        if (p[key] === null) {
          pen = "M"; // a step without requests breaks the line
          return;
        }
        d += pen + x(i).toFixed(1) + " " + yMs(p[key]).toFixed(1) + " ";
        pen = "L";
      });
      if (d) chart.append(svg("path", { class: cls, d }));
      points.forEach((p, i) => {
        const prev = points[i - 1], next = points[i + 1];
        const alone = p[key] !== null && (!prev || prev[key] === null) && (!next || next[key] === null);
        if (alone) chart.append(svg("circle", { class: cls, cx: x(i), cy: yMs(p[key]), r: 1.8 }));
      });
    }
    const span = Math.round((points.length * stats.series_step_s) / 60);
    const from = svg("text", { class: "axis", x: left, y: bottom + 14, "text-anchor": "start" });
    from.textContent = "−" + span + " min";
    const now = svg("text", { class: "axis", x: right, y: bottom + 14, "text-anchor": "end" });
    now.textContent = "now";
    const unitMs = svg("text", { class: "axis", x: left - 4, y: top - 10, "text-anchor": "end" });
    unitMs.textContent = "ms";
    const unitRps = svg("text", { class: "axis", x: right + 4, y: top - 10, "text-anchor": "start" });
    unitRps.textContent = "req/s";
    chart.append(from, now, unitMs, unitRps);
    const w = stats.windows[stats.windows.length - 1];
    $("chart-desc").textContent = w.requests
      ? "Over the last " + w.seconds / 60 + " minutes: " + countOf(w.requests, "request") + ", p50 " +
        fmtMs(w.total_ms.p50) +
        " ms, p95 " + fmtMs(w.total_ms.p95) + " ms."
      : "No requests in the last " + w.seconds / 60 + " minutes.";
  }

  // A tick label with as many decimals as the ticks' step needs (0.005 apart: three), so that no two ticks of
  // an axis read the same; trailing zeros dropped.
  function fmtTick(v, step) {
    let digits = 0;
    while (digits < 6 && Math.abs(step * 10 ** digits - Math.round(step * 10 ** digits)) > 1e-9) digits++;
    return String(Number(v.toFixed(digits)));
  }

  function countOf(n, noun) {
    return n.toLocaleString("en") + " " + noun + (n === 1 ? "" : "s");
  }

  // Requests per second with two significant digits below 1 (0.017, not 0.02 for one request a minute).
  function fmtRate(v) {
    return v >= 1 || v === 0 ? v.toFixed(2) : String(Number(v.toPrecision(2)));
  }

  // -- the background training (`demo`): its stage and the ETA of the whole chain, from /ready -----------------
  function fmtDuration(seconds) {
    const s = Math.round(seconds);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + String(s % 60).padStart(2, "0") + " s";
    return Math.floor(s / 3600) + " h " + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + " min";
  }

  function renderTraining(ready) {
    const box = $("training");
    const t = ready && ready.training;
    if (!t) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    const facts = $("training-facts");
    facts.replaceChildren();
    const number = t.stage_number ? " (" + t.stage_number + "/" + t.stages_total + ")" : "";
    fact(facts, "Stage", t.stage + number);
    if (t.progress) fact(facts, "Progress", t.progress);
    else if (t.total_steps) fact(facts, "Progress", t.step.toLocaleString("en") + "/" +
      t.total_steps.toLocaleString("en") + " " + (t.unit || "steps"));
    if (t.eta_s !== null && t.eta_s !== undefined && t.stage !== "done" && t.stage !== "failed") {
      const end = t.eta_at ? new Date(t.eta_at).toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" })
        : "";
      fact(facts, "ETA", fmtDuration(t.eta_s) + " for the whole chain" + (end ? " (about " + end + ")" : ""));
    }
    if (t.swap && t.swap.outcome !== "pending") {
      const at = t.swap.at ? new Date(t.swap.at).toLocaleTimeString("en-GB") : "";
      fact(facts, "Swap", t.swap.outcome === "swapped" ? "swapped to " + t.swap.version + (at ? " at " + at : "")
        : "refused " + t.swap.version + ": " + (t.swap.reason || ""));
    }
    $("training-message").textContent = t.message || "";
  }

  async function refreshTraining() {
    const result = await call("GET", "/ready");
    if (result.ok || result.status === 503) renderTraining(result.data);
  }

  async function refreshStats() {
    const result = await call("GET", "/stats");
    if (!result.ok) {
      $("index-state").textContent = result.error;
      if (result.status === 401 && $("key-form").hidden) askForKey(result.error);
      return;
    }
    const stats = result.data;
    state.stats = stats;
    state.authRequired = stats.auth_required;
    if (stats.auth_required && !state.key && $("key-form").hidden) askForKey("This server needs an API key.");
    renderIndex(stats);
    renderLive(stats);
    renderChart(stats);
    refreshTraining();
  }

  function pollStats() {
    if (document.visibilityState === "visible") refreshStats();
  }

  // -- wiring -----------------------------------------------------------------------------------------------
  document.addEventListener("DOMContentLoaded", () => {
    $("search-form").addEventListener("submit", onSearch);
    $("key-form").addEventListener("submit", useKey);
    $("forget-key").addEventListener("click", forgetKey);
    $("collection").addEventListener("change", showModes);
    for (const radio of document.querySelectorAll('input[name="window"]')) {
      radio.addEventListener("change", () => {
        state.windowIndex = Number(radio.value);
        if (state.stats) renderLive(state.stats);
      });
    }
    document.addEventListener("keydown", (event) => {
      const typing = event.target instanceof HTMLInputElement || event.target instanceof HTMLTextAreaElement;
      if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
        event.preventDefault();
        $("query").focus();
        $("query").select();
      }
    });
    document.addEventListener("visibilitychange", pollStats);
    showKeyState();
    refreshStats();
    loadCollections();
    setInterval(pollStats, STATS_EVERY_MS);
  });
})();
