// LoopX dashboard: plain JavaScript, no build step, no network beyond this server.
// Views: #/ (attention queue, fleet, goals table) and #/goal/<id>[/run/<seq>].
// Live: /events (Server-Sent Events, read with fetch so the token can ride in a header)
// names the goals each status refresh changed; the page refetches only what it shows.
"use strict";

const TOKEN_KEY = "loopx-token";
const DRAFTS_KEY = "loopx-drafts";
const PAGE_ROWS = 50;
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  actions: false,
  seq: 0,
  filter: { actor: "", reason: "", q: "", sort: "" },
  selected: new Set(),  // goal ids ticked in the table, for the bulk buttons
  offset: 0,
  route: null,
  pending: null,
  // Typed gate answers by "goal/gate", kept through live refreshes, refusals and reloads (this tab).
  drafts: JSON.parse(sessionStorage.getItem(DRAFTS_KEY) || "{}"),
  inflight: new Set(),  // "goal/action" requests on their way: a second click is ignored
  bulkResults: null,  // the last bulk answer's reply, listed until dismissed
  bulkDone: null,  // the last bulk pause or resume's reply, listed until dismissed
  bulkProgress: null,  // what the bulk request on its way does, shown beside its buttons
};

function saveDrafts() {
  sessionStorage.setItem(DRAFTS_KEY, JSON.stringify(state.drafts));
}

// `loopx serve` prints the page's URL with the token in the fragment (never sent to the server).
function takeTokenFromUrl() {
  const m = location.hash.match(/^#token=([^&]+)$/);
  if (!m) return;
  state.token = decodeURIComponent(m[1]);
  sessionStorage.setItem(TOKEN_KEY, state.token);
  history.replaceState(null, "", `${location.pathname}${location.search}#/`);
}
const REASONS = ["crash_loop", "quarantined", "failing", "gate_pending", "paused", "running",
  "ready", "quota_exhausted", "waiting", "done"];

// --- DOM helpers (text only: nothing from the server is parsed as HTML) -------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function ago(iso) {
  if (!iso) return "";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  const a = Math.abs(s);
  const text = a < 60 ? `${Math.round(a)}s` : a < 3600 ? `${Math.round(a / 60)}m`
    : a < 86400 ? `${(a / 3600).toFixed(1)}h` : `${(a / 86400).toFixed(1)}d`;
  return s >= 0 ? `${text} ago` : `in ${text}`;
}

function when(iso) {
  return iso ? el("time", { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso)) : "";
}

function secs(n) {
  if (n === null || n === undefined) return "";
  return n < 60 ? `${n.toFixed(1)}s` : n < 3600 ? `${(n / 60).toFixed(1)}m` : `${(n / 3600).toFixed(1)}h`;
}

function badge(text, kind) {
  return el("span", { class: `badge ${kind || ""} b-${text}` }, String(text).replace("_", " "));
}

function notice(text) {
  const box = document.getElementById("notice");
  box.textContent = text || "";
  box.hidden = !text;
}

// --- the API ----------------------------------------------------------------------------------

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

async function api(path, options) {
  const resp = await fetch(path, Object.assign({ headers: headers(), cache: "no-store" }, options || {}));
  let doc = null;
  try { doc = await resp.json(); } catch (e) { doc = null; }
  if (resp.status === 401) {
    showTokenForm("This server needs its access token.");
    throw new Error("the server wants its token");
  }
  if (!resp.ok) {
    const msg = doc && doc.error ? doc.error + (doc.hint ? ` (${doc.hint})` : "") : `HTTP ${resp.status}`;
    const err = new Error(msg);
    err.status = resp.status;
    err.doc = doc;
    throw err;
  }
  return doc;
}

// One action; `button` (if any) is disabled while it is on its way, and a second click is ignored.
async function act(goalId, action, body, button) {
  if (!state.token) {
    showTokenForm("Actions need the server's token.");
    return false;
  }
  const key = `${goalId}/${action}`;
  if (state.inflight.has(key)) return false;
  state.inflight.add(key);
  if (button) button.disabled = true;
  try {
    await api(`/api/goals/${encodeURIComponent(goalId)}/${action}`, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: JSON.stringify(body || {}),
    });
    notice("");
    return true;
  } catch (e) {
    refused(goalId, action, body, e);
    return false;
  } finally {
    state.inflight.delete(key);
    if (button) button.disabled = false;
    await render();
  }
}

// A refused answer keeps its text. When the gate closed or changed (409), the text moves to the
// box of the question the goal asks now, to be read against it and sent again, or not.
function refused(goalId, action, body, e) {
  const conflict = e.status === 409 && e.doc && "current_gate" in e.doc;
  if (conflict && body && body.gate_id !== undefined) {
    const draft = state.drafts[`${goalId}/${body.gate_id}`];
    const now = e.doc.current_gate;
    if (draft !== undefined && now) {
      const target = `${goalId}/${now.id}`;
      if (!state.drafts[target]) state.drafts[target] = draft;
      delete state.drafts[`${goalId}/${body.gate_id}`];
      saveDrafts();
    }
  }
  notice(`${goalId}: ${action.replace("-", " ")} refused: ${e.message}`);
}

// --- header: fleet, counts, live indicator, token ----------------------------------------------

function showHeader(counts, fleet) {
  const f = document.getElementById("fleet");
  if (fleet.state) {
    f.textContent = `supervisor ${fleet.state} · ${fleet.agents_alive}/${fleet.agents_wanted} agents`;
    f.className = `pill ${fleet.state === "running" && fleet.agents_alive >= fleet.agents_wanted ? "ok" : fleet.state === "dead" ? "bad" : "warn"}`;
  } else {
    f.textContent = `no supervisor · ${fleet.agents_alive} agents`;
    f.className = "pill";
  }
  const by = counts.by_actor || {};
  const c = document.getElementById("counts");
  c.replaceChildren(
    el("a", { href: "#/", class: "count human", "data-actor": "human", onclick: (ev) => setActor("human", ev) }, `${(by.human || 0).toLocaleString()} need you`),
    el("a", { href: "#/", class: "count agent", "data-actor": "agent", onclick: (ev) => setActor("agent", ev) }, `${(by.agent || 0).toLocaleString()} for agents`),
    el("a", { href: "#/", class: "count none", "data-actor": "none", onclick: (ev) => setActor("none", ev) }, `${(by.none || 0).toLocaleString()} quiet`),
    el("span", { class: "muted" }, ` of ${counts.total.toLocaleString()}`),
  );
}

function setActor(actor, ev) {
  if (ev) ev.preventDefault();
  go({ actor, reason: "", q: "", sort: state.filter.sort }, 0);
}

// The table's filters, search, sort and page live in the URL (#/?actor=&reason=&q=&sort=&offset=),
// so a reload, a bookmark or a link shows the same view.
function go(filter, offset) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(filter)) if (v) q.set(k, v);
  if (offset) q.set("offset", offset);
  const hash = `#/${q.toString() ? "?" + q : ""}`;
  // Another search, filter or page shows other rows: what was ticked is no longer seen.
  if (location.hash !== hash) state.selected.clear();
  // pushState, not location.hash: no hashchange, so the focus stays where the person is.
  if (location.hash !== hash) history.pushState(null, "", hash);
  render();
}

function showTokenForm(message) {
  const form = document.getElementById("token-form");
  form.hidden = false;
  if (message) notice(message);
  document.getElementById("token-input").focus();
}

function setupToken() {
  const form = document.getElementById("token-form");
  document.getElementById("token-button").addEventListener("click", () => {
    form.hidden = !form.hidden;
    if (!form.hidden) document.getElementById("token-input").focus();
  });
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = document.getElementById("token-input").value.trim();
    sessionStorage.setItem(TOKEN_KEY, state.token);
    form.hidden = true;
    notice("");
    connect();
    render();
  });
  document.getElementById("token-clear").addEventListener("click", () => {
    state.token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    document.getElementById("token-input").value = "";
  });
}

// --- live events ------------------------------------------------------------------------------

let stream = null;

