// muster's dashboard: reads the gateway through the dashboard server (/api/...) and follows its
// event stream (/api/events, server-sent events read with fetch so the token travels in a
// header). Every event schedules a refresh of what is shown (on the nodes page, only an event
// naming a cluster shown; see loadNodes): nothing is computed here that the gateway does not
// answer. Plain JavaScript, no build step.
"use strict";

const state = {
  token: sessionStorage.getItem("muster-token") || "",
  queues: null, workloads: [], clusters: null, nodePages: byName(), detail: null,
  timeline: [],  // admissions, evictions and ends seen on the stream
  lastSequence: 0, error: "",
};
const TIMELINE_KEPT = 400;
const MARKED = { "workload.admitted": "admitted", "workload.evicted": "evicted", "workload.finished": "finished" };

// A map keyed by names the page is given (cohorts, clusters, resources): without a prototype,
// so a name such as "constructor" (a valid cohort or cluster name) finds nothing it did not put.
function byName() {
  return Object.create(null);
}

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function headers() {
  return state.token ? { Authorization: "Bearer " + state.token } : {};
}

async function api(path) {
  const reply = await fetch(path, { headers: headers() });
  if (reply.status === 401) { askToken(); throw new Error("the gateway asks for a token"); }
  const body = await reply.json();
  if (!reply.ok) throw new Error(body.error || reply.statusText);
  return body;
}

// --- quantities --------------------------------------------------------------------------

const SUFFIX = { m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 };

function quantity(text) {
  if (!text) return 0;
  const match = /^([0-9.]+)([a-zA-Z]*)$/.exec(text);
  if (!match) return 0;
  return parseFloat(match[1]) * (SUFFIX[match[2]] || 1);
}

// --- loading -----------------------------------------------------------------------------

async function refresh() {
  try {
    const route = location.hash.split("/");
    if (route[1] === "nodes") {
      await loadNodes(route);  // the nodes page shows clusters only: nothing else is asked
    } else {
      const [queues, workloads] = await Promise.all([api("/api/queues"), api("/api/workloads")]);
      state.queues = queues;
      state.workloads = workloads.items || [];
    }
    if (route[1] === "workload") {
      state.detail = await api(`/api/workload?namespace=${encodeURIComponent(route[2])}&name=${encodeURIComponent(route.slice(3).join("/"))}`);
    }
    state.error = "";
  } catch (err) {
    state.error = err.message;
  }
  render();
}

// The nodes page (#/nodes, or #/nodes/NAME/TOKEN for a page of one cluster's nodes after
// TOKEN: a 50 000-node cluster is paged). Each cluster's totals are asked every NODES_POLL_MS
// (heartbeats are no events) and when an event names a cluster shown; a cluster's page of
// nodes only when its totals or state changed, or an event named it (pods bound there): not
// every node of every cluster after each event. `?nodesPoll=SECONDS` in the page's address
// sets the poll (0.1 to 3600; anything else: 5), for a wall display or a test.
const NODES_POLL_MS = pollMs(new URLSearchParams(location.search).get("nodesPoll"));

function pollMs(given) {
  const seconds = Number(given);
  return given !== null && given !== "" && seconds >= 0.1 && seconds <= 3600 ? seconds * 1000 : 5000;
}
const nodesSeen = { route: "", clusters: byName(), named: new Set() };

async function loadNodes(route) {
  state.clusters = await api("/api/clusters?summary=1").catch(() => null);  // needs watch everywhere
  const where = route.join("/");
  if (where !== nodesSeen.route) {  // another page of nodes: every cluster's is asked afresh
    nodesSeen.route = where;
    nodesSeen.clusters = byName();
    state.nodePages = byName();
  }
  if (!state.clusters) { state.nodePages = byName(); return; }
  const only = route[2] === undefined ? null : decodeURIComponent(route[2]);
  const token = only === null ? "" : decodeURIComponent(route[3] || "");
  const shown = state.clusters.clusters.filter((c) => only === null || c.name === only);
  const named = nodesSeen.named;
  nodesSeen.named = new Set();
  const changed = shown.filter((c) => !state.nodePages[c.name] || named.has(c.name) || nodesSeen.clusters[c.name] !== seen(c));
  const pages = await Promise.all(changed.map((c) =>
    api(`/api/clusters?cluster=${encodeURIComponent(c.name)}&continue=${encodeURIComponent(token)}`).catch(() => null)));
  const kept = byName();
  for (const c of shown) kept[c.name] = state.nodePages[c.name] ?? null;
  changed.forEach((c, i) => { kept[c.name] = pages[i]; nodesSeen.clusters[c.name] = seen(c); });
  state.nodePages = kept;
}

