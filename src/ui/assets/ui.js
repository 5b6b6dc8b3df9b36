// weft ui: live pages. The server renders every page; this script only keeps the open page's
// body current, from the server-sent events of /live (one event "main" per change). Without it,
// every page still works (forms post, links navigate).
//
// A browser opens at most six connections to one host, and each live page holds one: a page
// left (kept in the back-forward cache) closes its stream, or six pages visited in turn would
// hold every connection and the seventh request (a form's post) would wait until one ends.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var status = document.getElementById("live");
  if (!main || !main.dataset.live || !window.EventSource) { return; }
  var say = function (text) { if (status) { status.textContent = text; } };
  var source = null;
  var show = function (e) {
    // Keep what the user opened or folded, and the field they are typing in.
    var active = document.activeElement;
    if (active && main.contains(active) && active.tagName === "INPUT" && active.value) { return; }
    var open = {};
    main.querySelectorAll("details[id]").forEach(function (d) { open[d.id] = d.open; });
    main.innerHTML = e.data;
    main.querySelectorAll("details[id]").forEach(function (d) {
      if (Object.prototype.hasOwnProperty.call(open, d.id)) { d.open = open[d.id]; }
    });
    main.dataset.updated = String(Date.now());
    say("live, updated " + new Date().toLocaleTimeString());
  };
  var connect = function (version) {
    source = new EventSource("/live?path=" + encodeURIComponent(main.dataset.live) +
      "&version=" + encodeURIComponent(version));
    source.addEventListener("open", function () { say("live"); });
    source.addEventListener("error", function () { say("reconnecting…"); });
    source.addEventListener("main", show);
  };
  connect(main.dataset.version || "");
  window.addEventListener("pagehide", function () {
    if (source) { source.close(); source = null; }
  });
  window.addEventListener("pageshow", function (e) {
    // Back from the back-forward cache: the body may be old, so the stream sends the current
    // one (no version is claimed).
    if (e.persisted && !source) { connect(""); }
  });
})();