function setLive(on, text) {
  const live = document.getElementById("live");
  live.className = `live ${on ? "on" : "off"}`;
  live.textContent = text;
}

async function connect() {
  if (stream) stream.abort();
  const ctl = new AbortController();
  stream = ctl;
  let wait = 1000;
  while (!ctl.signal.aborted) {
    try {
      const resp = await fetch("/events", { headers: headers(), signal: ctl.signal, cache: "no-store" });
      if (resp.status === 401) { setLive(false, "needs token"); return; }
      if (!resp.ok || !resp.body) throw new Error(`HTTP ${resp.status}`);
      setLive(true, "live");
      wait = 1000;
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          frame(buf.slice(0, cut));
          buf = buf.slice(cut + 2);
        }
      }
    } catch (e) {
      if (ctl.signal.aborted) return;
    }
    setLive(false, "reconnecting");
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(wait * 2, 15000);
  }
}

function frame(text) {
  let event = "message";
  const data = [];
  for (const line of text.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).trim());
  }
  if (!data.length) return;
  const doc = JSON.parse(data.join("\n"));
  if (event === "hello") {
    if (state.seq && doc.seq !== state.seq) refresh(null);  // missed events while away
    state.seq = doc.seq;
  } else if (event === "change") {
    const gap = state.seq && doc.seq !== state.seq + 1;
    state.seq = doc.seq;
    showHeader(doc.counts, doc.fleet);
    refresh(doc.all || gap ? null : doc.changed);
  }
}

// Coalesce bursts: one refetch of the current view per 200 ms, whatever the event count.
function refresh(changed) {
  const route = state.route;
  if (route && route.goal && changed && !changed.includes(route.goal)) return;
  if (state.pending) return;
  state.pending = setTimeout(() => { state.pending = null; render(true); }, 200);
}

// --- views ------------------------------------------------------------------------------------