// A cluster's totals and state as last shown, but for its heartbeat's age (which always moves).
function seen(cluster) {
  return JSON.stringify({ ...cluster, heartbeatAgeSeconds: 0 });
}

function onNodesPage() {
  return location.hash.split("/")[1] === "nodes";
}

let scheduled = null;
function refreshSoon() {
  if (scheduled === null) scheduled = setTimeout(() => { scheduled = null; refresh(); }, 200);
}

async function follow() {
  const live = document.getElementById("live");
  for (;;) {
    try {
      const reply = await fetch(`/api/events?from=${state.lastSequence + 1}`, { headers: headers() });
      live.textContent = "live"; live.className = "live on";
      const reader = reply.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          onMessage(buffer.slice(0, end));
          buffer = buffer.slice(end + 2);
        }
      }
    } catch (err) { /* reconnect below */ }
    live.textContent = "reconnecting…"; live.className = "live off";
    await new Promise((done) => setTimeout(done, 2000));
  }
}

function onMessage(block) {
  let kind = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) kind = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  if (!data) return;
  const body = JSON.parse(data);
  if (kind === "failure") {
    if (body.code === "UNAUTHENTICATED") askToken();
    state.error = body.error; render();
    return;
  }
  state.lastSequence = Math.max(state.lastSequence, body.sequence);
  if (MARKED[body.type]) {
    body.clusterQueue ||= clusterQueueOf(body.workload);
    state.timeline.push(body);
    if (state.timeline.length > TIMELINE_KEPT) state.timeline.shift();
  }
  if (!onNodesPage()) refreshSoon();
  else if (body.cluster && state.clusters?.clusters.some((c) => c.name === body.cluster)) {
    nodesSeen.named.add(body.cluster);
    refreshSoon();
  }
}

// --- views -------------------------------------------------------------------------------

function render() {
  const view = document.getElementById("view");
  const route = location.hash.split("/");
  const error = state.error ? `<section class="error">${esc(state.error)}</section>` : "";
  if (route[1] === "workload" && state.detail) view.innerHTML = error + workloadPage(state.detail);
  else if (route[1] === "workloads") view.innerHTML = error + workloadsSection(state.workloads);
  else if (route[1] === "nodes") view.innerHTML = error + nodesSection(state.clusters, state.nodePages);
  else view.innerHTML = error + queuesSection(state.queues) + localQueuesSection(state.queues, state.workloads) + timelineSection(state.timeline);
}

function queuesSection(queues) {
  if (!queues) return `<section><h2>ClusterQueues</h2><p class="muted">loading…</p></section>`;
  const cohorts = byName();
  for (const cq of queues.clusterQueues) (cohorts[cq.cohort || ""] ??= []).push(cq);
  const blocks = Object.keys(cohorts).sort().map((cohort) => `
    <h3>${cohort ? "Cohort " + esc(cohort) : "Without cohort"}</h3>
    <div class="grid">${cohorts[cohort].map(clusterQueueCard).join("")}</div>`);
  return `<section><h2>Cohorts and ClusterQueues</h2>${blocks.join("") || '<p class="muted">No queues yet: muster submit a ClusterQueue.</p>'}
    <div class="legend"><span><i style="background:var(--used)"></i>reserved within nominal</span>
    <span><i style="background:var(--borrowed)"></i>borrowed</span><span><i style="background:var(--free)"></i>nominal free</span>
    <span><i style="background:var(--limit)"></i>borrowing limit</span></div></section>`;
}

function clusterQueueCard(cq) {
  const stopped = cq.active ? "" : `<span class="tag stopped">${esc(cq.inactiveReason || "inactive")}</span>`;
  const rows = cq.flavors.flatMap((flavor) => flavor.resources.map((r) => quotaRow(flavor.name, r)));
  return `<div class="card" data-cq="${esc(cq.name)}"><h3>${esc(cq.name)}${stopped}</h3>
    <div class="counts">${cq.pendingWorkloads} pending · ${cq.reservingWorkloads} reserving · ${cq.admittedWorkloads} admitted</div>
    ${rows.join("")}</div>`;
}

