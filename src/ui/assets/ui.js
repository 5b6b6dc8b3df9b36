// weft ui: live pages. The server renders every page; this script only keeps the open page's
// body current, from the server-sent events of /live (one event "main" per change). Without it,
// every page still works (forms post, links navigate).
(function () {
  "use strict";
  var main = document.getElementById("main");
  var status = document.getElementById("live");
  if (!main || !main.dataset.live || !window.EventSource) { return; }
  var say = function (text) { if (status) { status.textContent = text; } };
  var source = new EventSource("/live?path=" + encodeURIComponent(main.dataset.live) +
    "&version=" + encodeURIComponent(main.dataset.version || ""));
  source.addEventListener("open", function () { say("live"); });
  source.addEventListener("error", function () { say("reconnecting…"); });
  source.addEventListener("main", function (e) {
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
  });
})();