function parseRoute() {
  const m = location.hash.match(/^#\/goal\/([^/]+)(?:\/run\/(\d+|latest))?$/);
  if (m) return { goal: decodeURIComponent(m[1]), run: m[2] ? (m[2] === "latest" ? "latest" : Number(m[2])) : null };
  const list = location.hash.match(/^#\/\?(.*)$/);
  const q = new URLSearchParams(list ? list[1] : "");
  state.filter = { actor: q.get("actor") || "", reason: q.get("reason") || "", q: q.get("q") || "", sort: q.get("sort") || "" };
  state.offset = Number(q.get("offset")) || 0;
  return { goal: null, run: null };
}

// Renders overlap (a live change, an action's own render); each builds its view after awaiting
// the server, so only the newest one started may show: an older one that finishes later would
// put back what was true before (a draft before it moved to the goal's new question).
let renders = 0;

async function render(live) {
  const mine = ++renders;
  state.route = parseRoute();
  const main = document.getElementById("main");
  try {
    const view = state.route.goal ? await goalView(state.route) : await overviewView();
    if (mine !== renders) return;
    const active = document.activeElement;
    const focused = active && active.id;
    if (live && active && active.tagName === "INPUT" && active.closest("form.answer")) {
      return patchAround(main, view);  // never wipe an answer being typed
    }
    // A live refresh keeps what is being typed in the filter box, and where the caret is.
    const typed = live && active && active.tagName === "INPUT"
      ? { value: active.value, start: active.selectionStart, end: active.selectionEnd } : null;
    main.replaceChildren(view);
    // When the first view was on screen, for the render benchmark and tests.
    if (!window.loopxFirstRender) window.loopxFirstRender = performance.now();
    const again = focused && document.getElementById(focused);
    if (again) {
      again.focus();
      if (typed && again.tagName === "INPUT") {
        again.value = typed.value;
        if (typed.start !== null) again.setSelectionRange(typed.start, typed.end);
      }
    }
  } catch (e) {
    notice(e.message);
  }
}

// While a person types into an answer box, refresh every part of the page but that form.
function patchAround(main, view) {
  for (const id of ["fleet-panel", "accounts-panel", "timeline-panel", "worktree-panel", "goals-panel", "agents-next", "turns-panel", "chart-panel", "live-panel", "audit-panel"]) {
    const old = document.getElementById(id);
    const fresh = view.querySelector(`#${id}`);
    if (old && fresh && !old.contains(document.activeElement)) old.replaceWith(fresh);
  }
}

async function overviewView() {
  const f = state.filter;
  const q = new URLSearchParams({ offset: state.offset, limit: PAGE_ROWS });
  if (f.actor) q.set("actor", f.actor);
  if (f.reason) q.set("reason", f.reason);
  if (f.q) q.set("q", f.q);
  if (f.sort) q.set("sort", f.sort);
  const [ov, page, audit, tl] = await Promise.all([api("/api/overview"), api(`/api/goals?${q}`),
    api("/api/audit?limit=20").catch(() => null), api("/api/timeline").catch(() => null)]);
  state.actions = ov.actions;
  if (!state.seq) state.seq = ov.seq;
  showHeader(ov.counts, ov.fleet);
  document.title = ov.counts.by_actor.human ? `(${ov.counts.by_actor.human}) LoopX` : "LoopX";
  return el("div", { class: "grid" },
    attentionPanel(ov),
    el("section", { class: "panel", id: "agents-next", "aria-labelledby": "h-next" },
      el("h2", { id: "h-next" }, "Agents next"),
      ov.next_up.length ? el("ul", { class: "list" }, ov.next_up.map(nextRow))
        : el("p", { class: "muted" }, "No goal is ready for an agent.")),
    fleetPanel(ov),
    tl ? timelinePanel(tl) : null,
    accountsPanel(ov.accounts || []),
    goalsPanel(page),
    audit ? auditPanel(audit) : null,
  );
}

// Who did what from this dashboard, when, and how it ended (logs/audit.jsonl, newest first).
function auditPanel(doc) {
  const rows = doc.records.map((r) => el("tr", { class: `o-${r.outcome}` },
    el("td", { "data-label": "when" }, when(r.at)),
    el("td", { "data-label": "goal" }, el("a", { href: `#/goal/${encodeURIComponent(r.goal_id)}` }, r.goal_id)),
    el("td", { "data-label": "action" }, r.action),
    el("td", { "data-label": "outcome" }, badge(r.outcome)),
    el("td", { "data-label": "detail", class: "why" }, r.answer ? `“${r.answer}” · ${r.detail}` : r.detail),
    el("td", { "data-label": "client", class: "wide mono" }, r.client)));
  return el("section", { class: "panel wide-panel", id: "audit-panel", "aria-labelledby": "h-audit" },
    el("h2", { id: "h-audit" }, "Audit log"),
    rows.length ? el("table", { class: "table" },
      el("thead", {}, el("tr", {}, ["When", "Goal", "Action", "Outcome", "Detail", "Client"].map((h, i) => el("th", { class: i === 5 ? "wide" : "" }, h)))),
      el("tbody", {}, rows)) : el("p", { class: "muted" }, "No action has been tried from the dashboard."));
}

function attentionPanel(ov) {
  const total = ov.counts.by_actor.human || 0;
  const incidents = ov.fleet.incidents || [];
  const shown = total + incidents.length + (ov.merge_waiting_total || 0);
  return el("section", { class: "panel attention", id: "attention", "aria-labelledby": "h-att" },
    el("h2", { id: "h-att" }, "Needs you ", el("span", { class: "muted" }, `(${shown})`)),
    incidents.length ? el("ul", { class: "cards incidents", id: "incidents" }, incidents.map(incidentCard)) : null,
    mergeWaitingCards(ov),
    ov.humans.length ? el("ul", { class: "cards" }, ov.humans.map((g) => humanCard(g, ov.actions)))
      : shown ? null : el("p", { class: "muted" }, "Nothing waits for a person."),
    total > ov.humans.length
      ? el("p", {}, el("a", { href: "#/", onclick: (ev) => setActor("human", ev) }, `All ${total} in the table below`)) : null,
  );
}

// The fleet's own incidents (the supervisor down, agents in a crash loop, a disk limit), above
// the goals: while one lasts, no goal makes progress however its own card reads.
const INCIDENT_TITLES = { supervisor_down: "Supervisor down", crash_loop: "Agents in a crash loop", disk: "Disk limit: no new turn starts" };

function incidentCard(i) {
  return el("li", { class: `card incident i-${i.kind}`, "data-incident": i.kind, role: "alert" },
    el("div", { class: "card-head" }, el("strong", {}, INCIDENT_TITLES[i.kind] || i.kind.replace("_", " ")),
      i.since ? el("span", { class: "muted" }, "since ", when(i.since)) : null),
    el("p", { class: "incident-text" }, i.explanation));
}

// Merge waiting: done worktree goals whose branch holds commits the base lacks. The work lands
// only when a person says so (Merge asks first; the done-check runs on the merged tree).
function mergeWaitingCards(ov) {
  const rows = ov.merge_waiting || [];
  if (!rows.length) return null;
  return el("ul", { class: "cards merges", id: "merge-waiting" }, rows.map((m) => el("li", { class: "card r-merge_waiting", "data-goal": m.goal_id },
    el("div", { class: "card-head" },
      el("a", { href: `#/goal/${encodeURIComponent(m.goal_id)}`, class: "goal-link" }, m.goal_id),
      badge("merge_waiting")),
    el("p", {}, `${m.ahead} commit(s) on `, el("code", {}, m.branch), ` not in ${m.base}`, m.behind ? `, ${m.behind} behind it` : "",
      m.dirty ? el("span", { class: "warn" }, " · uncommitted changes in its worktree") : ""),
    m.interrupted ? el("p", { class: "warn" }, "A merge stopped part way (its process is gone): Merge finishes it.") : null,
    m.diff ? diffLine(m.diff) : null,
    ov.actions ? mergeButton(m.goal_id, m.base, m.ahead) : null)));
}

function diffLine(d) {
  return el("div", { class: "diff" },
    el("p", { class: "diff-stat" }, `${d.files} file(s) changed, `, el("span", { class: "ins" }, `+${d.insertions}`), " ",
      el("span", { class: "del" }, `−${d.deletions}`), d.paths.length ? el("span", { class: "muted" }, `: ${d.paths.slice(0, 5).join(", ")}${d.files > 5 ? ", …" : ""}`) : ""),
    d.commits.length ? el("ul", { class: "commits" }, d.commits.map((c) => el("li", {}, el("code", {}, c.commit), " ", c.subject, " ",
      el("span", { class: "muted" }, when(c.at))))) : null);
}

const MERGE_PROGRESS = "merging: the done-check runs on the merged tree, then the base moves…";

// The Merge button stays disabled, with its progress line, until the merge has ended, whatever
// the live updates redraw meanwhile.
function mergeButton(goalId, base, ahead) {
  const busy = state.inflight.has(`${goalId}/merge`);
  return el("div", { class: "buttons" },
    el("button", { type: "button", class: "merge-button", "data-goal": goalId, disabled: busy,
      onclick: () => mergeGoal(goalId, base, ahead) }, `Merge into ${base}`),
    busy ? el("span", { class: "muted merge-progress", role: "status" }, MERGE_PROGRESS) : null);
}

async function mergeGoal(goalId, base, ahead) {
  if (!state.token) { showTokenForm("Actions need the server's token."); return; }
  const key = `${goalId}/merge`;
  if (state.inflight.has(key)) return;
  if (!confirm(`Merge ${goalId}'s branch (${ahead} commit(s)) into ${base}? Its done-check runs on the merged tree first; ${base} moves only if it passes.`)) return;
  state.inflight.add(key);
  for (const b of document.querySelectorAll(`button.merge-button[data-goal="${CSS.escape(goalId)}"]`)) {
    b.disabled = true;
    b.after(el("span", { class: "muted merge-progress", role: "status" }, MERGE_PROGRESS));
  }
  try {
    const doc = await api(`/api/goals/${encodeURIComponent(goalId)}/merge`, {
      method: "POST", headers: headers({ "Content-Type": "application/json" }), body: "{}" });
    notice(mergeOutcome(goalId, doc.merge));
  } catch (e) {
    notice(`${goalId}: merge refused: ${e.message}`);
  } finally {
    state.inflight.delete(key);
    await render();
  }
}

function mergeOutcome(goalId, m) {
  const words = MERGE_OUTCOMES[m.outcome] || m.outcome;
  if (m.outcome === "merged") return `${goalId}: merged into ${m.base} as ${m.merged_commit.slice(0, 12)}`;
  const where = m.conflicts.length ? ` in ${m.conflicts.join(", ")}` : "";
  const gate = m.gate_id !== null ? `; gate ${m.gate_id} opened on the goal: answer it on its page` : "";
  return `${goalId}: merge ${words}${where}${gate}`;
}

function humanCard(g, actions) {
  const card = el("li", { class: `card r-${g.reason}`, "data-goal": g.goal_id },
    el("div", { class: "card-head" },
      el("a", { href: `#/goal/${encodeURIComponent(g.goal_id)}`, class: "goal-link" }, g.goal_id),
      badge(g.reason)),
    g.gate_question ? el("p", { class: "question" }, g.gate_question)
      : g.failure_message && g.reason === "failing" ? failureLine(g.last_turn_seq, g.last_failure, g.failure_message)
        : el("p", {}, g.explanation),
    g.last_turn_seq && g.reason !== "gate_pending"
      ? el("p", {}, el("a", { href: `#/goal/${encodeURIComponent(g.goal_id)}/run/${g.last_turn_seq}` },
        `Run log of turn ${g.last_turn_seq}`), " ", el("span", { class: "muted" }, when(g.last_turn_at))) : null,
  );
  if (actions && g.reason === "gate_pending" && g.gate_id !== null) {
    card.append(answerForm(g.goal_id, g.gate_id, g.gate_question));
  }
  if (actions && g.reason === "paused") {
    card.append(el("div", { class: "buttons" },
      el("button", { type: "button", onclick: (ev) => act(g.goal_id, "resume", {}, ev.currentTarget) }, "Resume")));
  }
  return card;
}

// The answer to one gate: it names the gate and the question the person read, so the server
// refuses it (409) if that gate closed or changed meanwhile.
function answerForm(goalId, gateId, question) {
  const id = `answer-${goalId}-${gateId}`;
  const key = `${goalId}/${gateId}`;
  const input = el("input", { id, name: "answer", placeholder: "Your answer", required: true, autocomplete: "off",
    "data-gate": gateId, maxlength: 4000 });
  input.value = state.drafts[key] || "";
  input.addEventListener("input", () => {
    if (input.value) state.drafts[key] = input.value; else delete state.drafts[key];
    saveDrafts();
  });
  const form = el("form", { class: "answer", "data-goal": goalId, "data-gate": gateId },
    el("label", { for: id, class: "sr" }, `Answer for ${goalId}, gate ${gateId}`),
    input,
    el("button", { type: "submit" }, "Answer"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const answer = input.value.trim();
    if (!answer) return;
    const ok = await act(goalId, "resolve-gate", { answer, gate_id: gateId, question }, form.querySelector("button"));
    if (ok) { delete state.drafts[key]; saveDrafts(); }
  });
  return form;
}

// A failed turn's reason in its own words (the host's exit and stderr, a timeout, ...), which the
// status view's explanation only names by its code.
function failureLine(seq, code, message) {
  return el("p", { class: "failure" }, el("strong", {}, `Turn ${seq} failed`, code ? ` (${code})` : "", ": "),
    el("span", { class: "failure-message" }, message));
}

function nextRow(g) {
  return el("li", {},
    el("a", { href: `#/goal/${encodeURIComponent(g.goal_id)}`, class: "goal-link" }, g.goal_id), " ",
    badge(g.reason), " ", el("span", { class: "muted" }, g.agent_id ? `on ${g.agent_id}` : g.explanation));
}

function fleetPanel(ov) {
  const fleet = ov.fleet;
  const rows = ov.agents.map((a) => el("tr", { class: a.alive ? "" : "dead" },
    el("td", { "data-label": "agent" }, a.agent_id),
    el("td", { "data-label": "state" }, a.crash_loop ? badge("crash_loop") : badge(a.alive ? a.phase || "alive" : "down")),
    el("td", { "data-label": "goal" }, a.goal_id ? [el("a", { href: `#/goal/${encodeURIComponent(a.goal_id)}` }, a.goal_id), " ",
      el("a", { href: `#/goal/${encodeURIComponent(a.goal_id)}`, class: "muted", title: "the host's live output" }, "(output)")] : "—"),
    el("td", { "data-label": "turn", class: "mono wide" }, a.turn_key || ""),
    el("td", { "data-label": "turn age" }, a.turn_since ? when(a.turn_since) : el("span", { class: "muted" }, "idle")),
    el("td", { "data-label": "heartbeat" }, when(a.beat_at)),
    el("td", { "data-label": "turns", class: "num" }, a.turns_done),
    el("td", { "data-label": "restarts", class: "num" }, a.restarts, a.last_exit ? el("span", { class: "muted" }, ` (${a.last_exit})`) : "")));
  return el("section", { class: "panel", id: "fleet-panel", "aria-labelledby": "h-fleet" },
    el("h2", { id: "h-fleet" }, "Fleet"),
    el("p", {}, fleet.state ? `Supervisor ${fleet.state} (pid ${fleet.pid}), ${fleet.agents_alive} of ${fleet.agents_wanted} agents alive, ${fleet.restarts} restarts` : "No supervisor has run on this root.",
      fleet.crash_loop_agents.length ? el("strong", { class: "bad" }, ` · crash loop: ${fleet.crash_loop_agents.join(", ")}`) : ""),
    rows.length ? el("table", { class: "table" },
      el("thead", {}, el("tr", {}, ["Agent", "State", "Goal", "Turn", "Turn started", "Heartbeat", "Turns", "Restarts"].map((h, i) => el("th", { class: i === 3 ? "wide" : "" }, h)))),
      el("tbody", {}, rows)) : null);
}

// The last hour of each agent: one bar per turn from its start to its end, coloured by outcome;
// a bar opens the turn's run log (a running one, the goal's page with its live output).
function timelinePanel(tl) {
  const start = Date.parse(tl.start), end = Date.parse(tl.end);
  const W = 1000, L = 110, R = 8, ROW = 22, TOP = 18;
  const X = (t) => L + ((Math.min(Math.max(t, start), end) - start) / (end - start)) * (W - L - R);
  const rows = tl.agents.filter((a) => a.turns.length || a.alive);
  const H = TOP + rows.length * ROW + 4;
  const ticks = [60, 45, 30, 15, 0].map((m) => svg("g", {},
    svg("line", { x1: X(end - m * 60000), y1: TOP - 4, x2: X(end - m * 60000), y2: H, class: "tick" }),
    svg("text", { x: X(end - m * 60000), y: TOP - 6, "text-anchor": m === 60 ? "start" : m === 0 ? "end" : "middle", class: "label" }, m ? `-${m}m` : "now")));
  const bars = rows.map((a, i) => {
    const y = TOP + i * ROW;
    return svg("g", { class: "tl-row", "data-agent": a.agent_id },
      svg("text", { x: 0, y: y + ROW - 7, class: `label agent-name${a.alive ? "" : " down"}` }, a.agent_id),
      a.turns.map((t) => {
        const x1 = X(Date.parse(t.started_at));
        const x2 = t.ended_at ? X(Date.parse(t.ended_at)) : X(end);
        const href = t.seq !== null ? `#/goal/${encodeURIComponent(t.goal_id)}/run/${t.seq}` : `#/goal/${encodeURIComponent(t.goal_id)}`;
        const took = secs(((t.ended_at ? Date.parse(t.ended_at) : end) - Date.parse(t.started_at)) / 1000);
        const what = t.status === "running" ? "running" : t.status === "committed" ? (t.kind || "committed") : `${t.status}${t.failure ? ` (${t.failure})` : ""}`;
        return svg("a", { href, class: "tl-link" },
          svg("rect", { x: x1.toFixed(1), y: y + 3, width: Math.max(x2 - x1, 2).toFixed(1), height: ROW - 8, rx: 2,
            class: `tl-bar tl-${t.status}${t.kind ? ` tl-k-${t.kind}` : ""}`, "data-goal": t.goal_id, "data-turn": t.turn_key },
            svg("title", {}, `${t.goal_id} turn ${t.seq !== null ? t.seq : "(in flight)"}: ${what}, ${took}`)));
      }));
  });
  return el("section", { class: "panel wide-panel", id: "timeline-panel", "aria-labelledby": "h-timeline" },
    el("h2", { id: "h-timeline" }, "Last hour ", el("span", { class: "muted" }, `(${tl.turns.toLocaleString()} turns`,
      tl.truncated ? ", the newest only" : "", ")")),
    rows.length ? svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "timeline", role: "img", "aria-label": "each agent's turns over the last hour" },
      ticks, bars) : el("p", { class: "muted" }, "No agent ran a turn in the last hour."),
    rows.length ? el("p", { class: "legend muted" },
      ["committed", "completed", "failed", "stopped", "running"].map((k) => el("span", { class: `key key-${k}` }, k))) : null);
}

