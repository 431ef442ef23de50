// Live updates for every console page: one EventSource per page, nothing polled.
// Reverie.live.on(name, fn) calls fn(data, event) for each server-sent event `name`
// (state, turn, fork, sleep, schedule, notice, journal; chat on the chat page).
// Reverie.post(url, body) sends JSON with the page's CSRF token and returns the parsed reply.
(function () {
  "use strict";
  var meta = document.querySelector('meta[name="csrf-token"]');
  var csrf = meta ? meta.content : "";
  var handlers = {};
  var source = null;
  var status = document.getElementById("live-status");

  function show(text, cls) {
    if (!status) return;
    status.textContent = text;
    status.className = "live " + cls;
  }

  function listen(name) {
    source.addEventListener(name, function (event) {
      var data;
      try { data = JSON.parse(event.data); } catch (e) { return; }
      (handlers[name] || []).forEach(function (fn) {
        try { fn(data, event); } catch (e) { console.error(e); }
      });
    });
  }

  function on(name, fn) {
    if (!handlers[name]) {
      handlers[name] = [];
      if (source) listen(name);
    }
    handlers[name].push(fn);
  }

  function connect() {
    var url = document.body.getAttribute("data-live") || "/events";
    source = new EventSource(url);
    Object.keys(handlers).forEach(listen);
    source.onopen = function () { show("live", "on"); };
    source.onerror = function () {
      // The browser retries by itself unless the server refused the stream (logged out).
      if (source.readyState === EventSource.CLOSED) show("offline: reload to reconnect", "off");
      else show("reconnecting…", "wait");
    };
  }

  function setState(data) {
    var badge = document.getElementById("state-badge");
    var text = document.getElementById("state-text");
    if (!badge || !text) return;
    badge.className = "badge state-" + data.state;
    text.textContent = data.state + (data.phase ? " · " + data.phase : "");
    document.body.setAttribute("data-state", data.state);
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify(body || {})
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        data.status = response.status;
        data.ok = response.ok;
        return data;
      });
    });
  }

  window.Reverie = window.Reverie || {};
  window.Reverie.live = { on: on };
  window.Reverie.post = post;
  window.Reverie.csrf = csrf;
  on("hello", function (data) {
    setState(data);
    document.body.setAttribute("data-live-ready", "1");
  });
  on("state", setState);
  // A page left for another is kept alive in the back-forward cache, its stream with it:
  // close the stream on the way out (the server lets its chat client go), reopen on return.
  window.addEventListener("pagehide", function () { if (source) source.close(); });
  window.addEventListener("pageshow", function (event) { if (event.persisted) connect(); });
  // Connect once every script of the page has run, so none misses the first events.
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", connect);
  else connect();
})();
