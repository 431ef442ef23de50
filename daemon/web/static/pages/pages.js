// The console pages' live parts: a section marked data-live="event …" is fetched again from
// the server when the daemon sends one of those events over /events (core's Reverie.live).
// Nothing runs on a timer: no event, no request.
(function () {
  "use strict";

  // A page answering a form (POST /memory/retract …) shows the page it came from: say so in
  // the address bar, so a reload or a live refresh asks for that page, not the form again.
  var canonical = document.querySelector("meta[name='reverie-page']");
  if (canonical && canonical.content && location.pathname !== canonical.content.split("?")[0]) {
    history.replaceState(null, "", canonical.content);
  }

  var pending = {};

  function refresh(id) {
    fetch(location.pathname + location.search, {
      credentials: "same-origin",
      headers: { Accept: "text/html" },
    })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        if (html === null) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById(id);
        var old = document.getElementById(id);
        // A section with an open form or a focused field is left alone: never lose typing.
        if (fresh && old && !old.contains(document.activeElement)) {
          old.replaceWith(fresh);
        }
      })
      .catch(function () {});
  }

  // Several events at once (a turn's end, its journal note) refresh a section once.
  function soon(id) {
    if (pending[id]) return;
    pending[id] = true;
    setTimeout(function () {
      pending[id] = false;
      refresh(id);
    }, 250);
  }

  if (!window.Reverie || !window.Reverie.live) return;
  document.querySelectorAll("[data-live]").forEach(function (section) {
    if (!section.id) return;
    section
      .getAttribute("data-live")
      .split(/\s+/)
      .forEach(function (name) {
        if (name) window.Reverie.live.on(name, function () { soon(section.id); });
      });
  });
})();
