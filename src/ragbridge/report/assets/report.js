(function () {
  "use strict";
  var root = document.documentElement;
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
    if (count) { count.textContent = shown + " of " + (cases.length + nLines) + " cases"; }
  }
  if (filter) { filter.addEventListener("input", apply); }
  if (below) { below.addEventListener("change", apply); }
  boxes.forEach(function (b) { b.addEventListener("change", apply); });

  function setAll(open) { cases.forEach(function (c) { if (!c.hidden) { c.open = open; } }); }
  var ex = document.getElementById("expand-all");
  var co = document.getElementById("collapse-all");
  if (ex) { ex.addEventListener("click", function () { setAll(true); }); }
  if (co) { co.addEventListener("click", function () { setAll(false); }); }

  function openHash() {
    var id = "";
    try { id = decodeURIComponent(location.hash.slice(1)); } catch (e) { return; }
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
  root.setAttribute("data-stub-notice-drawn", String(drawn(".stub-banner")));
  root.setAttribute("data-report-ready", "1");
})();