// Accounts: each provider account (and the root's budget), what holds it back, its window's
// spend against its budget (a cost estimated from the account's prices says so), its goals.
const ACCOUNT_STATES = { ok: "ok", limited: "limited", overloaded: "overloaded", budget_spent: "budget spent", needs_human: "needs a human", damaged: "damaged file" };

function spendText(a) {
  const s = a.spend;
  if (!s) return el("span", { class: "muted" }, "not counted (no budget)");
  const b = a.budget || {};
  const tokens = `${s.tokens.toLocaleString()}${b.max_tokens ? ` of ${b.max_tokens.toLocaleString()}` : ""} tokens`;
  const cost = `$${s.cost_usd.toFixed(2)}${b.max_cost_usd ? ` of $${b.max_cost_usd.toFixed(2)}` : ""}`;
  return el("span", { class: "spend-text" }, `${tokens}, ${cost} in ${s.window_hours}h`,
    a.cost_estimated ? el("span", { class: "badge estimate", title: `$${s.estimated_usd.toFixed(2)} of it estimated from the account's prices` }, "estimate") : "");
}

// A provider window's bar: its use against the admission mark (past it, no new turn starts).
function windowBars(a) {
  return (a.windows || []).map((w) => el("div", { class: `window${w.past_mark ? " past-mark" : ""}`, "data-window": w.name },
    el("span", { class: "window-label" }, w.label), " ",
    el("meter", { min: "0", max: "100", value: String(Math.min(w.used_percent, 100)), ...(w.mark != null ? { high: String(w.mark) } : {}),
      title: w.mark != null ? `admission stops at ${w.mark}%` : "no admission mark" }),
    ` ${Math.round(w.used_percent)}%`, w.resets_at ? [", resets ", when(w.resets_at)] : ""));
}