function quotaRow(flavor, r) {
  const nominal = quantity(r.nominal), reserved = quantity(r.reserved), borrowed = quantity(r.borrowed);
  const limit = r.borrowingLimit ? quantity(r.borrowingLimit) : borrowed;
  const scale = Math.max(nominal + limit, reserved, 1e-9);
  const pct = (x) => `${Math.min(100, (100 * x) / scale).toFixed(2)}%`;
  const within = Math.min(reserved, nominal);
  return `<div class="quota" data-resource="${esc(flavor)}/${esc(r.name)}">
    <span>${esc(flavor)} · ${esc(r.name)}</span>
    <div class="bar" title="reserved ${esc(r.reserved)} of nominal ${esc(r.nominal)}, borrowed ${esc(r.borrowed || "0")}">
      <span class="limit" style="left:${pct(nominal)};width:${pct(limit)}"></span>
      <span class="nominal" style="left:0;width:${pct(nominal)}"></span>
      <span class="used" style="left:0;width:${pct(within)}"></span>
      <span class="borrowed" style="left:${pct(nominal)};width:${pct(Math.max(0, reserved - nominal))}"></span>
    </div>
    <span class="muted">${esc(r.reserved || "0")} / ${esc(r.nominal || "0")}${borrowed ? " (+" + esc(r.borrowed) + ")" : ""}</span></div>`;
}

function localQueuesSection(queues, workloads) {
  if (!queues) return "";
  const pending = workloads.filter((w) => w.status === "PENDING" || w.status === "INACTIVE");
  const waitersOf = (namespace, name) => pending
    .filter((w) => w.namespace === namespace && w.localQueue === name)
    .sort((a, b) => position(a) - position(b));
  const cards = queues.localQueues.map((lq) => {
    const head = `<span class="tag">→ ${esc(lq.clusterQueue)}</span>`;
    const counts = `${lq.pendingWorkloads} pending · ${lq.admittedWorkloads} admitted`;
    return localQueueCard(lq.namespace, lq.name, head, counts, waitersOf(lq.namespace, lq.name));
  });
  // Workloads naming a LocalQueue that does not exist wait too (Pending, and the reason says
  // so): a card of their own, else the operator looking here never sees them.
  const known = new Set(queues.localQueues.map((lq) => `${lq.namespace}/${lq.name}`));
  const missing = [...new Set(pending.map((w) => `${w.namespace}/${w.localQueue || ""}`))]
    .filter((key) => !known.has(key)).sort();
  for (const key of missing) {
    const [namespace, name] = [key.slice(0, key.indexOf("/")), key.slice(key.indexOf("/") + 1)];
    const waiters = waitersOf(namespace, name);
    const head = '<span class="tag missing">no such LocalQueue</span>';
    cards.push(localQueueCard(namespace, name, head, `${waiters.length} pending`, waiters, " missing"));
  }
  return `<section><h2>LocalQueues and who waits</h2><div class="grid">${cards.join("") || '<p class="muted">No LocalQueues yet.</p>'}</div></section>`;
}

function localQueueCard(namespace, name, head, counts, waiters, extraClass = "") {
  const list = waiters.map((w) => `<tr data-workload="${esc(w.key)}"><td>${position(w) < 1e9 ? position(w) : "-"}</td>
    <td><a href="#/workload/${esc(w.namespace)}/${esc(w.name)}">${esc(w.name)}</a></td>
    <td><span class="status ${esc(w.status)}">${esc(w.status)}</span></td><td class="muted">${esc(reasonOf(w))}</td></tr>`);
  return `<div class="card${extraClass}" data-lq="${esc(namespace)}/${esc(name)}"><h3>${esc(namespace)}/${esc(name)} ${head}</h3>
    <div class="counts">${counts}</div>
    ${list.length ? `<table><tr><th>#</th><th>workload</th><th>status</th><th>why it waits</th></tr>${list.join("")}</table>` : '<p class="muted">nothing waits</p>'}</div>`;
}

function clusterQueueOf(key) {
  const known = state.workloads.find((w) => w.key === key);
  return known ? known.clusterQueue : "";
}

function position(w) {
  return w.positionInLocalQueue >= 0 ? w.positionInLocalQueue : 1e9;
}

