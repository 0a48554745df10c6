/* proctor report: draws the plotly figures and pages through the items, both read from the
   JSON inlined in the page. Item rows and their details are built on demand (a page of
   rows at a time, a detail when its row is opened), from text nodes only: no HTML is ever
   parsed from the data. */
(function () {
  "use strict";

  function readJSON(id) {
    return JSON.parse(document.getElementById(id).textContent);
  }

  function el(tag, attrs) {
    const node = document.createElement(tag);
    Object.entries(attrs || {}).forEach(function ([key, value]) {
      if (value === false || value === null || value === undefined) return;
      if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : value);
    });
    for (let i = 2; i < arguments.length; i++) {
      const child = arguments[i];
      if (child === null || child === undefined) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function fmt(x, digits) {
    if (x === null || x === undefined) return "—";
    return Number.isInteger(x) ? String(x) : x.toFixed(digits === undefined ? 3 : digits);
  }

  function clip(text) {
    return text.length <= 80 ? text : text.slice(0, 79) + "…";
  }

  // ---- charts ----------------------------------------------------------------------------

  function drawCharts(charts) {
    document.querySelectorAll("div.chart").forEach(function (div) {
      const figure = charts.figures[div.dataset.chart];
      const layout = Object.assign({}, figure.layout, {template: charts.template});
      Plotly.newPlot(div, figure.data, layout, charts.config);
    });
  }

  // ---- item details ------------------------------------------------------------------------

  function mark(score, kind) {
    if (kind === "perplexity" || score === null || score === undefined) return {text: "", cls: ""};
    if (score >= 1) return {text: "✓", cls: "ok"};
    if (score <= 0) return {text: "✗", cls: "bad"};
    return {text: fmt(score), cls: "part"};
  }

  function softmax(logits) {
    const values = logits.map(function (v) { return v === null ? -Infinity : v; });   // JSON has no -inf
    const top = Math.max.apply(null, values);
    const weights = values.map(function (v) { return Math.exp(v - top); });
    const total = weights.reduce(function (a, b) { return a + b; }, 0);
    return weights.map(function (w) { return w / total; });
  }

  function promptBlock(data, item, task) {
    if (!task.saved || item.x === null) return el("p", {class: "note"}, data.notSaved);
    const box = el("div", {class: "prompt"});
    if (task.prefix) {
      box.append(el("details", {},
        el("summary", {}, "instruction and examples every item of this task begins with (" +
          task.prefix.length + " characters)"),
        el("pre", {}, task.prefix)));
    }
    box.append(el("pre", {}, item.x));
    return box;
  }

  function choicesTable(data, item) {
    const runs = data.runs;
    const count = Math.max.apply(null, item.r.map(function (r) { return r ? r.lp.length : 0; }));
    const probs = item.r.map(function (r) { return r ? softmax(r.lp) : null; });
    const head = el("tr", {}, el("th", {}, "gold"), el("th", {}, "choice"));
    runs.forEach(function (label) { head.append(el("th", {class: "num"}, label + " log p"), el("th", {class: "num"}, label + " p")); });
    const table = el("table", {class: "choices"}, el("thead", {}, head));
    const body = el("tbody");
    for (let j = 0; j < count; j++) {
      const text = item.c && j < item.c.length ? item.c[j] : "choice " + j;
      const row = el("tr", {class: j === item.gi ? "gold" : ""}, el("td", {}, j === item.gi ? "★" : ""),
        el("td", {class: "wrap"}, el("code", {}, text)));
      item.r.forEach(function (r, i) {
        const picked = r && r.p === j;
        row.append(el("td", {class: "num" + (picked ? " pick" : "")}, r ? fmt(r.lp[j], 3) : "—"),
          el("td", {class: "num" + (picked ? " pick" : "")}, probs[i] ? fmt(probs[i][j], 3) : "—"));
      });
      body.append(row);
    }
    table.append(body);
    return el("div", {}, table, el("p", {class: "note"}, "★ gold; bold: the choice each run picked (by the task's primary metric); p: softmax over the choices' log-probabilities."));
  }

  function samplesBlock(data, item) {
    const box = el("div", {class: "samples"});
    item.r.forEach(function (r, i) {
      const label = data.runs[i];
      if (!r) { box.append(el("p", {class: "note"}, label + ": not in this run")); return; }
      box.append(el("h4", {}, label + " — " + r.o.length + " sample(s)"));
      r.o.forEach(function (s, k) {
        const facts = ["finish: " + s.f, s.n + " tokens"];
        if ("e" in s) facts.push("extracted: " + (s.e === null || s.e === "" ? "(nothing)" : JSON.stringify(s.e)));
        if ("oc" in s) facts.push("outcome: " + s.oc);
        if ("ok" in s) facts.push(s.ok ? "right" : "wrong");
        box.append(el("details", {open: k === 0 && r.o.length <= 4}, el("summary", {}, "sample " + (k + 1) + " · " + facts.join(" · ")),
          el("pre", {}, s.text)));
      });
    });
    return box;
  }

  function totalsBlock(data, item) {
    const list = el("ul");
    item.r.forEach(function (r, i) {
      list.append(el("li", {}, data.runs[i] + ": " + (r ? r.a + ", " + r.b + " bytes, " + fmt(r.s, 4) + " bits per byte" : "not in this run")));
    });
    return list;
  }

  function detail(data, item) {
    const task = data.tasks[item.t];
    const box = el("div", {class: "detail-body"},
      el("p", {}, el("strong", {}, "gold: "), item.g === null ? "— (no gold answer)" : el("code", {}, item.g)),
      el("h4", {}, "prompt"), promptBlock(data, item, task));
    if (task.kind === "choice") box.append(el("h4", {}, "choices"), choicesTable(data, item));
    else if (task.kind === "generation") box.append(samplesBlock(data, item));
    else box.append(totalsBlock(data, item));
    return box;
  }

  // ---- item lists ------------------------------------------------------------------------

  function haystack(data, item) {
    const parts = [data.tasks[item.t].name, item.q, item.g || "", item.x || "", (item.c || []).join("\n")];
    item.r.forEach(function (r) {
      if (!r) return;
      parts.push(r.a);
      (r.o || []).forEach(function (s) { parts.push(s.text); });
    });
    return parts.join("\n").toLowerCase();
  }

  function ItemList(root, data, indices) {
    this.root = root;
    this.data = data;
    this.indices = indices;
    this.flipped = data.flips ? new Set(data.flips) : null;
    this.body = root.querySelector("tbody");
    this.columns = root.querySelectorAll("thead th").length;
    this.page = 0;
    this.texts = null;   // lower-cased text of each item, built on the first filter
    this.role = function (name) { return root.querySelector('[data-role="' + name + '"]'); };
    this.setUp();
    this.update();
  }

  ItemList.prototype.setUp = function () {
    const self = this;
    const counts = new Map();
    this.indices.forEach(function (i) { const t = self.data.items[i].t; counts.set(t, (counts.get(t) || 0) + 1); });
    const select = this.role("task");
    select.append(el("option", {value: ""}, "every task (" + this.indices.length + ")"));
    counts.forEach(function (n, t) { select.append(el("option", {value: String(t)}, self.data.tasks[t].name + " (" + n + ")")); });
    select.addEventListener("change", function () { self.page = 0; self.update(); });
    let timer = null;
    this.role("filter").addEventListener("input", function () {
      clearTimeout(timer);
      timer = setTimeout(function () { self.page = 0; self.update(); }, 150);
    });
    const toggle = this.role("flipped");
    if (toggle) toggle.addEventListener("change", function () { self.page = 0; self.update(); });
    this.role("prev").addEventListener("click", function () { self.page -= 1; self.render(); });
    this.role("next").addEventListener("click", function () { self.page += 1; self.render(); });
    this.body.addEventListener("click", function (event) {
      const row = event.target.closest("tr.item");
      if (row && self.body.contains(row)) self.toggle(row);
    });
  };

  ItemList.prototype.update = function () {
    const self = this;
    const task = this.role("task").value;
    const needle = this.role("filter").value.trim().toLowerCase();
    const toggle = this.role("flipped");
    const onlyFlipped = toggle && toggle.checked;
    if (needle && !this.texts) this.texts = new Map();
    this.visible = this.indices.filter(function (i) {
      const item = self.data.items[i];
      if (task !== "" && String(item.t) !== task) return false;
      if (onlyFlipped && !self.flipped.has(i)) return false;
      if (!needle) return true;
      if (!self.texts.has(i)) self.texts.set(i, haystack(self.data, item));
      return self.texts.get(i).includes(needle);
    });
    this.render();
  };

  ItemList.prototype.render = function () {
    const size = this.data.pageSize;
    const pages = Math.max(1, Math.ceil(this.visible.length / size));
    this.page = Math.min(Math.max(this.page, 0), pages - 1);
    const rows = this.visible.slice(this.page * size, (this.page + 1) * size).map(this.row, this);
    this.body.replaceChildren.apply(this.body, rows);
    this.role("page").textContent = "page " + (this.page + 1) + " of " + pages + " · " + this.visible.length + " item(s)";
    this.role("prev").disabled = this.page === 0;
    this.role("next").disabled = this.page >= pages - 1;
  };

  ItemList.prototype.row = function (i) {
    const item = this.data.items[i];
    const task = this.data.tasks[item.t];
    // a query id usually repeats its task's name: show what follows it
    const id = item.q.startsWith(task.name + "#") ? item.q.slice(task.name.length) : item.q;
    const row = el("tr", {class: "item", "data-item": String(i), tabindex: "0"},
      el("td", {class: "key"}, task.name), el("td", {class: "key"}, id),
      el("td", {class: "wrap"}, item.g === null ? "—" : clip(item.g)));
    item.r.forEach(function (r) {
      if (!r) { row.append(el("td", {}, "—")); return; }
      const m = mark(r.s, task.kind);
      row.append(el("td", {class: "wrap " + m.cls}, clip(r.a) + (m.text ? " " + m.text : "")));
    });
    row.addEventListener("keydown", function (event) { if (event.key === "Enter") row.click(); });
    return row;
  };

  ItemList.prototype.toggle = function (row) {
    const next = row.nextElementSibling;
    if (next && next.classList.contains("detail")) { next.remove(); row.classList.remove("open"); return; }
    const item = this.data.items[Number(row.dataset.item)];
    row.after(el("tr", {class: "detail"}, el("td", {colspan: String(this.columns)}, detail(this.data, item))));
    row.classList.add("open");
  };

  // ---- start ------------------------------------------------------------------------------

  const data = readJSON("report-data");
  document.querySelectorAll("div.item-list").forEach(function (root) {
    const all = data.items.map(function (_, i) { return i; });
    new ItemList(root, data, root.dataset.source === "flips" ? data.flips : all);
  });
  // plotly.js travels gzipped (proctor/report/html.py): unpack it, run it as an inline script
  // (the page's policy allows its hash), then draw
  function loadPlotly() {
    const packed = document.getElementById("plotly-packed");
    if (typeof Plotly !== "undefined" || !packed) return Promise.resolve();
    const bytes = Uint8Array.from(atob(packed.textContent), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Response(stream).text().then((code) => {
      const script = document.createElement("script");
      script.textContent = code;
      document.head.appendChild(script);
    });
  }

  loadPlotly().then(() => drawCharts(readJSON("report-charts")));
})();