function accountsPanel(accounts) {
  if (!accounts.length) return null;
  const rows = accounts.map((a) => el("tr", { "data-account": a.name, class: `a-${a.state}` },
    el("td", { "data-label": "account" }, el("strong", {}, a.name), " ",
      el("span", { class: "muted" }, a.host_kind ? `${a.host_kind}${a.default ? ", default" : ""}` : a.name === ".root" ? "whole root" : "")),
    el("td", { "data-label": "state" }, el("span", { class: `badge b-acct-${a.state}` }, ACCOUNT_STATES[a.state] || a.state),
      a.until ? [" until ", when(a.until)] : ""),
    el("td", { "data-label": "why", class: "why" }, a.question ? el("span", { class: "question" }, a.question) : a.message || "—"),
    el("td", { "data-label": "spend" }, spendText(a), windowBars(a)),
    el("td", { "data-label": "goals", class: "num" }, a.goals),
    el("td", { "data-label": "waiting", class: "waiting" }, a.waiting ? [`${a.waiting}: `,
      ...a.waiting_ids.flatMap((id, i) => [i ? ", " : "", el("a", { href: `#/goal/${encodeURIComponent(id)}` }, id)]),
      a.waiting > a.waiting_ids.length ? ` and ${a.waiting - a.waiting_ids.length} more` : ""] : "none")));
  return el("section", { class: "panel wide-panel", id: "accounts-panel", "aria-labelledby": "h-accounts" },
    el("h2", { id: "h-accounts" }, "Accounts"),
    el("table", { class: "table" },
      el("thead", {}, el("tr", {}, ["Account", "State", "Why", "Spend and provider windows", "Goals", "Waiting on it"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)));
}

function goalsPanel(page) {
  const f = state.filter;
  const actor = el("select", { id: "f-actor", name: "actor" },
    ["", "human", "agent", "none"].map((a) => el("option", { value: a, selected: a === f.actor }, a || "any actor")));
  const reason = el("select", { id: "f-reason", name: "reason" },
    ["", ...REASONS].map((r) => el("option", { value: r, selected: r === f.reason }, r ? r.replace("_", " ") : "any status")));
  const text = el("input", { id: "f-q", name: "q", type: "search", value: f.q, placeholder: "Filter by id or objective  ( / )", autocomplete: "off" });
  const sort = el("select", { id: "f-sort", name: "sort" },
    [["", "most urgent first"], ["id", "by id"], ["priority", "highest priority"], ["last_turn", "latest turn first"]]
      .map(([v, label]) => el("option", { value: v, selected: v === (f.sort || "") }, label)));
  const form = el("form", { class: "filters", role: "search" },
    el("label", { for: "f-actor", class: "sr" }, "Actor"), actor,
    el("label", { for: "f-reason", class: "sr" }, "Status"), reason,
    el("label", { for: "f-sort", class: "sr" }, "Sort"), sort,
    el("label", { for: "f-q", class: "sr" }, "Text"), text,
    el("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    go({ actor: actor.value, reason: reason.value, q: text.value.trim(), sort: sort.value }, 0);
  });
  actor.addEventListener("change", () => form.requestSubmit());
  reason.addEventListener("change", () => form.requestSubmit());
  sort.addEventListener("change", () => form.requestSubmit());
  const p = page.page;
  const first = p.total ? p.offset + 1 : 0;
  const last = p.offset + page.rows.length;
  const pager = el("nav", { class: "pager", "aria-label": "pages" },
    el("button", { type: "button", id: "prev", disabled: p.offset === 0, onclick: () => go(state.filter, Math.max(0, p.offset - p.limit)) }, "← Previous"),
    el("span", { class: "muted", id: "page-info" }, `${first}–${last} of ${p.total.toLocaleString()}`),
    el("button", { type: "button", id: "next", disabled: p.next_offset === null, onclick: () => go(state.filter, p.next_offset) }, "Next →"));
  const pick = (id) => el("input", { type: "checkbox", class: "pick", "aria-label": `select ${id}`, checked: state.selected.has(id),
    onchange: (ev) => {
      if (ev.target.checked) state.selected.add(id); else state.selected.delete(id);
      const count = document.getElementById("bulk-count");
      if (count) count.textContent = bulkCountText(page);
    } });
  const rows = page.rows.map((g) => el("tr", { "data-goal": g.goal_id },
    el("td", { "data-label": "goal" }, state.actions ? pick(g.goal_id) : null, " ",
      el("a", { href: `#/goal/${encodeURIComponent(g.goal_id)}`, class: "goal-link" }, g.goal_id)),
    el("td", { "data-label": "who" }, badge(g.actor, "actor")),
    el("td", { "data-label": "status" }, badge(g.reason)),
    el("td", { "data-label": "why", class: "why" }, g.gate_question ? `Gate: ${g.gate_question}`
      : g.reason === "failing" && g.failure_message ? `${g.last_failure || "failed"}: ${g.failure_message}` : g.explanation),
    el("td", { "data-label": "priority", class: "num wide" }, g.priority),
    el("td", { "data-label": "last turn", class: "wide" }, g.last_turn_at ? when(g.last_turn_at) : "—"),
    el("td", { "data-label": "quota", class: "wide" }, quotaBar(g.quota_used))));
  return el("section", { class: "panel wide-panel", id: "goals-panel", "aria-labelledby": "h-goals" },
    el("h2", { id: "h-goals" }, "Goals"),
    form,
    state.actions ? bulkBar(page) : null,
    el("table", { class: "table goals" },
      el("thead", {}, el("tr", {}, ["Goal", "Who", "Status", "Why / next", "Prio", "Last turn", "Quota"].map((h, i) => el("th", { class: i >= 4 ? "wide" : "" }, h)))),
      el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 7, class: "muted" }, "No goal matches.")))),
    pager);
}

// The rows a bulk action is for: the ticked goals this page shows or, with none of them
// ticked, every goal of this page. A goal ticked before a search and hidden now is never acted on.
function bulkTargets(page) {
  const ticked = page.rows.filter((r) => state.selected.has(r.goal_id));
  return { rows: ticked.length ? ticked : page.rows, ticked: ticked.length > 0 };
}

function bulkCountText(page) {
  const n = page.rows.filter((r) => state.selected.has(r.goal_id)).length;
  return n ? `${n} ticked: ` : "None ticked, so every goal of this page: ";
}

// Pause or resume the goals of bulkTargets in one request the server applies as a batch. The
// count is confirmed first; finished goals are left alone (the server refuses them too); the
// buttons stay disabled, with a progress line, until the whole run has ended, however often the
// page refreshes meanwhile; then each goal's outcome is listed.
function bulkBar(page) {
  const busy = state.inflight.has("bulk");
  const run = async (action) => {
    if (state.inflight.has("bulk")) return;
    if (!state.token) { showTokenForm("Actions need the server's token."); return; }
    const { rows, ticked } = bulkTargets(page);
    const finished = rows.filter((r) => r.goal_status === "done" || r.goal_status === "archived");
    const ids = rows.filter((r) => !finished.includes(r)).map((r) => r.goal_id);
    const verb = action === "pause" ? "Pause" : "Resume";
    if (!ids.length) { notice(`${verb}: none of these goals can be ${action}d (they are finished)`); return; }
    const shown = ids.slice(0, 10).join(", ") + (ids.length > 10 ? `, and ${ids.length - 10} more` : "");
    const left = finished.length ? `\n${finished.length} finished goal${finished.length === 1 ? " is" : "s are"} left alone.` : "";
    if (!confirm(`${verb} ${ids.length} goal${ids.length === 1 ? "" : "s"}${ticked ? " (ticked)" : " (every goal of this page)"}?\n${shown}${left}`)) return;
    state.inflight.add("bulk");
    state.bulkProgress = `${action === "pause" ? "Pausing" : "Resuming"} ${ids.length} goal${ids.length === 1 ? "" : "s"}…`;
    state.bulkDone = null;
    render();
    try {
      const doc = await api(`/api/bulk/${action}`, {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        body: JSON.stringify({ goal_ids: ids }),
      });
      state.bulkDone = doc;
      for (const id of ids) state.selected.delete(id);
      notice(doc.refused ? `${verb}: ${doc.refused} of ${doc.results.length} refused (listed below the buttons)` : "");
    } catch (e) {
      notice(`bulk ${action} refused: ${e.message}`);
    } finally {
      state.inflight.delete("bulk");
      state.bulkProgress = null;
      render();
    }
  };
  return el("div", { class: "bulk-bar" },
    el("div", { class: "buttons bulk" },
      el("span", { class: "muted", id: "bulk-count" }, bulkCountText(page)),
      el("button", { type: "button", id: "bulk-pause", disabled: busy, onclick: () => run("pause") }, "Pause"),
      el("button", { type: "button", id: "bulk-resume", disabled: busy, onclick: () => run("resume") }, "Resume"),
      busy ? el("span", { id: "bulk-progress", role: "status" }, el("progress", {}), " ", state.bulkProgress) : null),
    page.rows.some((r) => r.gate_id !== null) ? bulkAnswerForm(page) : null,
    bulkActionResults(),
    bulkResults());
}

