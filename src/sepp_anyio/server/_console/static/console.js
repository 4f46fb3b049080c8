// The sepp console's only script: the live queue table and the lease countdown.
// Everything is written with textContent (never innerHTML): queue names are user data.
"use strict";

function liveQueues(table) {
  const url = table.dataset.live;
  const body = table.tBodies[0];
  const fields = ["ready", "scheduled", "leased", "dead_letters"];
  function cell(text, numeric) {
    const td = document.createElement("td");
    if (numeric) td.className = "n";
    td.textContent = text;
    return td;
  }
  function render(data) {
    const rows = [];
    for (const q of data.queues) {
      const tr = document.createElement("tr");
      tr.dataset.queue = q.name;
      const name = document.createElement("td");
      const link = document.createElement("a");
      link.href = "/queues/" + encodeURIComponent(q.name);
      link.textContent = q.name;
      name.appendChild(link);
      tr.appendChild(name);
      for (const f of fields) {
        const td = cell(String(q[f]), true);
        td.dataset.field = f;
        tr.appendChild(td);
      }
      const oldest = cell(q.oldest_ready_age_s === null ? "–" : q.oldest_ready_age_s.toFixed(1) + " s", true);
      oldest.dataset.field = "oldest";
      tr.appendChild(oldest);
      for (const k of ["enqueue", "ack", "nack"]) {
        const td = cell(String(q.rates[k]), true);
        td.dataset.field = k;
        tr.appendChild(td);
      }
      rows.push(tr);
    }
    if (rows.length) body.replaceChildren(...rows);
    table.dataset.updated = String(data.now_ms);
  }
  async function poll() {
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store" });
      if (response.ok) render(await response.json());
    } catch (e) {
      // The server is restarting or gone: keep the last numbers, try again next second.
    }
  }
  setInterval(poll, 1000);
}

function leaseCountdown(span) {
  const end = Date.now() + Number(span.dataset.remainingMs);
  function tick() {
    const left = Math.max(0, end - Date.now());
    span.textContent = (left / 1000).toFixed(1);
  }
  setInterval(tick, 200);
}

document.addEventListener("DOMContentLoaded", () => {
  const table = document.querySelector("table[data-live]");
  if (table) liveQueues(table);
  const lease = document.getElementById("lease-remaining");
  if (lease) leaseCountdown(lease);
});