function reasonOf(w) {
  return [w.reason, w.message].filter(Boolean).join(": ");
}

function timelineSection(events) {
  if (!events.length) return `<section><h2>Timeline</h2><p class="muted">Admissions and evictions appear here as they happen.</p></section>`;
  const start = events[0].time, end = Math.max(events[events.length - 1].time, start + 1000);
  const lanes = [...new Set(events.map((e) => e.clusterQueue || e.cluster || "-"))].slice(0, 3);
  const marks = events.map((e) => {
    const lane = Math.max(0, lanes.indexOf(e.clusterQueue || e.cluster || "-"));
    const left = ((100 * (e.time - start)) / (end - start)).toFixed(2);
    return `<span class="mark ${MARKED[e.type]}" data-event-type="${esc(e.type)}" style="left:${left}%;top:${lane * 28 + 8}px" title="${esc(e.workload)}: ${esc(e.type)} ${esc(e.detail)}"></span>`;
  });
  const lanesHtml = lanes.map((name, i) => `<div class="lane" style="top:${i * 28 + 8}px"><b>${esc(name)}</b></div>`);
  const recent = events.slice(-12).reverse().map((e) => `<li data-event-type="${esc(e.type)}">${new Date(e.time).toLocaleTimeString()} <b>${esc(MARKED[e.type])}</b> ${esc(e.workload)} <span class="muted">${esc(e.detail)}</span></li>`);
  return `<section><h2>Timeline of admissions, evictions and ends</h2>
    <div class="timeline">${lanesHtml.join("")}${marks.join("")}
    <span class="axis" style="left:0">${new Date(start).toLocaleTimeString()}</span>
    <span class="axis" style="right:0">${new Date(end).toLocaleTimeString()}</span></div>
    <ol class="recent">${recent.join("")}</ol></section>`;
}

function workloadsSection(items) {
  const rows = items.map((w) => `<tr data-workload="${esc(w.key)}" data-status="${esc(w.status)}">
    <td>${esc(w.namespace)}</td><td><a href="#/workload/${esc(w.namespace)}/${esc(w.name)}">${esc(w.name)}</a></td>
    <td>${esc(w.ownerName ? w.ownerKind + "/" + w.ownerName : "-")}</td><td>${esc(w.localQueue || "-")}</td>
    <td>${esc(w.clusterQueue || "-")}</td><td><span class="status ${esc(w.status)}">${esc(w.status)}</span></td>
    <td>${w.positionInLocalQueue >= 0 ? w.positionInLocalQueue : "-"}</td><td>${esc((w.nodes || []).join(", ") || "-")}</td>
    <td class="muted">${esc(reasonOf(w))}</td></tr>`);
  return `<section><h2>Workloads</h2><table><tr><th>namespace</th><th>name</th><th>job</th><th>LocalQueue</th>
    <th>ClusterQueue</th><th>status</th><th>position</th><th>nodes</th><th>reason</th></tr>${rows.join("")}</table>
    ${items.length ? "" : '<p class="muted">No workloads yet.</p>'}</section>`;
}

function workloadPage(d) {
  const s = d.summary;
  const fields = [["Namespace", s.namespace], ["Job", s.ownerName ? `${s.ownerKind}/${s.ownerName}` : "-"],
    ["LocalQueue", s.localQueue || "-"], ["ClusterQueue", s.clusterQueue || "-"], ["Status", s.status],
    ["Position", s.positionInLocalQueue >= 0 ? s.positionInLocalQueue : "-"], ["Why", reasonOf(s) || "-"],
    ["Cluster", s.cluster || "-"], ["Evictions", s.evictions]];
  if (d.route) fields.push(["Route", `${d.route.fromClusterQueue} → ${d.route.toClusterQueue} (${d.route.policy}): ${d.route.message}`]);
  const conditions = d.conditions.map((c) => `<tr><td>${esc(c.type)}</td><td>${esc(c.status)}</td><td>${esc(c.reason)}</td><td>${esc(c.message)}</td></tr>`);
  const pods = d.pods.map((p) => `<tr><td>${esc(p.pod.name)}</td><td>${esc(p.node)}</td></tr>`);
  const events = d.events.map((e) => `<tr><td>${e.sequence}</td><td>${esc(e.type)}</td><td>${esc(e.detail)}${e.count > 1 ? ` <span class="tag">×${e.count}</span>` : ""}</td></tr>`);
  return `<section data-detail="${esc(s.key)}"><h2>${esc(s.key)} <span class="status ${esc(s.status)}">${esc(s.status)}</span></h2>
    <dl class="fields">${fields.map(([k, v]) => `<dt>${esc(k)}</dt><dd>${esc(v)}</dd>`).join("")}</dl></section>
    <section><h2>Conditions</h2><table><tr><th>type</th><th>status</th><th>reason</th><th>message</th></tr>${conditions.join("")}</table></section>
    <section><h2>Pods and nodes</h2>${pods.length ? `<table><tr><th>pod</th><th>node</th></tr>${pods.join("")}</table>` : '<p class="muted">No pod bound.</p>'}</section>
    <section><h2>Events</h2><table><tr><th>seq</th><th>type</th><th>detail</th></tr>${events.join("")}</table></section>`;
}