const BULK_ACTION_OUTCOMES = { applied: "done", repeated: "already so", failed: "refused" };

function bulkActionResults() {
  const doc = state.bulkDone;
  if (!doc) return null;
  const past = doc.action === "pause" ? "paused" : "resumed";
  const refused = doc.results.filter((r) => r.outcome === "failed");
  return el("div", { id: "bulk-action-results", class: "bulk-results" },
    el("p", {}, el("strong", {}, `${doc.applied} ${past}, ${doc.refused} refused `),
      el("button", { type: "button", class: "ghost", onclick: () => { state.bulkDone = null; render(); } }, "Dismiss")),
    refused.length ? el("ul", { class: "list" }, refused.map((r) => el("li", { class: "bulk-failed", "data-goal": r.goal_id },
      el("a", { href: `#/goal/${encodeURIComponent(r.goal_id)}` }, r.goal_id), ": ",
      el("span", { class: "bulk-outcome" }, BULK_ACTION_OUTCOMES[r.outcome]),
      r.error ? el("span", { class: "muted" }, ` — ${r.error}`) : ""))) : null);
}

// One answer for the open gate of every ticked goal (or of every goal of this page with one):
// each item names its own gate and question, so a gate that closed or changed meanwhile is
// refused on its own (409) and the others are applied; the page lists how each one ended.
function bulkAnswerForm(page) {
  const input = el("input", { id: "bulk-answer-text", name: "answer", placeholder: "One answer for these gates", autocomplete: "off", maxlength: 4000 });
  input.value = state.drafts.bulk || "";
  input.addEventListener("input", () => {
    if (input.value) state.drafts.bulk = input.value; else delete state.drafts.bulk;
    saveDrafts();
  });
  const button = el("button", { type: "submit", id: "bulk-answer", disabled: state.inflight.has("bulk-answer") }, "Answer gates");
  const form = el("form", { class: "answer bulk-answer" },
    el("label", { for: "bulk-answer-text", class: "sr" }, "One answer for the gates of the ticked goals"), input, button,
    state.inflight.has("bulk-answer") ? el("span", { id: "bulk-answer-progress", role: "status", class: "muted" }, " answering…") : null);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const answer = input.value.trim();
    if (!answer || state.inflight.has("bulk-answer")) return;
    const picked = bulkTargets(page).rows.filter((r) => r.gate_id !== null);
    if (!picked.length) { notice("None of the ticked goals has an open gate."); return; }
    if (!state.token) { showTokenForm("Actions need the server's token."); return; }
    const named = picked.slice(0, 10).map((r) => r.goal_id).join(", ") + (picked.length > 10 ? `, and ${picked.length - 10} more` : "");
    if (!confirm(`Answer ${picked.length} gate${picked.length === 1 ? "" : "s"} with “${answer}”?\n${named}`)) return;
    state.inflight.add("bulk-answer");
    button.disabled = true;
    button.after(el("span", { id: "bulk-answer-progress", role: "status", class: "muted" }, ` answering ${picked.length}…`));
    try {
      const doc = await api("/api/answers", {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        body: JSON.stringify({ answer, gates: picked.map((r) => ({ goal_id: r.goal_id, gate_id: r.gate_id, question: r.gate_question })) }),
      });
      state.bulkResults = doc;
      if (!doc.refused) { delete state.drafts.bulk; saveDrafts(); }
      state.selected.clear();
      notice(doc.refused ? `Answer: ${doc.refused} of ${doc.results.length} refused (listed below the buttons)` : "");
    } catch (e) {
      notice(`bulk answer refused: ${e.message}`);
    } finally {
      state.inflight.delete("bulk-answer");
      button.disabled = false;
      render();
    }
  });
  return form;
}

const BULK_OUTCOMES = { applied: "answered", repeated: "already had this answer", stale: "refused (409)", failed: "refused" };

function bulkResults() {
  const doc = state.bulkResults;
  if (!doc) return null;
  return el("div", { id: "bulk-results", class: "bulk-results" },
    el("p", {}, el("strong", {}, `“${doc.answer}”: ${doc.applied} answered, ${doc.refused} refused `),
      el("button", { type: "button", class: "ghost", onclick: () => { state.bulkResults = null; render(); } }, "Dismiss")),
    el("ul", { class: "list" }, doc.results.map((r) => el("li", { class: `bulk-${r.outcome}`, "data-goal": r.goal_id, "data-gate": r.gate_id },
      el("a", { href: `#/goal/${encodeURIComponent(r.goal_id)}` }, r.goal_id), ` gate ${r.gate_id}: `,
      el("span", { class: "bulk-outcome" }, BULK_OUTCOMES[r.outcome] || r.outcome),
      r.error ? el("span", { class: "muted" }, ` — ${r.error}`) : "",
      r.current_gate ? el("span", { class: "muted" }, ` (it asks now: ${r.current_gate.question})`) : ""))));
}

function quotaBar(used) {
  const pct = Math.max(0, Math.min(100, Math.round((used || 0) * 100)));
  return el("meter", { min: 0, max: 100, low: 70, high: 90, optimum: 0, value: pct, title: `${pct}% of the window's wall-time allowance` }, `${pct}%`);
}

// --- goal page --------------------------------------------------------------------------------

async function goalView(route) {
  const id = encodeURIComponent(route.goal);
  const [d, log] = await Promise.all([
    api(`/api/goals/${id}`),
    route.run ? api(`/api/goals/${id}/runs/${route.run}`).catch((e) => ({ error: e.message })) : null,
  ]);
  state.actions = d.actions;
  const v = d.view;
  const s = d.state || {};
  const wt = d.worktree ? await api(`/api/goals/${id}/worktree`).catch(() => null) : null;
  document.title = `${v.goal_id} · LoopX`;
  const gates = (s.gates || []).slice().reverse();
  const open = gates.filter((g) => g.answer === null);
  return el("div", { class: "goal-page" },
    el("p", {}, el("a", { href: "#/", id: "back" }, "← All goals")),
    el("section", { class: "panel" },
      el("h1", {}, v.goal_id, " ", badge(v.actor, "actor"), " ", badge(v.reason)),
      el("p", { class: "lead" }, v.explanation),
      v.warnings.length ? el("ul", { class: "warn" }, v.warnings.map((w) => el("li", {}, w))) : null,
      lastFailure(v),
      runsOn(v),
      d.actions ? el("div", { class: "buttons" },
        v.goal_status === "active" ? el("button", { type: "button", id: "act-pause", onclick: (ev) => act(v.goal_id, "pause", {}, ev.currentTarget) }, "Pause") : null,
        v.goal_status === "paused" ? el("button", { type: "button", id: "act-resume", onclick: (ev) => act(v.goal_id, "resume", {}, ev.currentTarget) }, "Resume") : null,
        v.goal_status === "active" || v.goal_status === "paused" ? el("button", { type: "button", id: "act-done", class: "ghost", onclick: (ev) => { if (confirm(`Mark ${v.goal_id} done?`)) act(v.goal_id, "done", {}, ev.currentTarget); } }, "Mark done") : null,
        // Finished work runs again only when a person says so: Reopen asks first.
        v.goal_status === "done" ? el("button", { type: "button", id: "act-reopen", class: "ghost", onclick: (ev) => { if (confirm(`Reopen ${v.goal_id}? It becomes active again and its agents run more turns (new cost, new commits).`)) act(v.goal_id, "reopen", {}, ev.currentTarget); } }, "Reopen") : null)
        : el("p", { class: "muted" }, "Read-only: start `loopx serve --actions` to act from here.")),
    open.length ? el("section", { class: "panel attention" },
      el("h2", {}, "Open gates"),
      el("ul", { class: "cards" }, open.map((g) => el("li", { class: "card" },
        el("p", { class: "question" }, g.question),
        el("p", { class: "muted" }, "asked ", when(g.opened_at), g.opened_by !== "human" ? ` by turn ${g.opened_by}` : ""),
        d.actions ? answerForm(v.goal_id, g.id, g.question) : null)))) : null,
    el("div", { class: "grid" },
      el("section", { class: "panel" },
        el("h2", {}, "Objective"),
        el("p", { class: "objective" }, d.goal ? d.goal.objective : v.objective),
        listBlock("Next action", s.next_action ? [s.next_action] : []),
        checkBlock(s.last_check),
        listBlock("Beliefs (newest first)", (s.beliefs || []).slice().reverse()),
        listBlock("Priorities", s.priorities || []),
        listBlock("Non-goals", s.non_goals || []),
        (s.todos || []).length ? el("div", {}, el("h3", {}, "Todos"),
          el("ul", { class: "todos" }, s.todos.map((t) => el("li", { class: `todo-${t.status}` }, t.status === "done" ? "☑ " : t.status === "dropped" ? "☒ " : "☐ ", t.text)))) : null,
        d.state_error ? el("p", { class: "bad" }, d.state_error) : null),
      el("section", { class: "panel", id: "chart-panel" }, el("h2", {}, "Turns and spend"), chart(d), quotaText(v.quota)),
    ),
    d.worktree ? worktreePanel(wt ? wt.panel : d.worktree, wt, d.actions) : null,
    v.lease || d.running ? livePanel(v.goal_id) : null,
    log ? runLogPanel(v.goal_id, log) : null,
    turnsPanel(v.goal_id, d),
    resolvedGates(gates.filter((g) => g.answer !== null)),
  );
}

