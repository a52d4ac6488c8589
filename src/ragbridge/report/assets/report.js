(function () {
  "use strict";
  var root = document.documentElement;
  var filter = document.getElementById("case-filter");
  var boxes = Array.prototype.slice.call(document.querySelectorAll("input[data-flag]"));
  var cases = Array.prototype.slice.call(document.querySelectorAll("details.case"));
  var count = document.getElementById("case-count");
  var below = document.getElementById("below-metric");

  function apply() {
    var text = (filter && filter.value || "").toLowerCase().trim();
    var need = boxes.filter(function (b) { return b.checked; }).map(function (b) { return b.getAttribute("data-flag"); });
    var metric = below ? below.value : "";
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
    if (count) { count.textContent = shown + " of " + cases.length + " cases"; }
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
  }
  window.addEventListener("hashchange", openHash);
  openHash();

  // Layout check, readable by tests and tools: how many plots and tables have a non-empty box.
  function drawn(selector) {
    return Array.prototype.filter.call(document.querySelectorAll(selector), function (el) {
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