function nodesSection(clusters, pages) {
  if (!clusters) return `<section><h2>Clusters and nodes</h2><p class="muted">Needs watch in every namespace.</p></section>`;
  const blocks = clusters.clusters.filter((c) => pages[c.name] !== undefined).map((c) => `<h3 data-cluster="${esc(c.name)}">Cluster ${esc(c.name)}
    <span class="tag ${c.state === "Ready" ? "" : "stopped"}" title="${esc(c.message || "")}">${esc(c.state)}${c.reason ? ` (${esc(c.reason)})` : ""}, reported ${c.heartbeatAgeSeconds}s ago</span></h3>
    ${c.state === "Refused" ? `<div class="error" data-refused="${esc(c.name)}">${esc(c.message)}</div>` : ""}
    <div class="muted" data-totals="${esc(c.name)}">${c.nodeCount} nodes, free ${roomText(c.freeTotal, c.allocatableTotal)}</div>
    ${nodesPage(c, pages[c.name])}`);
  return `<section><h2>Clusters and nodes</h2>${blocks.join("") || '<p class="muted">No cluster has reported yet.</p>'}</section>`;
}

// "cpu 3/8, memory 10Gi/32Gi": free of allocatable per resource, by name (a map's JSON has no order).
function roomText(free, allocatable) {
  return Object.keys(free).sort().map((k) => `${esc(k)} ${esc(free[k])}/${esc(Object.hasOwn(allocatable, k) ? allocatable[k] : "?")}`).join(", ");
}

function nodesPage(cluster, page) {
  const mine = page && page.clusters.find((c) => c.name === cluster.name);  // a gateway of before pages lists them all
  const nodes = mine ? mine.nodes : [];
  const grid = `<div class="grid">${nodes.map((n) => `<div class="node" data-node="${esc(n.name)}"><b>${esc(n.name)}</b>
      <div class="muted">free ${roomText(n.free, n.allocatable)}</div>
      <div class="pods">${n.pods.length ? n.pods.map((p) => esc(p.pod.namespace + "/" + p.pod.name)).join("<br>") : '<span class="muted">no pods</span>'}</div></div>`).join("")}</div>`;
  if (!page || (!page.continueToken && nodes.length === cluster.nodeCount)) return grid;
  const here = `#/nodes/${encodeURIComponent(cluster.name)}`;
  const next = page.continueToken ? ` <a data-next="${esc(cluster.name)}" href="${here}/${encodeURIComponent(page.continueToken)}">next ${nodes.length} →</a>` : "";
  return `${grid}<p class="muted">${nodes.length} of ${cluster.nodeCount} nodes shown, ${page.remainingNodeCount} after these. <a href="${here}">first page</a>${next}</p>`;
}

// --- token -------------------------------------------------------------------------------

function askToken() {
  const dialog = document.getElementById("token-dialog");
  if (!dialog.open) dialog.showModal();
}

document.getElementById("token-button").addEventListener("click", askToken);
document.getElementById("token-dialog").addEventListener("close", (event) => {
  if (event.target.returnValue !== "save") return;
  state.token = document.getElementById("token-input").value.trim();
  sessionStorage.setItem("muster-token", state.token);
  refresh();
});
window.addEventListener("hashchange", () => { state.detail = null; refresh(); });

refresh();
follow();
setInterval(() => { if (onNodesPage()) refreshSoon(); }, NODES_POLL_MS);