// The last turn's failure, when it failed: its message and a link to its run log on this page.
function lastFailure(v) {
  const t = v.last_turn;
  if (!t || t.status !== "failed") return null;
  return el("div", { id: "last-failure", class: "failure-box" },
    failureLine(t.seq, t.failure, t.failure_message || "(no message recorded)"),
    el("p", {}, el("a", { href: `#/goal/${encodeURIComponent(v.goal_id)}/run/${t.seq}`, id: "failure-log" },
      `Run log of turn ${t.seq}`), " ", el("span", { class: "muted" }, when(t.ended_at))));
}

// Where the goal's turns run: its account and host kind, its sandbox and allow-list (or none),
// the accounts it hands off to.
function runsOn(v) {
  const parts = [];
  if (v.account) parts.push(`account ${v.account}${v.host_kind ? ` (${v.host_kind})` : ""}`);
  parts.push(v.sandbox ? `sandbox ${v.sandbox}` : "no sandbox");
  if ((v.fallback_accounts || []).length) {
    parts.push(`hands off to ${v.fallback_accounts.join(", ")} (${v.handoffs} so far)`);
  }
  return el("p", { class: "muted", id: "runs-on" }, "Runs on ", parts.join(" · "));
}

// Worktree: a --worktree goal's own branch and folder, how far it is from its base, its last merge.
const MERGE_OUTCOMES = { pending: "in progress", merged: "merged", up_to_date: "already in the base",
  conflict: "conflict: the base is untouched", check_failed: "done-check failed on the merged tree: the base is untouched",
  base_moved: "the base moved meanwhile: untouched", already_merged: "already merged: the base has every change",
  aborted: "aborted: the base is as it was" };

function worktreePanel(w, wt, actions) {
  const v = w.view;
  const m = w.merge;
  const facts = v ? [
    ["Branch", el("code", {}, v.branch), ` from ${v.base}`],
    ["Folder", el("code", {}, v.path), v.exists ? "" : el("span", { class: "muted" }, v.phase ? " (not there now)" : " (made at its first turn)")],
    ["Commits", `${v.ahead} ahead of ${v.base}, ${v.behind} behind`],
    ["Uncommitted", v.dirty ? `${v.changes.length} path(s): ${v.changes.slice(0, 5).join(", ")}${v.changes.length > 5 ? ", …" : ""}` : "none"],
  ] : [];
  if (m) {
    facts.push(["Last merge", el("span", { class: `merge m-${m.outcome}` }, MERGE_OUTCOMES[m.outcome] || m.outcome),
      m.merged_commit ? [" as ", el("code", {}, m.merged_commit.slice(0, 12))] : "",
      m.step !== "finished" ? ` (at step ${m.step})` : "",
      m.conflicts.length ? ` in ${m.conflicts.join(", ")}` : "",
      m.gate_id !== null ? ` · gate ${m.gate_id} opened` : "", " ", when(m.updated_at)]);
  } else if (v) {
    facts.push(["Last merge", v.ahead ? el("span", { class: "warn" }, `not merged (${v.ahead} commit(s) only on ${v.branch})`) : "nothing to merge"]);
  }
  if (wt && wt.merge_interrupted) facts.push(["Merge", el("span", { class: "warn" }, "stopped part way (its process is gone): Merge finishes it")]);
  if (wt && wt.diff) facts.push(["Changes", diffLine(wt.diff)]);
  if (wt && wt.diff_error) facts.push(["Changes", el("span", { class: "bad" }, wt.diff_error)]);
  return el("section", { class: "panel", id: "worktree-panel" },
    el("h2", {}, "Worktree", wt && wt.merge_waiting ? [" ", badge("merge_waiting")] : ""),
    w.error ? el("p", { class: "bad" }, w.error) : null,
    el("dl", { class: "facts" }, facts.map(([k, ...rest]) => [el("dt", {}, k), el("dd", {}, ...rest)]).flat()),
    actions && wt && wt.merge_waiting && v ? mergeButton(wt.goal_id, v.base, v.ahead) : null);
}

// Done-check: the goal's newest, with the tail of its output when it failed.
function checkBlock(c) {
  if (!c) return null;
  return el("div", { id: "last-check" }, el("h3", {}, "Done-check"),
    el("p", { class: c.passed ? "" : "bad" }, `${c.summary} (turn ${c.turn_key}, `, when(c.checked_at), ")"),
    !c.passed && c.output_tail ? el("pre", { class: "tail" }, c.output_tail) : null);
}

function listBlock(title, items) {
  if (!items.length) return null;
  return el("div", {}, el("h3", {}, title), el("ul", {}, items.map((t) => el("li", {}, t))));
}

function resolvedGates(gates) {
  if (!gates.length) return null;
  return el("section", { class: "panel" }, el("h2", {}, "Answered gates"),
    el("ul", { class: "list" }, gates.slice(0, 20).map((g) => el("li", {},
      el("strong", {}, g.question), " → ", g.answer, " ", el("span", { class: "muted" }, when(g.resolved_at))))));
}

function quotaText(q) {
  const cpu = q.cpu_allowance_s !== null ? `, CPU ${secs(q.spent_cpu_s)} of ${secs(q.cpu_allowance_s)}` : "";
  return el("p", { class: "muted" },
    `Window ${q.window_hours}h: ${secs(q.spent_wall_s)} of ${secs(q.allowance_wall_s)} wall time spent in ${q.turns_in_window} turns${cpu}`,
    q.spent_tokens ? `, ${q.spent_tokens.toLocaleString()} tokens` : "",
    q.spent_cost_usd ? `, $${q.spent_cost_usd.toFixed(2)}` : "",
    q.exhausted ? el("strong", { class: "bad" }, ` · ${q.exhausted} budget spent, refills ${ago(q.refills_at)}`) : "");
}

