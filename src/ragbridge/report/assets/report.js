(function () {
  "use strict";
  var root = document.documentElement;
  // a count as the rest of the page writes it (1,000,000), whatever the browser's language
  function many(n) { return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
  var filter = document.getElementById("case-filter");
  var boxes = Array.prototype.slice.call(document.querySelectorAll("input[data-flag]"));
  var cases = Array.prototype.slice.call(document.querySelectorAll("details.case"));
  var pages = Array.prototype.slice.call(document.querySelectorAll("details.page")).map(function (p) {
    var pre = p.querySelector("pre.crows");
    var lines = pre.textContent.split("\n");
    var n = parseInt(pre.getAttribute("data-head"), 10) || 0;
    var at = (pre.getAttribute("data-flags-at") || "0:0").split(":").map(Number);
    return {el: p, pre: pre, head: lines.slice(0, n), lines: lines.slice(n), flagsAt: at,
            cols: JSON.parse(pre.getAttribute("data-cols") || "[]")};
  });
  var nLines = pages.reduce(function (a, p) { return a + p.lines.length; }, 0);
  var count = document.getElementById("case-count");
  var below = document.getElementById("below-metric");
  var MARK = "\u2717";
  // a score line's flags column: e errored, u undefined, \u2260 verdicts differ, MARK below a threshold
  var LINE_FLAG = {error: "e", undefined: "u", disagree: "\u2260", fail: MARK};

  function apply() {
    var text = (filter && filter.value || "").toLowerCase().trim();
    var need = boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.getAttribute("data-flag"); });
    var metric = below ? below.value : "";
    var active = !!(text || need.length || metric);
    var shown = 0;
    cases.forEach(function (c) {
      var flags = (c.getAttribute("data-flags") || "").split(" ");
      var low = (c.getAttribute("data-below") || "").split(" ");
      var ok = (!text || (c.getAttribute("data-search") || "").indexOf(text) >= 0) &&
        need.every(function (f) { return flags.indexOf(f) >= 0; }) &&
        (!metric || (metric === "*" ? flags.indexOf("fail") >= 0 : low.indexOf(metric) >= 0));
      c.hidden = !ok;
      if (ok) { shown += 1; }
    });
    pages.forEach(function (p) {  // a filter keeps a page's matching lines, opens it, hides an empty one
      var cols = p.cols.filter(function (c) { return c[0] === metric; });
      var kept = p.lines.filter(function (line) {
        var flags = line.slice(p.flagsAt[0], p.flagsAt[1]);
        return (!text || line.toLowerCase().indexOf(text) >= 0) &&
          need.every(function (f) { return flags.indexOf(LINE_FLAG[f]) >= 0; }) &&
          (!metric || (metric === "*" ? flags.indexOf(MARK) >= 0 :
            cols.some(function (c) { return line.slice(c[1], c[2]).indexOf(MARK) >= 0; })));
      });
      p.pre.textContent = p.head.concat(kept).join("\n");
      p.el.hidden = active && !kept.length;
      if (active && kept.length) { p.el.open = true; }
      shown += kept.length;
    });
    if (count) { count.textContent = many(shown) + " of " + many(cases.length + nLines) + " cases"; }
  }
  if (filter) { filter.addEventListener("input", apply); }
  if (below) { below.addEventListener("change", apply); }
  boxes.forEach(function (b) { b.addEventListener("change", apply); });

  function setAll(open) { cases.forEach(function (c) { if (!c.hidden) { c.open = open; } }); }
  var ex = document.getElementById("expand-all");
  var co = document.getElementById("collapse-all");
  if (ex) { ex.addEventListener("click", function () { setAll(true); }); }
  if (co) { co.addEventListener("click", function () { setAll(false); }); }

  // The cases at a glance: filter by tag, sort worst first, by id, or by a column (lowest first).
  // The state is in the address (#grid:tag=T&sort=S), so a link shows the same view.
  var gridTable = document.getElementById("case-grid");
  var gridTag = document.getElementById("grid-tag");
  var gridSort = document.getElementById("grid-sort");
  var gridRows = gridTable ? Array.prototype.slice.call(gridTable.tBodies[0].rows) : [];
  function cellValue(row, key) {
    var cells = row.querySelectorAll("td[data-col]");
    for (var i = 0; i < cells.length; i++) {
      if (cells[i].getAttribute("data-col") === key) {
        var v = cells[i].getAttribute("data-v");
        return v === "" ? Infinity : parseFloat(v);
      }
    }
    return Infinity;
  }
  function applyGrid(write) {
    if (!gridTable) { return; }
    var tag = gridTag ? gridTag.value : "";
    var sort = gridSort ? gridSort.value : "worst";
    var rows = gridRows.slice();
    if (sort === "id") {
      rows.sort(function (a, b) { return a.getAttribute("data-case") < b.getAttribute("data-case") ? -1 : 1; });
    } else if (sort !== "worst") {
      rows.sort(function (a, b) {
        var d = cellValue(a, sort) - cellValue(b, sort);
        return d || (+a.getAttribute("data-rank") - +b.getAttribute("data-rank"));
      });
    }
    var body = gridTable.tBodies[0];
    var shown = 0, first = "";
    rows.forEach(function (r) {
      var ok = !tag || (r.getAttribute("data-tags") || "").split("\n").indexOf(tag) >= 0;
      r.hidden = !ok;
      if (ok) { shown += 1; if (!first) { first = r.getAttribute("data-case"); } }
      body.appendChild(r);
    });
    Array.prototype.forEach.call(gridTable.querySelectorAll("thead th"), function (th) {
      var b = th.querySelector("button[data-sort]");
      th.className = b && b.getAttribute("data-sort") === sort ? "sorted" : "";
    });
    var c = document.getElementById("grid-count");
    if (c) { c.textContent = many(shown) + " of " + many(gridRows.length) + " cases"; }
    root.setAttribute("data-grid-shown", String(shown));
    root.setAttribute("data-grid-first", first);
    root.setAttribute("data-grid-sort", sort);
    root.setAttribute("data-grid-tag", tag);
    if (write && history.replaceState) {
      history.replaceState(null, "", "#grid:" + (tag ? "tag=" + encodeURIComponent(tag) + "&" : "") +
                           "sort=" + encodeURIComponent(sort));
    }
  }
  function gridFromHash(hash) {
    var state = {};
    hash.slice(5).split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) { state[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1)); }
    });
    function choose(sel, v) {
      if (sel && v !== undefined && Array.prototype.some.call(sel.options, function (o) { return o.value === v; })) {
        sel.value = v;
      }
    }
    choose(gridTag, state.tag);
    choose(gridSort, state.sort);
    applyGrid(false);
    var section = document.getElementById("grid");
    if (section) { section.scrollIntoView(); }
  }
  if (gridTag) { gridTag.addEventListener("change", function () { applyGrid(true); }); }
  if (gridSort) { gridSort.addEventListener("change", function () { applyGrid(true); }); }
  if (gridTable) {
    Array.prototype.forEach.call(gridTable.querySelectorAll("button[data-sort]"), function (b) {
      b.addEventListener("click", function () {
        if (gridSort) { gridSort.value = b.getAttribute("data-sort"); }
        applyGrid(true);
      });
    });
  }
  applyGrid(false);

  function openHash() {
    var id = "";
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
    if (id.indexOf("grid:") === 0) { gridFromHash(location.hash.slice(1)); return; }
    var el = id && document.getElementById(id);
    if (el && el.tagName === "DETAILS") { el.hidden = false; el.open = true; el.scrollIntoView(); }
    if (!el && id.indexOf("case-") === 0 && filter && pages.length) {  // a case on a score line
      filter.value = id.slice(5);
      apply();
      filter.scrollIntoView();
    }
  }
  window.addEventListener("hashchange", openHash);
  openHash();

  // Layout check, readable by tests and tools: how many plots and tables have a non-empty box. What a
  // closed <details> holds (but its summary) is not on screen, and is not measured: measuring it
  // would make the browser lay out every closed case.
  function folded(el) {
    for (var d = el.closest("details:not([open])"); d; d = d.parentElement && d.parentElement.closest("details:not([open])")) {
      var s = el.closest("summary");
      if (!s || s.parentElement !== d) { return true; }
    }
    return false;
  }
  function drawn(selector) {
    return Array.prototype.filter.call(document.querySelectorAll(selector), function (el) {
      if (folded(el)) { return false; }
      var r = el.getBoundingClientRect();
      return r.width > 0 && r.height > 0;
    }).length;
  }
  root.setAttribute("data-plots-drawn", String(drawn("svg.plot")));
  root.setAttribute("data-tables-drawn", String(drawn("main table")));
  root.setAttribute("data-badges-drawn", String(drawn(".chip-fail")));
  root.setAttribute("data-grid-fail-drawn", String(drawn("#case-grid tr:not([hidden]) td.g-fail")));
  root.setAttribute("data-grid-pass-drawn", String(drawn("#case-grid tr:not([hidden]) td.g-pass")));
  root.setAttribute("data-stub-notice-drawn", String(drawn(".stub-banner")));
  root.setAttribute("data-report-ready", "1");
})();
