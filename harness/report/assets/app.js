// harness report: draws the pages from the JSON data blocks of this file (or, under
// `harness view`, from the server's /api/ endpoints). Every string from a run is put in the
// page with textContent (never parsed as HTML) and links are built only from our own routes.
"use strict";
(function () {
  const state = {
    index: null,
    live: false,
    details: new Map(),
    tables: {},
    fingerprint: "",
    updated: null,
    connected: true,
  };
  const PAGE_SIZE = 100;
  const TEXT_STEP = 20000;
  const EVENT_STEP = 300;
  const DIFF_LINE_STEP = 2000;

  // ---------------------------------------------------------------- DOM helpers
  function append(el, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }

  function route(path) {
    return "#" + path;
  }

  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") el.className = value;
      else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
      else if (key === "href") el.setAttribute("href", safeHref(value));
      else el.setAttribute(key, String(value));
    }
    return append(el, kids);
  }

  // Only our own routes and API paths are ever link targets.
  function safeHref(value) {
    const text = String(value);
    if (text.startsWith("#/") || text.startsWith("/api/")) return text;
    return "#/";
  }

  const SVG_NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
    return append(el, kids);
  }

  function section(id, title, ...kids) {
    return h("section", { id: id, class: "card" }, h("h2", null, title), ...kids);
  }

  // A section whose drawing fails shows why instead of breaking the page.
  function guarded(id, title, draw) {
    try {
      return draw();
    } catch (err) {
      console.warn("harness report: section " + id + " failed", err);
      return section(id, title, h("p", { class: "warn" }, "This section could not be shown: " + err));
    }
  }

  // ---------------------------------------------------------------- formatting
  function isNum(x) {
    return typeof x === "number" && Number.isFinite(x);
  }
  const DASH = "\u2014";
  function num(x, digits) {
    return isNum(x) ? x.toFixed(digits === undefined ? 3 : digits) : DASH;
  }
  function pct(x) {
    return isNum(x) ? (x * 100).toFixed(1) + "%" : DASH;
  }
  function int(x) {
    return isNum(x) ? Math.round(x).toLocaleString("en-US") : DASH;
  }
  function secs(x) {
    if (!isNum(x)) return DASH;
    if (Math.abs(x) < 1) return (x * 1000).toFixed(0) + " ms";
    if (Math.abs(x) < 120) return x.toFixed(2) + " s";
    if (Math.abs(x) < 7200) return (x / 60).toFixed(1) + " min";
    return (x / 3600).toFixed(2) + " h";
  }
  function usd(x) {
    return isNum(x) ? "$" + x.toFixed(x >= 1 ? 2 : 4) : DASH;
  }
  const FORMATS = { number: (x) => num(x), percent: pct, count: int, usd: usd, seconds: secs };
  function bytes(x) {
    if (!isNum(x)) return DASH;
    if (x < 1024) return x + " B";
    if (x < 1048576) return (x / 1024).toFixed(1) + " KiB";
    return (x / 1048576).toFixed(1) + " MiB";
  }
  function when(x) {
    return typeof x === "string" ? x.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC") : DASH;
  }
  function plain(x) {
    if (x === null || x === undefined) return DASH;
    if (typeof x === "string") return x;
    if (isClip(x)) return x.$clip + "\u2026";
    if (typeof x === "number") return Number.isFinite(x) ? String(x) : DASH;
    try {
      return JSON.stringify(x);
    } catch (err) {
      return String(x);
    }
  }

  // ---------------------------------------------------------------- untrusted text
  // Control characters (ANSI escapes included), bidi overrides and invisible marks are
  // shown as escapes (\x1b, <U+202E>), so text cannot hide, colour or reorder what it says.
  const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;
  function escapeOf(ch) {
    const code = ch.charCodeAt(0);
    if (code <= 0xff) return "\\x" + code.toString(16).padStart(2, "0");
    return "<U+" + code.toString(16).toUpperCase().padStart(4, "0") + ">";
  }
  function visible(text) {
    return text.replace(HIDDEN, escapeOf);
  }
  // The same for blocks of text, with each escape marked so it differs from typed text.
  function visibleInto(el, text) {
    let last = 0;
    HIDDEN.lastIndex = 0;
    for (let m = HIDDEN.exec(text); m; m = HIDDEN.exec(text)) {
      if (m.index > last) el.append(document.createTextNode(text.slice(last, m.index)));
      el.append(h("span", { class: "ctl", title: "control character U+" + m[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, "0") }, escapeOf(m[0])));
      last = m.index + 1;
    }
    if (last < text.length) el.append(document.createTextNode(text.slice(last)));
  }
  function isClip(v) {
    return v !== null && typeof v === "object" && typeof v.$clip === "string";
  }
  function textOf(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "string") return v;
    if (isClip(v)) return v.$clip;
    try {
      return JSON.stringify(v, null, 2);
    } catch (err) {
      return String(v);
    }
  }

  // A block of untrusted text: drawn TEXT_STEP characters at a time, with a button for
  // more; a text the report clipped says how big it really was.
  function textBlock(value, opts) {
    const options = opts || {};
    const full = textOf(value);
    const pre = h("pre", { class: "text" + (options.cls ? " " + options.cls : "") });
    const wrap = h("div", { class: "textblock" }, pre);
    let shown = 0;
    const more = h("button", { class: "more", type: "button" });
    function show(count) {
      const part = full.slice(shown, shown + count);
      visibleInto(pre, part);
      shown += part.length;
      if (shown < full.length) {
        more.textContent = "Show more (" + (full.length - shown).toLocaleString("en-US") + " more characters)";
      } else more.remove();
    }
    more.addEventListener("click", () => show(TEXT_STEP * 10));
    if (!full.length) pre.append(document.createTextNode(options.empty || "(empty)"));
    show(TEXT_STEP);
    if (shown < full.length) wrap.append(more);
    if (isClip(value)) {
      wrap.append(
        h(
          "p",
          { class: "clipped" },
          "Clipped by the report: " + int(value.total) + " " + (value.unit || "chars") + " in all, the first " +
            int(value.$clip.length) + " characters shown.",
          options.raw ? [" ", h("a", { href: options.raw, target: "_blank", rel: "noopener" }, "Open the whole file")] : null
        )
      );
    }
    return wrap;
  }

  function short(value, limit) {
    const text = visible(textOf(value));
    return text.length > limit ? text.slice(0, limit) + "\u2026" : text;
  }

  // ---------------------------------------------------------------- generic values
  function genericView(value, depth) {
    const d = depth || 0;
    if (value === null || value === undefined) return h("span", { class: "muted" }, DASH);
    if (typeof value === "string" || isClip(value)) {
      const text = textOf(value);
      return text.length > 120 || text.includes("\n") || isClip(value) ? textBlock(value) : h("span", null, visible(text));
    }
    if (typeof value !== "object") return h("span", null, plain(value));
    if (d > 3) return textBlock(JSON.stringify(value, null, 2));
    if (Array.isArray(value)) {
      if (!value.length) return h("span", { class: "muted" }, "(none)");
      if (value.every((v) => v !== null && typeof v === "object" && !Array.isArray(v) && !isClip(v))) {
        return objectTable(value, d);
      }
      if (value.every((v) => v === null || typeof v !== "object")) return h("span", null, visible(value.slice(0, 500).map(plain).join(", ")));
      return h("ul", { class: "plain" }, value.slice(0, 500).map((v) => h("li", null, genericView(v, d + 1))));
    }
    return kvTable(Object.entries(value).map(([k, v]) => [k, genericView(v, d + 1)]));
  }

  function objectTable(items, depth) {
    const keys = [];
    for (const item of items.slice(0, 500)) for (const k of Object.keys(item)) if (!keys.includes(k)) keys.push(k);
    const cols = keys.slice(0, 40);
    return h(
      "div",
      { class: "scroll-x" },
      h(
        "table",
        { class: "grid" },
        h("thead", null, h("tr", null, cols.map((k) => h("th", null, visible(k))))),
        h(
          "tbody",
          null,
          items.slice(0, 500).map((item) => h("tr", null, cols.map((k) => h("td", null, genericView(item[k], depth + 1)))))
        )
      ),
      items.length > 500 ? h("p", { class: "muted" }, (items.length - 500) + " more not shown") : null
    );
  }

  function kvTable(pairs) {
    return h(
      "table",
      { class: "kv" },
      h("tbody", null, pairs.map(([k, v]) => h("tr", null, h("th", null, visible(String(k))), h("td", null, v))))
    );
  }

  function flatten(obj, prefix, out) {
    for (const [k, v] of Object.entries(obj || {})) {
      const key = prefix ? prefix + "." + k : k;
      if (v !== null && typeof v === "object" && !Array.isArray(v) && !isClip(v) && Object.keys(v).length) flatten(v, key, out);
      else out.push([key, v]);
    }
    return out;
  }

  // ---------------------------------------------------------------- charts
  function lineChart(series, opts) {
    const W = 420, H = 220, L = 44, R = 12, T = 12, B = 34;
    const xs = series.flatMap((s) => s.points.map((p) => p[0]));
    const xMin = Math.min(...xs, 1), xMax = Math.max(...xs, 1);
    const span = xMax - xMin || 1;
    const x = (v) => L + ((v - xMin) / span) * (W - L - R) + (xMax === xMin ? (W - L - R) / 2 : 0);
    const y = (v) => T + (1 - v) * (H - T - B);
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "img", "aria-label": opts.label });
    for (const t of [0, 0.25, 0.5, 0.75, 1]) {
      root.append(svg("line", { x1: L, x2: W - R, y1: y(t), y2: y(t), class: "gridline" }));
      root.append(svg("text", { x: L - 6, y: y(t) + 4, class: "tick", "text-anchor": "end" }, (t * 100).toFixed(0) + "%"));
    }
    const step = Math.max(1, Math.ceil(span / 10));
    for (let k = xMin; k <= xMax; k += step) {
      root.append(svg("text", { x: x(k), y: H - B + 16, class: "tick", "text-anchor": "middle" }, String(k)));
    }
    root.append(svg("text", { x: (L + W - R) / 2, y: H - 4, class: "axis", "text-anchor": "middle" }, opts.xLabel));
    series.forEach((s, i) => {
      const pts = s.points.map((p) => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ");
      root.append(svg("polyline", { points: pts, class: "series s" + i }));
      for (const p of s.points) {
        root.append(svg("circle", { cx: x(p[0]), cy: y(p[1]), r: 3.5, class: "dot s" + i }, svg("title", null, s.name + " k=" + p[0] + ": " + pct(p[1]))));
      }
    });
    const legend = h("div", { class: "legend" }, series.map((s, i) => h("span", { class: "key s" + i }, s.name)));
    return h("figure", null, root, legend);
  }

  function histogram(values, opts) {
    const W = 420, H = 200, L = 36, R = 8, T = 10, B = 34;
    const bins = opts.bins || 10;
    const lo = Math.min(opts.min !== undefined ? opts.min : 0, ...values);
    const hi = Math.max(opts.max !== undefined ? opts.max : 1, ...values);
    const width = (hi - lo) / bins || 1;
    const counts = new Array(bins).fill(0);
    for (const v of values) counts[Math.min(bins - 1, Math.floor((v - lo) / width))] += 1;
    const top = Math.max(1, ...counts);
    const root = svg("svg", { viewBox: "0 0 " + W + " " + H, class: "chart", role: "img", "aria-label": opts.label });
    const bw = (W - L - R) / bins;
    counts.forEach((c, i) => {
      const bh = (c / top) * (H - T - B);
      const from = lo + i * width;
      root.append(
        svg(
          "rect",
          { x: L + i * bw + 1, y: H - B - bh, width: Math.max(bw - 2, 1), height: bh, class: opts.cls || "hbar" },
          svg("title", null, num(from, 2) + " to " + num(from + width, 2) + ": " + c)
        )
      );
    });
    root.append(svg("text", { x: L - 6, y: T + 8, class: "tick", "text-anchor": "end" }, String(top)));
    root.append(svg("text", { x: L - 6, y: H - B, class: "tick", "text-anchor": "end" }, "0"));
    root.append(svg("text", { x: L, y: H - B + 16, class: "tick" }, num(lo, 2)));
    root.append(svg("text", { x: W - R, y: H - B + 16, class: "tick", "text-anchor": "end" }, num(hi, 2)));
    root.append(svg("text", { x: (L + W - R) / 2, y: H - 4, class: "axis", "text-anchor": "middle" }, opts.xLabel));
    return h("figure", null, root);
  }

  function bar(value, max, cls) {
    const fill = h("span", { class: "fill " + (cls || "") });
    fill.style.width = (isNum(value) && max > 0 ? Math.max(0, Math.min(1, value / max)) * 100 : 0).toFixed(1) + "%";
    return h("span", { class: "bar" }, fill);
  }

  function barList(items, format) {
    const max = Math.max(0, ...items.map((i) => (isNum(i.value) ? i.value : 0)));
    return h(
      "table",
      { class: "bars" },
      h(
        "tbody",
        null,
        items.map((i) =>
          h("tr", { "data-key": i.label }, h("th", null, visible(String(i.label))), h("td", { class: "barcell" }, bar(i.value, max, i.cls)), h("td", { class: "num" }, format(i.value)))
        )
      )
    );
  }

  // ---------------------------------------------------------------- tables
  const searchCache = new WeakMap();

  // A sortable, filterable, paged table over rows of any shape. Only one page of rows is
  // ever in the DOM, so 10,000 rows filter and sort without stalling.
  function dataTable(opts) {
    const st = state.tables[opts.id] || (state.tables[opts.id] = { sort: opts.sort || null, desc: !!opts.desc, page: 0, q: "", f: {} });
    if (opts.initial) {
      if (opts.initial.q !== undefined) st.q = opts.initial.q;
      for (const [k, v] of Object.entries(opts.initial.f || {})) st.f[k] = v;
    }
    const rows = opts.rows;
    let texts = searchCache.get(rows);
    if (!texts) {
      texts = rows.map((r) => opts.search(r).toLowerCase());
      searchCache.set(rows, texts);
    }
    const wrap = h("div", { class: "table", "data-table": opts.id });
    const input = h("input", { type: "search", placeholder: opts.placeholder || "Filter\u2026", value: st.q, "aria-label": "filter", class: "filter-text" });
    const controls = h("div", { class: "controls" }, input);
    for (const f of opts.filters || []) {
      const values = Array.from(new Set(rows.map(f.get).map((v) => (v === null || v === undefined ? "" : String(v))))).sort();
      const select = h(
        "select",
        { "aria-label": f.label, "data-filter": f.key },
        h("option", { value: "" }, "all " + f.label),
        values.map((v) => h("option", { value: v }, v === "" ? "(none)" : visible(v)))
      );
      select.value = st.f[f.key] !== undefined && values.includes(st.f[f.key]) ? st.f[f.key] : "";
      if (st.f[f.key] && !values.includes(st.f[f.key])) st.f[f.key] = "";
      select.addEventListener("change", () => {
        st.f[f.key] = select.value;
        st.page = 0;
        update();
      });
      controls.append(select);
    }
    const info = h("span", { class: "info" });
    controls.append(info);
    const thead = h("thead");
    const tbody = h("tbody");
    const pager = h("div", { class: "pager" });
    wrap.append(controls, h("div", { class: "scroll-x" }, h("table", { class: "grid" }, thead, tbody)), pager);

    function headers() {
      thead.replaceChildren(
        h(
          "tr",
          null,
          opts.columns.map((c) => {
            const mark = st.sort === c.key ? (st.desc ? " \u25bc" : " \u25b2") : "";
            return h(
              "th",
              { class: c.num ? "num" : null, "aria-sort": st.sort === c.key ? (st.desc ? "descending" : "ascending") : null },
              h("button", { type: "button", class: "sort", "data-col": c.key, onclick: () => sortBy(c) }, c.label + mark)
            );
          })
        )
      );
    }
    function sortBy(c) {
      if (st.sort === c.key) st.desc = !st.desc;
      else {
        st.sort = c.key;
        st.desc = !!c.num;
      }
      st.page = 0;
      update();
    }
    function compute() {
      const q = st.q.trim().toLowerCase();
      const active = (opts.filters || []).filter((f) => st.f[f.key]);
      const idx = [];
      for (let i = 0; i < rows.length; i++) {
        if (q && !texts[i].includes(q)) continue;
        let ok = true;
        for (const f of active) {
          const v = f.get(rows[i]);
          if ((v === null || v === undefined ? "" : String(v)) !== st.f[f.key]) {
            ok = false;
            break;
          }
        }
        if (ok) idx.push(i);
      }
      const col = opts.columns.find((c) => c.key === st.sort);
      if (col) {
        const get = col.value || col.get;
        const dir = st.desc ? -1 : 1;
        const keyOf = idx.map((i) => get(rows[i]));
        const order = idx.map((_, j) => j);
        order.sort((a, b) => {
          const va = keyOf[a], vb = keyOf[b];
          const na = va === null || va === undefined || va === "", nb = vb === null || vb === undefined || vb === "";
          if (na || nb) return na === nb ? a - b : na ? 1 : -1;
          if (va < vb) return -dir;
          if (va > vb) return dir;
          return a - b;
        });
        return order.map((j) => idx[j]);
      }
      return idx;
    }
    function draw(idx) {
      const pages = Math.max(1, Math.ceil(idx.length / PAGE_SIZE));
      st.page = Math.min(st.page, pages - 1);
      const start = st.page * PAGE_SIZE;
      const slice = idx.slice(start, start + PAGE_SIZE);
      tbody.replaceChildren(
        ...slice.map((i) => h("tr", null, opts.columns.map((c) => h("td", { class: c.num ? "num" : null }, c.render ? c.render(rows[i]) : plain(c.get(rows[i]))))))
      );
      if (!slice.length) tbody.append(h("tr", null, h("td", { colspan: opts.columns.length, class: "muted" }, "No rows match.")));
      info.textContent =
        idx.length === rows.length
          ? int(rows.length) + " " + opts.noun
          : int(idx.length) + " of " + int(rows.length) + " " + opts.noun;
      const btn = (label, page, disabled) =>
        h("button", { type: "button", disabled: disabled ? "disabled" : null, onclick: () => { st.page = page; update(); } }, label);
      pager.replaceChildren(
        btn("\u00ab", 0, st.page === 0),
        btn("\u2039 prev", st.page - 1, st.page === 0),
        h("span", { class: "page" }, "page " + (st.page + 1) + " of " + pages + (idx.length ? " \u00b7 rows " + (start + 1) + "\u2013" + (start + slice.length) : "")),
        btn("next \u203a", st.page + 1, st.page >= pages - 1),
        btn("\u00bb", pages - 1, st.page >= pages - 1)
      );
      wrap.setAttribute("data-shown", String(idx.length));
    }
    function update() {
      headers();
      draw(compute());
      if (opts.onchange) opts.onchange(st);
    }
    input.addEventListener("input", () => {
      st.q = input.value;
      st.page = 0;
      update();
    });
    update();
    return wrap;
  }

  // ---------------------------------------------------------------- routing
  function parseRoute() {
    const raw = location.hash.replace(/^#/, "") || "/";
    const q = raw.indexOf("?");
    const path = q >= 0 ? raw.slice(0, q) : raw;
    const query = new URLSearchParams(q >= 0 ? raw.slice(q + 1) : "");
    const parts = path.split("/").filter(Boolean).map((p) => {
      try {
        return decodeURIComponent(p);
      } catch (err) {
        return p;
      }
    });
    return { parts: parts, query: query };
  }
  function trialHref(run, id, attempt) {
    return route("/run/" + run + "/trial/" + encodeURIComponent(id) + (attempt ? "/attempt/" + attempt : ""));
  }

  function runOf(i) {
    const runs = state.index.runs || [];
    const n = Number(i);
    return Number.isInteger(n) && n >= 0 && n < runs.length ? runs[n] : null;
  }

  function col(run, name) {
    return (run.columns || []).indexOf(name);
  }

  function rowOf(run, id) {
    if (!run._ids) {
      run._ids = new Map();
      const c = col(run, "id");
      run.trials.forEach((row, i) => run._ids.set(row[c], i));
    }
    return run._ids.get(id);
  }

  // ---------------------------------------------------------------- chrome
  function nav() {
    const runs = state.index.runs || [];
    const { parts } = parseRoute();
    const links = [];
    if (runs.length > 1) links.push(h("a", { href: route("/"), class: parts.length ? null : "active" }, "All runs"));
    runs.forEach((run, i) => {
      const here = parts[0] === "run" && Number(parts[1]) === i;
      links.push(h("a", { href: route("/run/" + i), class: here && parts.length === 2 ? "active" : null, title: run.dir }, visible(run.name)));
      links.push(h("a", { href: route("/run/" + i + "/trials"), class: here && parts[2] === "trials" ? "active sub" : "sub" }, "trials"));
    });
    if ((state.index.comparisons || []).length) {
      links.push(h("a", { href: route("/compare/0"), class: parts[0] === "compare" ? "active" : null }, "Compare"));
    }
    const live = state.live
      ? h("span", { class: "live " + (state.connected ? "on" : "off"), id: "live" }, state.connected ? "live \u00b7 updated " + (state.updated || "") : "disconnected")
      : h("span", { class: "muted" }, "report of " + when(state.index.generated_at));
    return h("header", { class: "top" }, h("strong", { class: "brand" }, "harness"), h("nav", null, links), live);
  }

  function badge(status) {
    return h("span", { class: "badge st-" + String(status).replace(/[^a-z_]/g, "") }, visible(String(status)));
  }

  // ---------------------------------------------------------------- pages: overview
  function metric(key, label, display, value, sub) {
    return h(
      "div",
      { class: "metric", "data-metric": key, "data-value": JSON.stringify(value === undefined ? null : value) },
      h("div", { class: "label" }, label),
      h("div", { class: "value" }, display),
      sub ? h("div", { class: "sub" }, sub) : null
    );
  }

  function usageTotal(summary, name) {
    const u = (summary.usage || {})[name];
    return u && typeof u === "object" ? u : { total: null, measured: 0, of: summary.trials };
  }

  // The headline counts every planned trial (an ungraded one is 0); the graded-only figure
  // is secondary, with how many trials it leaves out and why.
  function gradedOnly(s) {
    const g = s.graded_only;
    if (!g || typeof g !== "object") return null;
    const u = s.ungraded && typeof s.ungraded === "object" ? s.ungraded : {};
    const why = Object.entries(u.by_status || {}).map(([k, v]) => k + " " + int(v)).join(" \u00b7 ");
    const sub = int(u.trials) + " ungraded, counted 0 in the headline" + (why ? ": " + why : "");
    return metric("graded_mean_reward", "mean reward (graded only)", num(g.mean_reward), isNum(g.mean_reward) ? g.mean_reward : null, sub);
  }

  function headline(run) {
    const s = run.summary || {};
    const ci = s.ci || {};
    const level = isNum(s.ci_level) ? Math.round(s.ci_level * 100) + "% CI " : "CI ";
    const ciText = (v, f) => (Array.isArray(v) && v.length === 2 ? level + "[" + f(v[0]) + ", " + f(v[1]) + "]" : "CI: needs 2+ tasks");
    const errors = Object.values(s.errors_by_status || {}).reduce((a, b) => a + (isNum(b) ? b : 0), 0);
    const tokens = usageTotal(s, "total_tokens");
    const cost = usageTotal(s, "cost_usd");
    const calls = usageTotal(s, "calls");
    const measured = (u) => (u.measured === u.of ? null : "measured in " + int(u.measured) + " of " + int(u.of));
    const pass1 = (s.pass_at_k || {})["1"];
    return h(
      "div",
      { class: "headline" },
      metric("mean_reward", "mean reward", num(s.mean_reward), s.mean_reward, h("span", { "data-metric": "mean_reward_ci", "data-value": JSON.stringify(ci.mean_reward || null) }, ciText(ci.mean_reward, (x) => num(x)))),
      metric("success_rate", "success (reward \u2265 " + plain(s.threshold) + ")", pct(s.success_rate), s.success_rate, h("span", { "data-metric": "success_rate_ci", "data-value": JSON.stringify(ci.success_rate || null) }, ciText(ci.success_rate, pct))),
      metric("pass_at_1", "pass@1", pct(pass1), pass1 === undefined ? null : pass1, "over " + int(s.pass_k_tasks) + " tasks"),
      metric("trials", "trials", int(s.trials), s.trials, (isNum(s.planned) ? "of " + int(s.planned) + " planned \u00b7 " + int(s.unrecorded) + " without a record \u00b7 " : "") + int(s.graded) + " graded \u00b7 " + int(s.ok) + " ok"),
      gradedOnly(s),
      metric("tasks", "tasks", int(s.tasks), s.tasks),
      metric("errors", "errors", int(errors), errors, Object.entries(s.errors_by_status || {}).map(([k, v]) => k + " " + v).join(" \u00b7 ") || "none"),
      metric("tokens", "tokens", int(tokens.total), tokens.total, measured(tokens)),
      metric("cost_usd", "cost", usd(cost.total), cost.total, cost.measured ? measured(cost) : "not priced"),
      metric("calls", "model calls", int(calls.total), calls.total, measured(calls)),
      metric("duration", "mean trial time", secs((s.duration_sec || {}).mean), (s.duration_sec || {}).mean, "total " + secs((s.duration_sec || {}).total)),
      tamperedVerdicts(s),
      aliveVerdicts(s),
      datasetMetrics(s)
    );
  }

  // The metrics the run's datasets declare (summary.json's dataset_metrics): each with the
  // trials it counted, and its error when it has no value.
  function datasetMetrics(s) {
    const d = s.dataset_metrics;
    if (!d || typeof d !== "object") return null;
    return Object.entries(d).slice(0, 64).map(([name, m]) => {
      if (!m || typeof m !== "object") return null;
      const v = m.value;
      const shown = isNum(v)
        ? num(v)
        : v && typeof v === "object"
          ? Object.entries(v).slice(0, 8).map(([k, x]) => plain(k) + " " + num(x)).join(" \u00b7 ")
          : DASH;
      const sub = (m.error ? "error: " + plain(m.error) + " \u00b7 " : "") + plain(m.source) + " over " + int(m.trials_counted) + " trials, " + int(m.graded) + " graded";
      return metric("dataset_metric:" + plain(name), "dataset metric " + plain(name), shown, isNum(v) ? v : null, sub);
    });
  }

  // Verdicts taken beside services the agent left running (agent_services = keep).
  function aliveVerdicts(s) {
    const a = s.agent_services;
    if (!a || typeof a !== "object" || !isNum(a.verdicts) || a.verdicts <= 0) return null;
    return h("div", { class: "warn" }, metric("agent_services_verdicts", "verdicts with agent processes alive", int(a.verdicts), a.verdicts, "agent_services = keep: the tests ran beside services the agent left running"));
  }

  // Verdicts a verifier gave in the agent's container after the agent changed what it runs.
  function tamperedVerdicts(s) {
    const t = s.tampering;
    if (!t || typeof t !== "object" || !isNum(t.verdicts) || t.verdicts <= 0) return null;
    return h("div", { class: "warn" }, metric("tampered_verdicts", "verdicts after tampering", int(t.verdicts), t.verdicts, int(t.trials) + " trial(s) with " + int(t.events) + " tampering change(s)"));
  }

  function statusBanner(run) {
    const st = run.status;
    if (!st || typeof st !== "object") return null;
    const c = st.counts || {};
    const running = Array.isArray(st.running) ? st.running : [];
    const stateName = String(st.state || "unknown");
    return h(
      "div",
      { class: "status st-run-" + stateName.replace(/[^a-z]/g, ""), id: "run-status", "data-state": stateName, "data-done": JSON.stringify(c.done === undefined ? null : c.done) },
      h(
        "p",
        null,
        h("strong", null, stateName),
        " \u00b7 " + int(c.done) + " of " + int(c.planned) + " done \u00b7 " + int(c.running) + " running \u00b7 " + int(c.pending) + " pending \u00b7 " + int(c.retries) + " retries",
        " \u00b7 status of " + when(st.updated_at) + (st.invocation ? " \u00b7 invocation " + plain(st.invocation) : "")
      ),
      isNum(c.planned) && c.planned > 0 ? h("div", { class: "progress" }, bar(c.done, c.planned, "reward")) : null,
      stateName === "running" && !state.live ? h("p", { class: "muted" }, "This report is a snapshot; `harness view` follows the run live.") : null,
      running.length
        ? objectTable(
            running.map((r) => ({ trial: r.id, task: r.task, attempt: r.attempt, phase: r.phase, since: when(r.phase_started_at) })),
            0
          )
        : null
    );
  }

  function rewards(run) {
    const c = col(run, "reward");
    return run.trials.map((r) => r[c]).filter(isNum);
  }

  function passChart(s) {
    const pk = s.pass_at_k || {};
    const hk = s.pass_hat_k || {};
    const points = (o) => Object.keys(o).map(Number).filter(Number.isFinite).sort((a, b) => a - b).filter((k) => isNum(o[String(k)])).map((k) => [k, o[String(k)]]);
    const series = [{ name: "pass@k", points: points(pk) }, { name: "pass^k", points: points(hk) }].filter((x) => x.points.length);
    if (!series.length) return h("p", { class: "muted" }, "No graded trials yet.");
    return lineChart(series, { label: "pass@k curve", xLabel: "k (attempts per task)" });
  }

  function overviewPage(i) {
    const run = runOf(i);
    if (!run) return notFound();
    const s = run.summary || {};
    const rw = rewards(run);
    const errItems = Object.entries(s.errors_by_status || {}).map(([k, v]) => ({ label: k, value: v, cls: "st-" + k }));
    const errTypes = {};
    const ce = col(run, "error");
    for (const row of run.trials) {
      const e = row[ce];
      if (typeof e === "string") {
        const t = e.split(":")[0];
        errTypes[t] = (errTypes[t] || 0) + 1;
      }
    }
    return [
      h("h1", null, visible(run.name)),
      h("p", { class: "muted" }, visible(run.dir)),
      (run.notes || []).map((n) => h("p", { class: "note" }, visible(String(n)))),
      statusBanner(run),
      guarded("headline", "Headline", () => section("headline", "Headline", headline(run))),
      h(
        "div",
        { class: "cols" },
        guarded("passk", "pass@k", () => section("passk", "pass@k curve", passChart(s))),
        guarded("histogram", "Rewards", () =>
          section("histogram", "Reward histogram", rw.length ? histogram(rw, { label: "reward histogram", xLabel: "reward (" + rw.length + " graded trials)" }) : h("p", { class: "muted" }, "No graded trials yet."))
        ),
        guarded("errors", "Errors", () =>
          section(
            "errors",
            "Errors by status",
            errItems.length ? barList(errItems, int) : h("p", { class: "ok" }, "Every trial completed."),
            Object.keys(errTypes).length ? [h("h3", null, "by error type"), barList(Object.entries(errTypes).map(([k, v]) => ({ label: k, value: v })), int)] : null
          )
        )
      ),
      guarded("tasks", "Tasks", () => section("tasks", "Per task: reward, duration, tokens and cost", taskTable(run))),
      guarded("config", "Config", () =>
        section(
          "config",
          "Config and versions",
          h("div", { class: "cols" }, h("div", null, h("h3", null, "config"), kvTable(flatten(run.config, "", []).map(([k, v]) => [k, h("code", null, visible(plain(v)))]))), h("div", null, h("h3", null, "versions"), kvTable(Object.entries(run.versions || {}).map(([k, v]) => [k, h("code", null, visible(plain(v)))]))))
        )
      ),
    ];
  }

  function taskTable(run) {
    const tasks = run.tasks || [];
    const maxOf = (k) => Math.max(0, ...tasks.map((t) => (isNum(t[k]) ? t[k] : 0)));
    const maxDur = maxOf("duration_mean"), maxTok = maxOf("tokens"), maxCost = maxOf("cost");
    const link = (t) => h("a", { href: route("/run/" + run.index + "/trials?q=" + encodeURIComponent(t.key)) }, visible(String(t.key)));
    return dataTable({
      id: "tasks-" + run.index,
      rows: tasks,
      noun: "tasks",
      search: (t) => [t.key, t.name, t.category].join(" "),
      filters: [{ key: "category", label: "categories", get: (t) => t.category }],
      columns: [
        { key: "key", label: "task", get: (t) => t.key, render: link },
        { key: "category", label: "category", get: (t) => t.category },
        { key: "trials", label: "trials", get: (t) => t.trials, num: true },
        { key: "mean_reward", label: "mean reward", get: (t) => t.mean_reward, num: true, render: (t) => [bar(t.mean_reward, 1, "reward"), " " + num(t.mean_reward)] },
        { key: "graded_mean_reward", label: "mean reward (graded only)", get: (t) => t.graded_mean_reward, num: true, render: (t) => num(t.graded_mean_reward) },
        { key: "successes", label: "successes", get: (t) => t.successes, num: true, render: (t) => int(t.successes) + " / " + int(isNum(t.planned) ? t.planned : t.trials) },
        { key: "variance", label: "variance", get: (t) => t.variance, num: true, render: (t) => num(t.variance) },
        { key: "errors", label: "errors", get: (t) => t.errors, num: true },
        { key: "duration_mean", label: "mean duration", get: (t) => t.duration_mean, num: true, render: (t) => [bar(t.duration_mean, maxDur), " " + secs(t.duration_mean)] },
        { key: "tokens", label: "tokens", get: (t) => t.tokens, num: true, render: (t) => [bar(t.tokens, maxTok), " " + int(t.tokens)] },
        { key: "cost", label: "cost", get: (t) => t.cost, num: true, render: (t) => [bar(t.cost, maxCost), " " + usd(t.cost)] },
      ],
    });
  }

  // ---------------------------------------------------------------- pages: trials
  function trialsPage(i, query) {
    const run = runOf(i);
    if (!run) return notFound();
    const c = (name) => col(run, name);
    const [cid, ctask, ccat, cst, crew, catt, cdur, ctok, ccost, cerr] = ["id", "task", "category", "status", "reward", "attempt", "duration", "tokens", "cost", "error"].map(c);
    // The address is the filter's source of truth: links and reloads show the same rows.
    const initial = { q: query.get("q") || "", f: { status: query.get("status") || "", category: query.get("category") || "" } };
    const table = dataTable({
      id: "trials-" + run.index,
      rows: run.trials,
      noun: "trials",
      placeholder: "Filter by id, task, error\u2026",
      initial: initial,
      search: (r) => [r[cid], r[ctask], r[ccat], r[cst], r[cerr]].map((v) => (v === null || v === undefined ? "" : String(v))).join(" "),
      filters: [
        { key: "status", label: "statuses", get: (r) => r[cst] },
        { key: "category", label: "categories", get: (r) => r[ccat] },
      ],
      columns: [
        { key: "id", label: "trial", get: (r) => r[cid], render: (r) => h("a", { href: trialHref(run.index, r[cid]), class: "trial-link" }, visible(String(r[cid]))) },
        { key: "task", label: "task", get: (r) => r[ctask], render: (r) => visible(String(r[ctask])) },
        { key: "category", label: "category", get: (r) => r[ccat], render: (r) => visible(plain(r[ccat])) },
        { key: "status", label: "status", get: (r) => r[cst], render: (r) => badge(r[cst]) },
        { key: "reward", label: "reward", get: (r) => r[crew], num: true, render: (r) => num(r[crew]) },
        { key: "attempt", label: "attempts", get: (r) => r[catt], num: true },
        { key: "duration", label: "duration", get: (r) => r[cdur], num: true, render: (r) => secs(r[cdur]) },
        { key: "tokens", label: "tokens", get: (r) => r[ctok], num: true, render: (r) => int(r[ctok]) },
        { key: "cost", label: "cost", get: (r) => r[ccost], num: true, render: (r) => usd(r[ccost]) },
        { key: "error", label: "first error", get: (r) => r[cerr], render: (r) => h("span", { class: "err" }, short(r[cerr] || "", 160)) },
      ],
      onchange: (st) => {
        const q = new URLSearchParams();
        if (st.q) q.set("q", st.q);
        for (const [k, v] of Object.entries(st.f)) if (v) q.set(k, v);
        const target = "#/run/" + run.index + "/trials" + (q.toString() ? "?" + q.toString() : "");
        if (location.hash !== target) history.replaceState(null, "", target);
      },
    });
    return [h("h1", null, "Trials of ", visible(run.name)), statusBanner(run), section("trials", "Trials", table)];
  }

  // ---------------------------------------------------------------- pages: trial
  async function loadDetail(run, id) {
    const key = run.index + "/" + id;
    if (state.details.has(key)) return state.details.get(key);
    let detail = null;
    const row = rowOf(run, id);
    if (row === undefined) return null;
    const el = document.getElementById("d-" + run.index + "-" + row);
    if (el) detail = JSON.parse(el.textContent);
    else if (state.live) {
      const res = await fetch("/api/trial?run=" + run.index + "&id=" + encodeURIComponent(id));
      if (res.ok) detail = await res.json();
    }
    if (detail) state.details.set(key, detail);
    return detail;
  }

  function trialPage(i, id, attempt) {
    const run = runOf(i);
    if (!run) return notFound();
    const holder = h("div", { class: "trial" }, h("p", { class: "muted" }, "Loading trial\u2026"));
    loadDetail(run, id).then(
      (detail) => {
        if (!detail) {
          holder.replaceChildren(h("h1", null, visible(id)), h("p", { class: "warn" }, "No such trial in this run."));
          return;
        }
        holder.replaceChildren();
        append(holder, [attempt ? attemptView(run, detail, attempt) : trialView(run, detail)]);
        holder.setAttribute("data-ready", "1");
      },
      (err) => holder.replaceChildren(h("p", { class: "warn" }, "Could not load the trial: " + err))
    );
    return holder;
  }

  const KNOWN_RECORD_KEYS = new Set(["id", "task", "agent", "sandbox", "rollout", "attempt", "status", "ok", "reward", "rewards", "errors", "previous_attempts", "timings", "usage", "versions", "started_at", "finished_at", "evidence_dir", "events", "posture", "verifier_posture", "root_changes", "tampered_verdict"]);
  const PER_PART_KEYS = ["steps", "judges", "episodes"];
  const PHASES = ["prepare", "build", "reset", "waiting", "execute", "agent_phase", "agent", "collect", "grade", "verifier_phase", "verifier", "cleanup"];

  function trialHeader(run, rec, attemptLinks) {
    const agent = rec.agent || {};
    const task = rec.task || {};
    return h(
      "div",
      { class: "card trial-head" },
      h("h1", null, visible(String(rec.id)), " ", badge(rec.status)),
      kvTable([
        ["reward", [h("strong", { "data-field": "reward" }, num(rec.reward)), rec.tampered_verdict === true ? h("span", { class: "warn", "data-field": "tampered-verdict" }, " taken after tampering") : null, Array.isArray(rec.agent_processes_alive) && rec.agent_processes_alive.length ? h("span", { class: "warn", "data-field": "agent-processes-alive" }, " taken with " + int(rec.agent_processes_alive.length) + " agent process(es) alive") : null]],
        ["task", [visible(plain(task.name)), task.key !== task.name ? [" (", visible(plain(task.key)), ")"] : null]],
        ["agent", [visible(plain(agent.name)), agent.model ? " \u00b7 model " + visible(plain(agent.model)) : null]],
        ["sandbox", visible(plain((rec.sandbox || {}).backend)) + ((rec.sandbox || {}).image ? " \u00b7 " + visible(plain(rec.sandbox.image)) : "")],
        ["attempt", [plain(rec.attempt), " \u00b7 rollout ", plain(rec.rollout), attemptLinks]],
        ["time", when(rec.started_at) + " \u2192 " + when(rec.finished_at)],
        ["evidence", h("code", null, visible(plain(rec.evidence_dir)))],
      ]),
      h("p", null, h("a", { href: route("/run/" + run.index + "/trials") }, "\u2190 all trials of " + run.name))
    );
  }

  function trialView(run, detail) {
    const rec = detail.record || {};
    const attempts = detail.attempts || [];
    const links = attempts.length
      ? [" \u00b7 earlier attempts: ", attempts.map((a, k) => [k ? ", " : "", h("a", { href: trialHref(run.index, rec.id, (a.summary || {}).attempt), class: "attempt-link" }, "#" + plain((a.summary || {}).attempt) + " " + plain((a.summary || {}).status))])]
      : null;
    const ev = detail.evidence || {};
    return [
      trialHeader(run, rec, links),
      guarded("rewards", "Rewards", () => rewardsSection(rec)),
      guarded("timings", "Timings", () => timingsSection(rec)),
      guarded("trial-errors", "Errors", () => errorsSection(rec.errors, attempts)),
      evidenceSections(run, ev, rec),
      guarded("security", "Security", () => securitySection(rec)),
      guarded("attempts", "Earlier attempts", () => attemptsSection(run, rec, attempts)),
      guarded("other", "Other fields", () => otherFields(rec)),
      section("record", "Record", h("details", null, h("summary", null, "the trial record as JSON"), textBlock(JSON.stringify(rec, null, 2)))),
    ];
  }

  function attemptView(run, detail, number) {
    const rec = detail.record || {};
    const found = (detail.attempts || []).find((a) => String((a.summary || {}).attempt) === String(number));
    if (!found) return [h("h1", null, visible(String(rec.id))), h("p", { class: "warn" }, "This trial has no earlier attempt #" + number + ".")];
    const s = found.summary || {};
    return [
      h(
        "div",
        { class: "card trial-head" },
        h("h1", null, visible(String(rec.id)), " \u00b7 attempt " + plain(s.attempt) + " ", badge(s.status)),
        kvTable([
          ["reward", num(s.reward)],
          ["time", when(s.started_at) + " \u2192 " + when(s.finished_at)],
          ["evidence", h("code", null, visible(plain(s.evidence_dir)))],
        ]),
        h("p", null, h("a", { href: trialHref(run.index, rec.id) }, "\u2190 the final attempt (#" + plain(rec.attempt) + ")"))
      ),
      guarded("trial-errors", "Errors", () => errorsSection(s.errors, [])),
      evidenceSections(run, found.evidence || {}, s),
    ];
  }

  function rewardsSection(rec) {
    const entries = Object.entries(rec.rewards || {});
    const parts = PER_PART_KEYS.filter((k) => rec[k] !== undefined && rec[k] !== null);
    return section(
      "rewards",
      "Rewards",
      entries.length ? barList(entries.map(([k, v]) => ({ label: k, value: isNum(v) ? v : null, cls: "reward" })), (v) => num(v)) : h("p", { class: "muted" }, rec.reward === null || rec.reward === undefined ? "Not graded." : "Reward " + num(rec.reward)),
      parts.map((k) => [h("h3", null, "per " + k.replace(/s$/, "")), genericView(rec[k])])
    );
  }

  function timingsSection(rec) {
    const t = rec.timings || {};
    const keys = Object.keys(t);
    const ordered = PHASES.filter((p) => p in t).concat(keys.filter((k) => !PHASES.includes(k) && k !== "total"));
    const items = ordered.map((k) => ({ label: k, value: t[k] }));
    return section("timings", "Timings per phase", items.length ? barList(items, secs) : h("p", { class: "muted" }, "No timings recorded."), "total" in t ? h("p", null, "total " + secs(t.total)) : null);
  }

  function isCleanupError(e) {
    return /cleanup/i.test(String(e.phase || "")) || /cleanup/i.test(String(e.type || "")) || /cleanup/i.test(textOf(e.message).slice(0, 200));
  }

  function errorList(errors) {
    return h(
      "ol",
      { class: "errors" },
      errors.map((e) =>
        h(
          "li",
          { class: isCleanupError(e) ? "cleanup" : null },
          h("strong", null, visible(plain(e.type))),
          " in phase ",
          h("code", null, visible(plain(e.phase))),
          isCleanupError(e) ? h("span", { class: "badge cleanup" }, "cleanup") : null,
          textBlock(e.message)
        )
      )
    );
  }

  function errorsSection(errors, attempts) {
    const list = Array.isArray(errors) ? errors : [];
    const earlier = attempts.filter((a) => ((a.summary || {}).errors || []).length);
    return section(
      "trial-errors",
      "Errors",
      list.length ? errorList(list) : h("p", { class: "ok" }, "No errors."),
      earlier.map((a) => [h("h3", null, "attempt #" + plain(a.summary.attempt) + " (" + plain(a.summary.status) + ")"), errorList(a.summary.errors)])
    );
  }

  function evidenceSections(run, ev, rec) {
    if (!ev.exists) {
      return section("evidence", "Evidence", h("p", { class: "muted" }, ev.safe === false ? "The evidence dir lies outside the run dir; not shown." : "No evidence kept for this attempt (" + plain(ev.dir) + ")."));
    }
    const raw = (name) => (state.live ? "/api/raw?run=" + run.index + "&path=" + encodeURIComponent(ev.dir + "/" + name) : null);
    return [
      guarded("conversation", "Conversation", () => conversationSection(ev.conversation || {}, rec)),
      guarded("transcript", "Transcript", () => transcriptSection(ev.transcript || {})),
      guarded("model-calls", "Model calls", () => modelCallsSection(ev.model_calls || {})),
      guarded("verifier", "Verifier output", () =>
        section(
          "verifier",
          "Verifier output",
          (ev.verifier || []).length ? ev.verifier.map((f) => fileBlock(f, raw("verifier/" + f.name))) : h("p", { class: "muted" }, "The verifier left no files."),
          ev.verifier_omitted ? h("p", { class: "muted" }, ev.verifier_omitted + " more files not shown") : null
        )
      ),
      guarded("changes", "Changed files", () => changesSection(ev.changes || {})),
      guarded("logs", "Logs", () => section("logs", "Agent logs and other files", (ev.logs || []).length ? ev.logs.map((f) => fileBlock(f, raw(f.name))) : h("p", { class: "muted" }, "No logs."))),
    ];
  }

  function fileBlock(f, rawUrl) {
    return h("div", { class: "file" }, h("h3", null, visible(String(f.name))), f.text === null || f.text === undefined ? h("p", { class: "muted" }, "not a regular file") : textBlock(f.text, { raw: rawUrl }));
  }

  // ---------------------------------------------------------------- transcript
  function eventView(e) {
    if (!e || typeof e !== "object") return h("div", { class: "event" }, textBlock(plain(e)));
    const time = e.timestamp ? h("span", { class: "time" }, when(textOf(e.timestamp))) : null;
    switch (e.type) {
      case "message":
        return h("div", { class: "event msg role-" + String(e.role).replace(/[^a-z]/g, "") }, h("div", { class: "who" }, visible(plain(e.role)), time), textBlock(e.content));
      case "tool_call":
        return h(
          "div",
          { class: "event tool-call" },
          h("div", { class: "who" }, "tool call ", h("code", null, visible(plain(e.name))), e.id ? h("span", { class: "muted" }, " " + short(e.id, 80)) : null, time),
          textBlock(typeof e.arguments === "string" || isClip(e.arguments) ? e.arguments : JSON.stringify(e.arguments, null, 2))
        );
      case "tool_result":
        return h(
          "div",
          { class: "event tool-result" + (e.error ? " failed" : "") },
          h("div", { class: "who" }, e.error ? "tool error " : "tool result ", h("code", null, visible(plain(e.name))), e.tool_call_id ? h("span", { class: "muted" }, " " + short(e.tool_call_id, 80)) : null, time),
          textBlock(e.content)
        );
      case "model_call": {
        const u = e.usage && typeof e.usage === "object" ? e.usage : {};
        return h(
          "div",
          { class: "event model-call" + (e.outcome && e.outcome !== "ok" ? " failed" : "") },
          "model call #" + plain(e.seq) + " \u00b7 HTTP " + plain(e.status) + " \u00b7 " + visible(plain(e.outcome)) + " \u00b7 " + num(e.latency_ms, 0) + " ms \u00b7 in " + int(u.input_tokens) + " / out " + int(u.output_tokens) + " tokens" + (isNum(e.cost_usd) ? " \u00b7 " + usd(e.cost_usd) : ""),
          time
        );
      }
      case "parse_error":
        return h("div", { class: "event warn" }, "line " + plain(e.line) + " of " + visible(plain(e.file)) + " is not a JSON object");
      default:
        return h("div", { class: "event other" }, h("div", { class: "who" }, visible(plain(e.type))), genericView(e));
    }
  }

  // ---------------------------------------------------------------- conversation
  // session.jsonl as the agent lived it: turns, each tool call with its arguments and its
  // result, usage. Every string is the agent's: drawn as text (textBlock, visible).
  function usageText(u) {
    return u && typeof u === "object" ? "in " + int(u.input_tokens) + " / out " + int(u.output_tokens) + " tokens" : "";
  }
  function toolCallView(c) {
    const r = c.result;
    return h(
      "div",
      { class: "event tool-call" },
      h("div", { class: "who" }, "tool call ", h("code", null, visible(plain(c.name))), c.id ? h("span", { class: "muted" }, " " + short(c.id, 80)) : null),
      textBlock(typeof c.arguments === "string" || isClip(c.arguments) ? c.arguments : JSON.stringify(c.arguments, null, 2)),
      r && typeof r === "object"
        ? h("div", { class: "event tool-result" + (r.is_error ? " failed" : "") }, h("div", { class: "who" }, r.is_error ? "tool error" : "tool result"), textBlock(r.content))
        : h("p", { class: "muted" }, "no result in the session")
    );
  }
  function turnView(t) {
    if (!t || typeof t !== "object") return h("div", { class: "event" }, textBlock(plain(t)));
    switch (t.kind) {
      case "session":
        return h("p", { class: "muted turn-session" }, "session of ", h("code", null, visible(plain(t.agent))), t.cli_version ? " " + visible(plain(t.cli_version)) : null, t.model ? " \u00b7 model " + visible(plain(t.model)) : null);
      case "user":
        return h("div", { class: "event msg role-user turn" }, h("div", { class: "who" }, "user"), textBlock(t.content));
      case "assistant": {
        const calls = Array.isArray(t.tool_calls) ? t.tool_calls : [];
        const facts = [t.stop_reason ? "stop " + visible(plain(t.stop_reason)) : null, t.usage ? usageText(t.usage) : null].filter(Boolean).join(" \u00b7 ");
        return h(
          "div",
          { class: "event msg role-assistant turn" },
          h("div", { class: "who" }, "assistant", facts ? h("span", { class: "muted turn-facts" }, " \u00b7 " + facts) : null),
          textOf(t.content).trim() ? textBlock(t.content) : null,
          calls.map(toolCallView)
        );
      }
      case "tool_result":
        return h("div", { class: "event tool-result" + (t.is_error ? " failed" : "") }, h("div", { class: "who" }, "tool result ", h("code", null, visible(plain(t.name)))), textBlock(t.content));
      case "end":
        return h("div", { class: "event turn-end" + (t.ok === false ? " failed" : "") }, h("div", { class: "who" }, t.ok === false ? "ended with an error" : "ended", isNum(t.turns) ? " after " + plain(t.turns) + " turns" : ""), t.error ? textBlock(t.error) : null);
      default:
        return h("div", { class: "event other" }, genericView(t));
    }
  }
  function usageNote(conv, rec) {
    const u = (rec && rec.usage) || {};
    if (u.source !== "gateway") return conv.usage ? h("p", { class: "muted" }, "The agent's log counts " + usageText(conv.usage) + ".") : null;
    const logged = u.agent_log && typeof u.agent_log === "object" ? u.agent_log : null;
    return h(
      "p",
      { class: logged ? "warn usage-note" : "muted usage-note" },
      "Usage is the gateway's count: " + usageText(u) + " in " + int(u.calls) + " calls.",
      logged ? " The agent's own log says " + usageText(logged) + "; the gateway's count is the record's." : null
    );
  }
  function conversationSection(conv, rec) {
    const entries = Array.isArray(conv.entries) ? conv.entries : [];
    if (!conv.exists) return section("conversation", "Conversation", h("p", { class: "muted" }, "This agent left no session.jsonl."));
    const list = h("div", { class: "conversation" });
    let shown = 0;
    const more = h("button", { type: "button", class: "more" });
    function show() {
      const part = entries.slice(shown, shown + EVENT_STEP);
      list.append(...part.map(turnView));
      shown += part.length;
      if (shown < entries.length) more.textContent = "Show " + Math.min(EVENT_STEP, entries.length - shown) + " more turns (" + (entries.length - shown) + " left)";
      else more.remove();
    }
    more.addEventListener("click", show);
    show();
    return section(
      "conversation",
      "Conversation",
      usageNote(conv, rec),
      entries.length ? null : h("p", { class: "muted" }, "The session is empty."),
      list,
      shown < entries.length ? more : null,
      conv.omitted ? h("p", { class: "clipped" }, conv.omitted + " more turns left out by the report.") : null,
      conv.unreadable ? h("p", { class: "warn" }, conv.unreadable + " lines of session.jsonl are not JSON objects.") : null
    );
  }

  function transcriptSection(tr) {
    const events = Array.isArray(tr.events) ? tr.events : [];
    const list = h("div", { class: "conversation" });
    let shown = 0;
    const more = h("button", { type: "button", class: "more" });
    function show() {
      const part = events.slice(shown, shown + EVENT_STEP);
      list.append(...part.map(eventView));
      shown += part.length;
      if (shown < events.length) more.textContent = "Show " + Math.min(EVENT_STEP, events.length - shown) + " more events (" + (events.length - shown) + " left)";
      else more.remove();
    }
    more.addEventListener("click", show);
    show();
    return section(
      "transcript",
      "Transcript",
      events.length ? null : h("p", { class: "muted" }, tr.source === "" ? "This agent kept no session and made no model calls." : "The transcript is empty."),
      tr.source === "derived" ? h("p", { class: "muted" }, "Derived from session.jsonl and model_calls.jsonl (no transcript.jsonl).") : null,
      list,
      shown < events.length ? more : null,
      tr.omitted ? h("p", { class: "clipped" }, tr.omitted + " more events left out by the report.") : null
    );
  }

  function modelCallsSection(mc) {
    const calls = Array.isArray(mc.calls) ? mc.calls : [];
    if (!calls.length) return section("model-calls", "Model calls", h("p", { class: "muted" }, "No model calls."));
    return section(
      "model-calls",
      "Model calls",
      h(
        "div",
        { class: "calls" },
        calls.map((c) => {
          const u = c.usage && typeof c.usage === "object" ? c.usage : {};
          const body = h("div");
          const det = h(
            "details",
            { class: "call" + (c.outcome && c.outcome !== "ok" ? " failed" : "") },
            h(
              "summary",
              null,
              "#" + plain(c.seq) + " " + visible(plain(c.method)) + " " + visible(plain(c.path)) + " \u00b7 " + visible(plain(c.model)) + (c.requested_model && c.requested_model !== c.model ? " (asked " + visible(plain(c.requested_model)) + ")" : "") + " \u00b7 HTTP " + plain(c.status) + " " + visible(plain(c.outcome)) + " \u00b7 " + num(c.latency_ms, 0) + " ms \u00b7 in " + int(u.input_tokens) + " / out " + int(u.output_tokens) + (isNum(u.cached_tokens) ? " / cached " + int(u.cached_tokens) : "") + " tokens \u00b7 " + usd(c.cost_usd)
            ),
            body
          );
          det.addEventListener("toggle", () => {
            if (det.open && !body.childElementCount) {
              body.append(c.reason ? h("p", { class: "warn" }, "reason: " + short(c.reason, 2000)) : null, h("h4", null, "request"), textBlock(c.request), h("h4", null, "response"), textBlock(c.response));
            }
          });
          return det;
        })
      ),
      mc.omitted ? h("p", { class: "clipped" }, mc.omitted + " more calls left out by the report.") : null,
      mc.parse_errors ? h("p", { class: "warn" }, mc.parse_errors + " lines of model_calls.jsonl are not JSON objects.") : null
    );
  }

  // ---------------------------------------------------------------- changes
  function diffView(diff) {
    const lines = textOf(diff).split("\n");
    if (lines.length && lines[lines.length - 1] === "") lines.pop();
    const pre = h("pre", { class: "diff" });
    let shown = 0;
    const more = h("button", { type: "button", class: "more" });
    function show() {
      const part = lines.slice(shown, shown + DIFF_LINE_STEP);
      for (const line of part) {
        const c = line[0];
        const cls = line.startsWith("+++") || line.startsWith("---") ? "meta" : c === "+" ? "add" : c === "-" ? "del" : c === "@" ? "hunk" : c === "\\" ? "meta" : "ctx";
        const span = h("span", { class: cls });
        visibleInto(span, line.length > TEXT_STEP * 5 ? line.slice(0, TEXT_STEP * 5) + " \u2026 (" + int(line.length) + " characters in this line)" : line);
        pre.append(span, "\n");
      }
      shown += part.length;
      if (shown < lines.length) more.textContent = "Show more lines (" + (lines.length - shown) + " left)";
      else more.remove();
    }
    more.addEventListener("click", show);
    show();
    const wrap = h("div", { class: "textblock" }, pre);
    if (shown < lines.length) wrap.append(more);
    if (isClip(diff)) wrap.append(h("p", { class: "clipped" }, "Diff clipped by the report: " + int(diff.total) + " characters in all."));
    return wrap;
  }

  function changeBody(f) {
    if (f.kind === "text" && f.diff !== null && f.diff !== undefined) return textOf(f.diff) ? diffView(f.diff) : h("p", { class: "muted" }, "(no line changes)");
    if (f.kind === "large") return [h("p", { class: "muted" }, "Too large for a line diff (" + bytes(f.before) + " \u2192 " + bytes(f.after) + ")." + (f.preview ? " Its start:" : "")), f.preview ? textBlock(f.preview) : null];
    if (f.kind === "binary") return h("p", { class: "muted" }, "Binary file (" + bytes(f.before) + " \u2192 " + bytes(f.after) + ").");
    return h("p", { class: "muted" }, visible(plain(f.kind)) + (f.preview ? " " + short(f.preview, 500) : ""));
  }

  function changesSection(ch) {
    const files = Array.isArray(ch.files) ? ch.files : [];
    const counts = (f) => {
      if (f.kind !== "text" || !f.diff) return "";
      let add = 0, del = 0;
      for (const line of textOf(f.diff).split("\n")) {
        if (line.startsWith("+") && !line.startsWith("+++")) add++;
        else if (line.startsWith("-") && !line.startsWith("---")) del++;
      }
      return " +" + add + " \u2212" + del;
    };
    return section(
      "changes",
      "Files the agent changed",
      h("p", { class: "muted" }, "Against the task's initial workspace ", h("code", null, visible(plain(ch.base))), ch.base_found ? "" : " (absent: the workspace started empty)", "."),
      ch.task_found === false ? h("p", { class: "warn" }, "The task dir is not on this machine: every file shows as added.") : null,
      ch.final_found === false ? h("p", { class: "muted" }, "No workspace was kept for this attempt.") : null,
      files.length ? null : ch.final_found === false ? null : h("p", { class: "muted" }, "No changes."),
      files.map((f) =>
        h(
          "details",
          { class: "change ch-" + String(f.change).replace(/[^a-z]/g, ""), open: files.length <= 20 ? "open" : null },
          h("summary", null, h("span", { class: "badge" }, visible(plain(f.change))), " ", h("code", null, visible(plain(f.path))), h("span", { class: "muted" }, counts(f))),
          changeBody(f)
        )
      ),
      ch.omitted ? h("p", { class: "clipped" }, ch.omitted + " more changed files left out by the report.") : null
    );
  }

  // ---------------------------------------------------------------- security, attempts, rest
  // Each phase's effective network policy (posture.network, verifier_posture.network; a
  // multi-step task's per step, steps[].network) and what was refused (network_refused
  // events): the packets the filter's rules dropped (events with `packets`: one per rule,
  // not per connection; a connection retried is several packets) and the requests the
  // egress proxy refused (one event each, or a summary counting those past its cap).
  // Events marked `logged` name the exact destinations of packets already counted.
  function networkView(rec, events) {
    const policy = (posture) => (posture && typeof posture === "object" && posture.network && typeof posture.network === "object" ? posture.network : null);
    const isPolicy = (p) => p && typeof p === "object" && typeof p.mode === "string";
    const stepped = (Array.isArray(rec.steps) ? rec.steps : []).filter((s) => s && typeof s === "object" && s.network && typeof s.network === "object");
    const rows = (stepped.length
      ? stepped.flatMap((s) => ["agent", "verifier"].map((role) => ["step " + plain(s.name) + ": " + role, isPolicy(s.network[role]) ? s.network[role] : null]))
      : [["agent", policy(rec.posture)], ["verifier", policy(rec.verifier_posture)]]).filter(([, p]) => p);
    if (!rows.length) return h("p", { class: "muted" }, "No network policy recorded.");
    const refused = events.filter((e) => e && e.type === "network_refused" && !e.logged);
    const counted = (e) => typeof e.packets === "number";
    const packets = refused.filter(counted).reduce((n, e) => n + e.packets, 0);
    const requests = refused.filter((e) => !counted(e)).reduce((n, e) => n + (typeof e.dropped === "number" ? e.dropped : 1), 0);
    const said = [
      packets ? packets + " packet(s) dropped by the egress filter" : null,
      requests ? requests + " request(s) refused by the egress proxy (HTTP, CONNECT, TLS or DNS)" : null,
    ].filter((part) => part);
    const text = (p) => {
      let out = String(p.mode) + (p.declared === false ? " (not stated by the task)" : "");
      if (Array.isArray(p.allowed_hosts)) out += ": " + (p.allowed_hosts.length ? p.allowed_hosts.map(String).join(", ") : "no host");
      return out;
    };
    return [
      kvTable(rows.map(([phase, p]) => [phase, h("span", { class: "network-policy" }, visible(text(p)))])),
      said.length ? h("p", { class: "warn" }, "Refused: " + said.join("; ")) : null,
    ];
  }

  function securitySection(rec) {
    const events = Array.isArray(rec.events) ? rec.events : [];
    const tampered = events.filter((e) => e && e.type === "tampering" && e.path);
    const identity = rec.posture && rec.posture.identity;
    const changes = Array.isArray(rec.root_changes) ? rec.root_changes : [];
    return section(
      "security",
      "Tampering and posture",
      identity ? h("p", { class: identity.uid === 0 ? "warn" : "muted", "data-field": "agent-identity" },
        "agent identity: --agent-root " + visible(plain(identity.rule)) + ", ran as " +
        (identity.uid === 0 ? "root (uid 0), boundary: " + visible(plain(identity.boundary)) : "uid " + String(identity.uid)) +
        (identity.wanted_root && identity.uid !== 0 ? " (the task's agent wanted root: " + visible(plain(identity.wanted)) + ")" : "")) : null,
      rec.tampered_verdict === true ? h("p", { class: "warn", "data-field": "tampered-verdict" }, "verdict taken after tampering: a verifier in the agent's container ran after the agent changed what it runs (docs/security.md, A root agent)") : null,
      tampered.length ? [
        h("p", { class: "warn", "data-field": "tampering" }, tampered.length + " tampering change(s): the agent rewrote what a verifier in its container runs (docs/grading.md)"),
        h("ul", null, tampered.slice(0, 50).map((e) => h("li", null, visible(plain(e.kind)) + " " + visible(plain(e.path)) + " — " + visible(plain(e.detail)))))
      ] : null,
      changes.length ? [h("h3", null, "image root changes"), genericView(changes)] : null,
      events.length ? [h("p", { class: "warn" }, events.length + " security event(s)"), genericView(events)] : h("p", { class: "ok" }, "No tampering or other security events."),
      h("h3", null, "network"),
      networkView(rec, events),
      h("h3", null, "posture self-check"),
      rec.posture ? genericView(rec.posture) : h("p", { class: "muted" }, "Not recorded."),
      rec.verifier_posture ? [h("h3", null, "verifier posture"), genericView(rec.verifier_posture)] : null
    );
  }

  function attemptsSection(run, rec, attempts) {
    if (!attempts.length) return section("attempts", "Earlier attempts", h("p", { class: "muted" }, "This is the trial's only attempt."));
    return section(
      "attempts",
      "Earlier attempts",
      h(
        "table",
        { class: "grid" },
        h("thead", null, h("tr", null, ["attempt", "status", "reward", "errors", "started", "finished"].map((x) => h("th", null, x)))),
        h(
          "tbody",
          null,
          attempts.map((a) => {
            const s = a.summary || {};
            return h(
              "tr",
              null,
              h("td", null, h("a", { href: trialHref(run.index, rec.id, s.attempt), class: "attempt-link" }, "#" + plain(s.attempt))),
              h("td", null, badge(s.status)),
              h("td", { class: "num" }, num(s.reward)),
              h("td", null, (s.errors || []).map((e) => visible(plain(e.type))).join(", ") || DASH),
              h("td", null, when(s.started_at)),
              h("td", null, when(s.finished_at))
            );
          })
        )
      )
    );
  }

  function otherFields(rec) {
    const extra = Object.keys(rec).filter((k) => !KNOWN_RECORD_KEYS.has(k) && !PER_PART_KEYS.includes(k));
    const usage = rec.usage || {};
    return section(
      "other",
      "Usage, versions and other fields",
      h("div", { class: "cols" }, h("div", null, h("h3", null, "usage"), genericView(usage)), h("div", null, h("h3", null, "versions"), genericView(rec.versions || {}))),
      extra.length ? [h("h3", null, "fields of a newer version"), kvTable(extra.map((k) => [k, genericView(rec[k])]))] : null
    );
  }

  // ---------------------------------------------------------------- pages: comparison
  function comparePage(ci) {
    const comps = state.index.comparisons || [];
    const c = comps[Number(ci)];
    if (!c) return notFound();
    const picker = comps.length > 1 ? h("p", null, "Comparisons: ", comps.map((x, k) => [k ? " \u00b7 " : "", h("a", { href: route("/compare/" + k), class: k === Number(ci) ? "active" : null }, visible(String(x.title)))])) : null;
    const sides = c.sides || [];
    const s = c.summary || {};
    const deltas = (c.rows || []).map((r) => r.delta).filter(isNum);
    const taskLink = (k, key) => {
      const run = (c.run_index || [])[k];
      return run === null || run === undefined ? visible(key) : h("a", { href: route("/run/" + run + "/trials?q=" + encodeURIComponent(key)) }, visible(key));
    };
    const sideCol = (k) => [
      { key: "m" + k, label: "mean " + String.fromCharCode(65 + k), num: true, get: (r) => (r.sides[k] || {}).mean, render: (r) => (r.sides[k] ? [num(r.sides[k].mean), h("span", { class: "muted" }, " " + int(r.sides[k].successes) + "/" + int(r.sides[k].trials))] : h("span", { class: "muted" }, "absent")) },
      { key: "s" + k, label: "spread " + String.fromCharCode(65 + k), num: true, get: (r) => (r.sides[k] || {}).spread, render: (r) => num((r.sides[k] || {}).spread) },
    ];
    return [
      h("h1", null, visible(String(c.title))),
      picker,
      h("p", null, sides.map((name, k) => [k ? " \u00b7 " : "", h("strong", null, String.fromCharCode(65 + k) + ": "), visible(String(name))])),
      Array.isArray(c.notes) && c.notes.length ? section("compare-notes", "Notes", h("ul", null, c.notes.map((n) => h("li", null, visible(String(n)))))) : null,
      section(
        "compare-headline",
        "Headline",
        h(
          "table",
          { class: "grid" },
          h("thead", null, h("tr", null, h("th", null, ""), sides.map((_, k) => h("th", { class: "num" }, String.fromCharCode(65 + k))), h("th", { class: "num" }, "delta"))),
          h("tbody", null, (c.metrics || []).map((m) => {
            const f = FORMATS[m.format] || ((v) => (isNum(v) ? num(v) : plain(v)));
            const cls = "num delta " + (isNum(m.delta) ? (m.delta > 0 ? "up" : m.delta < 0 ? "down" : "") : "");
            return h("tr", { "data-metric": m.name }, h("th", null, visible(String(m.name))), (m.values || []).map((v) => h("td", { class: "num" }, f(v))), h("td", { class: cls }, isNum(m.delta) ? (m.delta > 0 ? "+" : "") + f(m.delta) : DASH));
          }))
        )
      ),
      section(
        "compare-summary",
        "Paired tasks",
        h(
          "div",
          { class: "cols" },
          kvTable([
            ["paired tasks", int(s.paired)],
            ["blocked pairs", int(s.blocked)],
            ["improved / regressed / unchanged", int(s.improved) + " / " + int(s.regressed) + " / " + int(s.unchanged)],
            ["mean delta", num(s.mean_delta) + (Array.isArray(s.ci) ? " (" + Math.round((s.ci_level || 0.95) * 100) + "% CI [" + num(s.ci[0]) + ", " + num(s.ci[1]) + "])" : "")],
            ["spread of deltas", num(s.delta_spread)],
          ]),
          deltas.length ? histogram(deltas, { min: -1, max: 1, bins: 20, label: "delta histogram", xLabel: "per-task delta of mean reward", cls: "hbar delta" }) : h("p", { class: "muted" }, "No paired tasks.")
        )
      ),
      section(
        "compare-tasks",
        "Per task",
        dataTable({
          id: "compare-" + ci,
          rows: c.rows || [],
          noun: "tasks",
          sort: "delta",
          search: (r) => r.key + " " + (r.flags || []).join(" "),
          filters: [{ key: "blocked", label: "pairs", get: (r) => (r.blocked ? "blocked" : "paired") }],
          columns: [
            { key: "key", label: "task", get: (r) => r.key, render: (r) => taskLink(0, r.key) },
            ...sides.flatMap((_, k) => sideCol(k)),
            { key: "delta", label: "delta", num: true, get: (r) => r.delta, render: (r) => h("span", { class: "delta " + (isNum(r.delta) ? (r.delta > 0 ? "up" : r.delta < 0 ? "down" : "") : "") }, isNum(r.delta) ? (r.delta > 0 ? "+" : "") + num(r.delta) : "blocked") },
            { key: "flags", label: "flags", get: (r) => (r.flags || []).join(", "), render: (r) => (r.flags || []).map((f) => h("span", { class: "flag" }, visible(String(f)))) },
          ],
        })
      ),
    ];
  }

  // ---------------------------------------------------------------- pages: home
  function homePage() {
    const runs = state.index.runs || [];
    return [
      h("h1", null, "Runs"),
      section(
        "runs",
        "Runs",
        h(
          "table",
          { class: "grid" },
          h("thead", null, h("tr", null, ["run", "state", "trials", "mean reward", "success", "errors"].map((x) => h("th", null, x)))),
          h(
            "tbody",
            null,
            runs.map((r) => {
              const s = r.summary || {};
              const errors = Object.values(s.errors_by_status || {}).reduce((a, b) => a + (isNum(b) ? b : 0), 0);
              return h("tr", null, h("td", null, h("a", { href: route("/run/" + r.index) }, visible(r.name))), h("td", null, visible(plain((r.status || {}).state))), h("td", { class: "num" }, int(s.trials)), h("td", { class: "num" }, num(s.mean_reward)), h("td", { class: "num" }, pct(s.success_rate)), h("td", { class: "num" }, int(errors)));
            })
          )
        )
      ),
      (state.index.comparisons || []).length ? section("comparisons", "Comparisons", h("ul", null, state.index.comparisons.map((c, k) => h("li", null, h("a", { href: route("/compare/" + k) }, visible(String(c.title))))))) : null,
    ];
  }

  function notFound() {
    return [h("h1", null, "Not found"), h("p", null, h("a", { href: route("/") }, "Back to the start"))];
  }

  // ---------------------------------------------------------------- render loop
  const app = () => document.getElementById("app");

  function page() {
    const { parts, query } = parseRoute();
    const runs = state.index.runs || [];
    if (!parts.length) return runs.length === 1 ? overviewPage(0) : homePage();
    if (parts[0] === "run") {
      if (parts.length === 2) return overviewPage(parts[1]);
      if (parts[2] === "trials") return trialsPage(parts[1], query);
      if (parts[2] === "trial" && parts.length === 4) return trialPage(parts[1], parts[3], null);
      if (parts[2] === "trial" && parts[4] === "attempt") return trialPage(parts[1], parts[3], parts[5]);
    }
    if (parts[0] === "compare") return comparePage(parts[1] || 0);
    return notFound();
  }

  // Which filter box has the focus (and where its caret is), to give it back after a redraw.
  function focusedFilter() {
    const el = document.activeElement;
    const table = el && el.closest ? el.closest("[data-table]") : null;
    if (!table || !el.matches("input.filter-text")) return null;
    return { table: table.getAttribute("data-table"), start: el.selectionStart, end: el.selectionEnd };
  }

  function render(keepScroll) {
    const y = window.scrollY;
    const focus = keepScroll ? focusedFilter() : null;
    const root = app();
    root.replaceChildren(nav(), h("main", null, page()));
    if (focus) {
      const input = root.querySelector('[data-table="' + CSS.escape(focus.table) + '"] input.filter-text');
      if (input) {
        input.focus();
        input.setSelectionRange(focus.start, focus.end);
      }
    }
    root.setAttribute("data-rendered", String(Number(root.getAttribute("data-rendered") || 0) + 1));
    if (keepScroll) window.scrollTo(0, y);
    else window.scrollTo(0, 0);
  }

  // ---------------------------------------------------------------- live updates
  // A trial page stays as it is while other trials of its run move on.
  function sameTrialShown(before, after) {
    const { parts } = parseRoute();
    if (parts[0] !== "run" || parts[2] !== "trial") return false;
    const find = (index) => {
      const run = (index.runs || [])[Number(parts[1])];
      if (!run) return null;
      const c = (run.columns || []).indexOf("id");
      return JSON.stringify(run.trials.find((row) => row[c] === parts[3]) || null);
    };
    return find(before) === find(after) && find(after) !== "null";
  }

  async function poll() {
    let delay = 1000;
    try {
      const res = await fetch("/api/version", { cache: "no-store" });
      if (!res.ok) throw new Error("HTTP " + res.status);
      const v = await res.json();
      state.connected = true;
      const fp = JSON.stringify(v.fingerprints);
      if (fp !== state.fingerprint) {
        const idx = await fetch("/api/index", { cache: "no-store" });
        if (idx.ok) {
          const before = state.index;
          state.index = await idx.json();
          state.fingerprint = JSON.stringify(state.index.runs.map((r) => r.fingerprint));
          state.updated = new Date().toLocaleTimeString();
          if (!sameTrialShown(before, state.index)) {
            state.details.clear();
            render(true);
          }
        }
      }
      if (!v.running) delay = 3000;
      const el = document.getElementById("live");
      if (el) {
        el.className = "live on";
        el.textContent = "live \u00b7 updated " + (state.updated || "");
      }
    } catch (err) {
      state.connected = false;
      delay = 3000;
      const el = document.getElementById("live");
      if (el) {
        el.className = "live off";
        el.textContent = "disconnected";
      }
    }
    setTimeout(poll, delay);
  }

  function start() {
    const el = document.getElementById("harness-index");
    state.index = JSON.parse(el.textContent);
    state.live = !!state.index.live && location.protocol.startsWith("http");
    state.fingerprint = JSON.stringify((state.index.runs || []).map((r) => r.fingerprint));
    state.updated = new Date().toLocaleTimeString();
    window.addEventListener("hashchange", () => render(false));
    render(false);
    if (state.live) setTimeout(poll, 1000);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