// Cumulative wall time spent inside the quota window, one step per turn, against the allowance.
// Both axes zoom to the turns when they cover a small part of the window or of the allowance.
function chart(d) {
  const q = d.view.quota;
  const W = 560, H = 180, L = 44, B = 22, T = 14, R = 10;
  const windowStart = Date.parse(q.window_start);
  const end = Date.now();
  const turns = d.turns.filter((t) => Date.parse(t.ended_at) >= windowStart).reverse();
  let sum = 0;
  const pts = turns.map((t) => { sum += t.wall_s; return { x: Date.parse(t.ended_at), y: sum, t }; });
  const first = pts.length ? Date.parse(turns[0].started_at) : end;
  const zoomX = pts.length && end - first < (end - windowStart) / 4;
  const start = zoomX ? first - (end - first) * 0.1 : windowStart;
  const limitShown = q.allowance_wall_s <= Math.max(sum, 1) * 4;
  const top = (limitShown ? Math.max(q.allowance_wall_s, sum) : Math.max(sum, 1)) * 1.15;
  const X = (x) => L + ((x - start) / Math.max(end - start, 1)) * (W - L - R);
  const Y = (y) => H - B - (y / top) * (H - B - T);
  const path = pts.length ? `M${X(start)},${Y(0)} ` + pts.map((p) => `H${X(p.x).toFixed(1)} V${Y(p.y).toFixed(1)}`).join(" ") + ` H${X(end)}` : "";
  const used = q.allowance_wall_s ? (100 * q.spent_wall_s) / q.allowance_wall_s : 0;
  const span = secs((end - start) / 1000);
  return svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `wall time spent in the ${q.window_hours}h window against the allowance` },
    svg("line", { x1: L, y1: Y(0), x2: W - R, y2: Y(0), class: "axis" }),
    limitShown ? svg("line", { x1: L, y1: Y(q.allowance_wall_s), x2: W - R, y2: Y(q.allowance_wall_s), class: "limit" }) : null,
    svg("text", { x: W - R, y: limitShown ? Y(q.allowance_wall_s) - 4 : T - 2, "text-anchor": "end", class: "label" },
      limitShown ? `allowance ${secs(q.allowance_wall_s)}` : `allowance ${secs(q.allowance_wall_s)} is off the scale (${used.toFixed(1)}% used)`),
    svg("text", { x: L - 4, y: Y(0), "text-anchor": "end", class: "label" }, "0"),
    pts.length ? svg("text", { x: L - 4, y: Y(sum) + 4, "text-anchor": "end", class: "label" }, secs(sum)) : null,
    svg("text", { x: L, y: H - 4, class: "label" }, zoomX ? `-${span}` : `-${q.window_hours}h (window start)`),
    svg("text", { x: W - R, y: H - 4, "text-anchor": "end", class: "label" }, "now"),
    path ? svg("path", { d: path, class: "spend" }) : null,
    pts.map((p) => svg("circle", { cx: X(p.x), cy: Y(p.y), r: 3, class: `dot s-${p.t.status}` },
      svg("title", {}, `turn ${p.t.seq}: ${p.t.status}, ${secs(p.t.wall_s)} wall, ${secs(p.t.cpu_s)} CPU`))));
}

// The running host's newest output (redacted by the agent), polled every 2 s while shown.
let liveTimer = null;

function livePanel(goalId) {
  const pre = el("pre", { class: "live-output", id: "live-output", tabindex: 0 }, "waiting for output…");
  const info = el("span", { class: "muted", id: "live-info" }, "");
  const panel = el("section", { class: "panel", id: "live-panel" },
    el("h2", {}, "Live output ", info), pre);
  clearInterval(liveTimer);
  const poll = async () => {
    if (!document.body.contains(pre) && liveTimer !== null) { clearInterval(liveTimer); liveTimer = null; return; }
    try {
      const resp = await fetch(`/api/goals/${encodeURIComponent(goalId)}/live`, { headers: headers(), cache: "no-store" });
      if (resp.status === 204) { info.textContent = "(no host running now)"; return; }
      if (!resp.ok) return;
      const live = await resp.json();
      const stick = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = live.text || "(no output yet)";
      info.textContent = `(${live.total_bytes.toLocaleString()} bytes, turn ${live.turn_key}, ${ago(live.updated_at)})`;
      if (stick) pre.scrollTop = pre.scrollHeight;
    } catch (e) { /* the next poll retries */ }
  };
  setTimeout(poll, 0);
  liveTimer = setInterval(poll, 2000);
  return panel;
}

function turnsPanel(goalId, d) {
  const rows = d.turns.map((t) => el("tr", { class: `s-${t.status}` },
    el("td", { "data-label": "turn", class: "num" }, t.seq),
    el("td", { "data-label": "ended" }, when(t.ended_at)),
    el("td", { "data-label": "outcome" }, badge(t.status), t.kind ? ` ${t.kind}` : "", t.failure ? ` (${t.failure})` : ""),
    el("td", { "data-label": "duration", class: "num" }, secs(t.wall_s)),
    el("td", { "data-label": "CPU", class: "num wide" }, secs(t.cpu_s)),
    el("td", { "data-label": "tokens", class: "num wide" }, t.tokens ? t.tokens.toLocaleString() : "—"),
    el("td", { "data-label": "cost", class: "num wide" }, t.cost_usd ? `$${t.cost_usd.toFixed(3)}` : "—"),
    el("td", { "data-label": "summary", class: "why" }, t.summary),
    el("td", { "data-label": "log" }, t.has_log ? el("a", { href: `#/goal/${encodeURIComponent(goalId)}/run/${t.seq}` }, "log") : "")));
  return el("section", { class: "panel", id: "turns-panel" },
    el("h2", {}, "Last turns"),
    d.damaged_history_lines ? el("p", { class: "bad" }, `${d.damaged_history_lines} damaged history line(s) skipped`) : null,
    rows.length ? el("table", { class: "table turns" },
      el("thead", {}, el("tr", {}, ["Turn", "Ended", "Outcome", "Duration", "CPU", "Tokens", "Cost", "Summary", ""].map((h, i) => el("th", { class: i >= 4 && i <= 6 ? "wide" : "" }, h)))),
      el("tbody", {}, rows)) : el("p", { class: "muted" }, "No turn has run yet."));
}

function runLogPanel(goalId, log) {
  return el("section", { class: "panel", id: "run-log" },
    el("h2", {}, `Run log, turn ${log.seq || ""}`, " ",
      el("a", { href: `#/goal/${encodeURIComponent(goalId)}`, class: "muted" }, "close")),
    log.error ? el("p", { class: "bad" }, log.error) : markdown(log.markdown),
    log.truncated ? el("p", { class: "muted" }, "(cut at 256 KiB)") : null);
}

// A small Markdown subset (headings, fences, lists, paragraphs, inline code), built as DOM text.
function markdown(text) {
  const root = el("div", { class: "md" });
  let list = null, fence = null, para = [];
  const flush = () => { if (para.length) root.append(inline(el("p"), para.join(" "))); para = []; };
  for (const line of text.split("\n")) {
    if (fence) {
      if (line.startsWith("```")) { root.append(el("pre", {}, fence.join("\n"))); fence = null; } else fence.push(line);
      continue;
    }
    if (line.startsWith("```")) { flush(); list = null; fence = []; continue; }
    const h = line.match(/^(#{1,4})\s+(.*)$/);
    const li = line.match(/^\s*[-*]\s+(.*)$/);
    if (h) { flush(); list = null; root.append(inline(el(`h${Math.min(h[1].length + 2, 6)}`), h[2])); }
    else if (li) { flush(); if (!list) { list = el("ul"); root.append(list); } list.append(inline(el("li"), li[1])); }
    else if (!line.trim()) { flush(); list = null; }
    else para.push(line);
  }
  if (fence) root.append(el("pre", {}, fence.join("\n")));
  flush();
  return root;
}

function inline(node, text) {
  text.split(/(`[^`]+`)/).forEach((part) => {
    if (part.startsWith("`") && part.endsWith("`") && part.length > 1) node.append(el("code", {}, part.slice(1, -1)));
    else node.append(part.replace(/\*\*([^*]+)\*\*/g, "$1"));
  });
  return node;
}

// --- keyboard ---------------------------------------------------------------------------------

document.addEventListener("keydown", (ev) => {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (ev.key === "/" && !typing) {
    const q = document.getElementById("f-q");
    if (q) { ev.preventDefault(); q.focus(); }
  } else if (ev.key === "Escape" && state.route && state.route.goal && !typing) {
    location.hash = "#/";
  }
});

window.addEventListener("hashchange", () => {
  render().then(() => document.getElementById("main").focus({ preventScroll: true }));
});

document.addEventListener("DOMContentLoaded", () => {
  takeTokenFromUrl();
  setupToken();
  render();
  connect();
  setInterval(() => { for (const t of document.querySelectorAll("time")) t.textContent = ago(t.getAttribute("datetime")); }, 5000);
});
