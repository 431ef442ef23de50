// The chat page: a client of the daemon's chat gateway over this page's event stream.
// Frames arrive as `chat` events (the socket's frames: accepted, delta, tool, done, error,
// approval, approval_settled, notice); what the person says goes out as POSTs naming the
// page's client. A message is marked sent only once the daemon acknowledged it (on disk).
(function () {
  "use strict";
  var log = document.getElementById("chat-log");
  var form = document.getElementById("chat-form");
  var input = document.getElementById("chat-input");
  var sendButton = document.getElementById("chat-send");
  var stopButton = document.getElementById("chat-stop");
  var client = null;
  var turns = {};
  // Turns of this page's still being answered, oldest first (Stop cancels the oldest).
  var running = [];

  function runningChanged() {
    stopButton.hidden = running.length === 0;
  }

  function started(id) {
    if (running.indexOf(id) < 0) running.push(id);
    runningChanged();
  }

  function ended(id) {
    running = running.filter(function (t) { return t !== id; });
    runningChanged();
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function add(node) {
    var empty = document.getElementById("chat-empty");
    if (empty) empty.remove();
    var atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    log.appendChild(node);
    if (atBottom) log.scrollTop = log.scrollHeight;
  }

  function meta(node, text) {
    var m = node.querySelector(".meta");
    if (!m) { m = el("span", "meta"); node.appendChild(m); }
    m.textContent = text;
  }

  function turn(id) {
    var t = turns[id];
    if (!t) {
      var node = el("div", "msg agent streaming");
      node.setAttribute("data-turn", id);
      var body = el("div", "body");
      var tools = el("ul", "tools");
      node.appendChild(body);
      node.appendChild(tools);
      add(node);
      t = turns[id] = { node: node, body: body, tools: tools, calls: {} };
    }
    return t;
  }

  function toolLine(t, frame) {
    // One line per call, its phases on it: a later phase goes to the oldest call of that
    // name in that fork still running (a fork's own line is its `fork` call).
    var key = (frame.fork_id || "") + "/" + frame.name;
    var li = null;
    if (frame.phase !== "started") {
      var running = t.tools.querySelectorAll("li.running");
      for (var i = 0; i < running.length && !li; i++) {
        if (running[i].getAttribute("data-key") === key) li = running[i];
      }
    }
    if (!li) {
      li = el("li", "running");
      li.style.paddingLeft = ((frame.depth || 0) * 1.2) + "rem";
      li.setAttribute("data-key", key);
      li.setAttribute("data-tool", frame.name);
      if (frame.fork_id) li.setAttribute("data-fork", frame.fork_id);
      t.tools.appendChild(li);
    }
    var label = frame.name === "fork" && frame.fork_id ? "fork " + frame.fork_id : frame.name;
    if (frame.summary) li.setAttribute("data-what", frame.summary);
    var what = frame.detail || li.getAttribute("data-what") || "";
    if (frame.phase === "finished") li.className = frame.is_error ? "failed" : "done";
    li.textContent = label + (what ? " — " + what : "");
  }

  function approval(frame) {
    var card = el("div", "approval");
    card.setAttribute("data-id", frame.id);
    card.appendChild(el("strong", null, "May I run " + frame.tool + "?"));
    card.appendChild(el("p", null, frame.summary || ""));
    if (frame.subject) card.appendChild(el("code", null, frame.subject));
    if (frame.preview) card.appendChild(el("pre", null, frame.preview));
    var answers = el("div", "answers");
    [["yes", "Allow", "primary"], ["always", "Always allow " + (frame.pattern || ""), ""], ["no", "Deny", ""]].forEach(function (a) {
      var b = el("button", a[2], a[1]);
      b.type = "button";
      b.setAttribute("data-decision", a[0]);
      b.addEventListener("click", function () { answer(card, frame.id, a[0]); });
      answers.appendChild(b);
    });
    card.appendChild(answers);
    card.appendChild(el("p", "muted status", "No answer within " + Math.round(frame.timeout_s) + " s is a no."));
    // In place: inside the turn that asks, under its tool calls.
    if (frame.turn_id) turn(frame.turn_id).node.appendChild(card);
    else add(card);
    log.scrollTop = log.scrollHeight;
  }

  function settle(card, text) {
    card.classList.add("settled");
    card.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    card.querySelector(".status").textContent = text;
  }

  function answer(card, id, decision) {
    card.querySelectorAll("button").forEach(function (b) { b.disabled = true; });
    Reverie.post("/chat/approve", { client: client, id: id, decision: decision }).then(function (r) {
      if (!r.ok) {
        settle(card, r.message || "the answer was refused");
        card.classList.add("failed");
      }
    });
  }

  function onFrame(frame) {
    var t;
    switch (frame.type) {
      case "accepted":
        turn(frame.turn_id);
        break;
      case "delta":
        t = turn(frame.turn_id);
        t.body.textContent += frame.text;
        break;
      case "tool":
        toolLine(turn(frame.turn_id), frame);
        break;
      case "done":
        delete waiting[frame.turn_id];
        ended(frame.turn_id);
        t = turn(frame.turn_id);
        if (t.node.classList.contains("waiting")) {
          t.node.classList.remove("waiting");
          meta(t.node, "");
        }
        if (!t.body.textContent && frame.text) t.body.textContent = frame.text;
        t.node.classList.remove("streaming");
        t.node.setAttribute("data-done", "1");
        break;
      case "error":
        if (frame.turn_id && frame.code === "model_unavailable") {
          // The model is down: the message stays queued and is answered once it is back.
          t = turn(frame.turn_id);
          t.node.classList.add("waiting");
          meta(t.node, frame.message);
        } else if (frame.turn_id) {
          ended(frame.turn_id);
          t = turn(frame.turn_id);
          t.node.classList.remove("streaming");
          t.node.classList.add("failed");
          t.node.setAttribute("data-done", "1");
          meta(t.node, frame.message);
        }
        break;
      case "approval":
        approval(frame);
        break;
      case "approval_settled":
        var card = log.querySelector('.approval[data-id="' + frame.id + '"]');
        if (card) {
          var said = { yes: "allowed", always: "allowed from now on", no: "denied" }[frame.answer];
          settle(card, said ? "Answered: " + said + "." : "Not answered (" + frame.by + "): the call did not run.");
          card.setAttribute("data-answer", frame.answer || "none");
        }
        break;
      case "notice":
        var n = el("div", "msg notice", frame.text);
        n.setAttribute("data-notice", frame.id);
        add(n);
        Reverie.post("/chat/seen", { client: client, ids: [frame.id] });
        break;
    }
  }

  function send(text) {
    var mine = el("div", "msg person", text);
    mine.setAttribute("data-state", "sending");
    meta(mine, "sending…");
    add(mine);
    log.scrollTop = log.scrollHeight;
    return Reverie.post("/chat/message", { client: client, text: text }).then(function (r) {
      if (r.ok && r.type === "accepted") {
        mine.setAttribute("data-state", "sent");
        mine.setAttribute("data-turn", r.turn_id);
        meta(mine, r.queued ? "sent · queued behind " + r.queued : "sent");
        turn(r.turn_id);
        if (!turns[r.turn_id].node.getAttribute("data-done")) started(r.turn_id);
        return true;
      }
      mine.setAttribute("data-state", "failed");
      mine.classList.add("failed");
      meta(mine, "NOT sent: " + (r.message || "the daemon did not answer"));
      return false;
    }, function () {
      mine.setAttribute("data-state", "failed");
      mine.classList.add("failed");
      meta(mine, "NOT sent: the daemon is unreachable");
      return false;
    });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    var text = input.value;
    if (!text.trim() || !client) return;
    input.value = "";
    send(text).then(function (ok) { if (!ok && !input.value) input.value = text; });
  });
  stopButton.addEventListener("click", function () {
    if (!running.length) return;
    var id = running[0];
    Reverie.post("/chat/cancel", { client: client, turn_id: id }).then(function () {
      if (waiting[id]) refresh(id);
    });
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      form.requestSubmit();
    }
  });

  function adopt(node) {
    var id = node.getAttribute("data-turn");
    var tools = node.querySelector("ul.tools");
    if (!tools) { tools = el("ul", "tools"); node.appendChild(tools); }
    turns[id] = { node: node, body: node.querySelector(".body"), tools: tools, calls: {} };
    return id;
  }

  // A turn that was being answered when the page was opened: its frames go to the page that
  // sent it, so this one shows the turn as the daemon recorded it once the turn has ended.
  var waiting = {};
  function refresh(id) {
    fetch("/chat", { credentials: "same-origin" }).then(function (r) { return r.text(); }).then(function (html) {
      var fresh = new DOMParser().parseFromString(html, "text/html")
        .querySelector('.msg.agent[data-turn="' + id + '"]');
      var t = turns[id];
      if (!fresh || !t || fresh.getAttribute("data-running") || !waiting[id]) return;
      delete waiting[id];
      fresh = document.adoptNode(fresh);
      t.node.replaceWith(fresh);
      adopt(fresh);
      ended(id);
    });
  }

  // The session's last turns came with the page, each adopted as a turn of this page.
  log.querySelectorAll(".msg.agent[data-turn]").forEach(function (node) {
    var id = adopt(node);
    if (node.getAttribute("data-running")) {
      waiting[id] = true;
      meta(node, "being answered — the reply shows here when it is done");
      started(id);
    }
  });
  // Any turn's end or start (a cancelled turn has no end of its own) is when to look again.
  Reverie.live.on("turn", function () { Object.keys(waiting).forEach(refresh); });
  log.scrollTop = log.scrollHeight;  // the session's last turns, newest at the bottom
  Reverie.live.on("hello", function (data) {
    client = data.client;
    input.disabled = sendButton.disabled = !client;
    if (client) input.focus();
  });
  Reverie.live.on("chat", onFrame);
})();
