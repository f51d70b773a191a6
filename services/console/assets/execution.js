// One execution: status, input and output, the timeline (gantt.js), the definition's steps
// with each step's state, pending work (a task's priority and flow control: its concurrency
// key, its rate limit, what it waits on), parent and children, the raw history, and the
// operator actions (signal, query, update, cancel, replay check; resume and terminate
// when parked; migrate, reset and fork in evolve.js). Refreshes every few seconds while the
// execution is open. Time travel: the scrubber (scrubber.js) or a click on a history event
// shows all of it but the history and the children as of a seq
// (`DescribeExecution.at_seq`, kept in the URL as `?at=SEQ`), queries answer as of it,
// reset and fork default to it, and the refresh pauses until the view is back at the head.

import { call, esc, badge, when, span, json, errorBox, short } from './api.js';
import { timeline, svg, LEGEND } from './gantt.js';
import { scrubber, parseAt, withAt } from './scrubber.js';
import { panels, stepsThatRan, wireEvolve } from './evolve.js';
import { steps, wireTree } from './tree.js';

const REFRESH_MS = 3000;

/** All events of the latest run (GetHistory pages) and the run's number. */
async function allEvents(id) {
  const events = []; let pageToken = ''; let run = 0;
  do {
    const page = await call('WorkflowService/GetHistory', { executionId: id, run, pageSize: 1000, pageToken });
    events.push(...page.events);
    run = page.run; // later pages of the same run, even if a new one starts meanwhile
    pageToken = page.nextPageToken;
  } while (pageToken);
  return { events, run };
}

/** The definition's top-level steps in order with what each needs (the DAG's edges), from
 * the document: JSON, or YAML's `- id: name` items at the list's own indentation (nested
 * steps of groups, branches and loops are drawn by tree.js) and their `needs: [a, b]`. */
export function stepIds(document) {
  try { return JSON.parse(document).steps.map((s) => ({ id: s.id, needs: s.needs || [] })); } catch { /* YAML */ }
  const steps = [];
  const body = document.split(/^steps:\s*$/m)[1] || '';
  let dash = null; // the indentation of the list's items
  let keys = null; // the indentation of the keys of its items
  for (const line of body.split('\n')) {
    if (/^\S/.test(line)) break; // the next top-level key
    const id = line.match(/^(\s*)-(\s*\{?\s*)id:\s*["']?([\w.-]+)/);
    if (id && (dash == null || id[1].length === dash)) {
      dash = id[1].length;
      keys = dash + 1 + id[2].length;
      const flow = line.match(/needs:\s*\[([^\]]*)\]/); // `- { id: b, needs: [a], ... }`
      steps.push({ id: id[3], needs: flow ? flow[1].split(',').map((n) => n.trim().replace(/["']/g, '')).filter(Boolean) : [] });
      continue;
    }
    const needs = line.match(/^(\s+)needs:\s*\[([^\]]*)\]/);
    if (needs && steps.length && needs[1].length === keys) steps[steps.length - 1].needs = needs[2].split(',').map((n) => n.trim().replace(/["']/g, '')).filter(Boolean);
  }
  return steps;
}

export async function render(main, id, params) {
  main.innerHTML = `<div id="exec-head"><p class="muted">Loading ${esc(id)}…</p></div><div id="scrubber"></div><div id="exec-body"></div>`;
  const head = main.querySelector('#exec-head');
  const body = main.querySelector('#exec-body');
  let selected = params.get('bar');
  let at = parseAt(params.get('at')); // the seq shown; null: live (the head)
  let history = null; // refetched while live; kept while scrubbing (a prefix never changes)
  let open = true;
  let generation = 0; // only the latest load draws
  const defs = new Map(); // `workflow@version` → its definition (immutable once registered)
  let notice = ''; // what the last reset did, shown above the view until the page is left
  let drawnAt; // the position last drawn: a redraw there keeps what the form fields hold
  let drawSteps = () => ''; // the steps table of the last load (drawn again on a loop's pick)
  wireTree(body, () => { const t = body.querySelector('#steps-tree'); if (t) t.innerHTML = drawSteps(); });
  const scrub = scrubber(main.querySelector('#scrubber'), (seq) => {
    at = seq;
    window.history.replaceState(null, '', withAt(location, at));
    load().catch((e) => { body.innerHTML = errorBox(e); });
  });
  const load = async () => {
    const mine = ++generation;
    let seq = at; // this load's position: `at` may move while it waits
    const [hist, now] = await Promise.all([
      seq == null || !history ? allEvents(id) : history,
      seq == null ? call('WorkflowService/DescribeExecution', { executionId: id }) : null,
    ]);
    history = hist;
    const { events } = hist;
    const lastSeq = events.length ? Number(events[events.length - 1].seq) : 0;
    if (seq != null && seq >= lastSeq) { // a link at or past the head: the head is live
      seq = null;
      if (mine === generation) { at = null; window.history.replaceState(null, '', withAt(location, null)); }
    }
    const { execution: d } = now || await call('WorkflowService/DescribeExecution', seq == null ? { executionId: id } : { executionId: id, run: hist.run, atSeq: seq });
    const info = d.info;
    const key = `${info.workflow}@${info.version}`;
    const def = defs.get(key) ?? await call('WorkflowService/GetWorkflow', { name: info.workflow, version: info.version }).catch(() => null);
    if (def) defs.set(key, def);
    const children = await call('WorkflowService/ListExecutions', { parentId: id, pageSize: 100 }).catch(() => ({ executions: [] }));
    if (mine !== generation) return open; // the operator moved on meanwhile
    // As of a seq: the events up to it, drawn on the whole run's scale with a cursor there.
    const shown = seq ?? lastSeq;
    const past = seq == null ? events : events.filter((e) => Number(e.seq) <= seq);
    const cursor = seq == null ? null : Date.parse(past[past.length - 1].timestamp);
    const full = timeline(events);
    const chart = svg(cursor == null ? full : { ...timeline(past, cursor), end: full.end }, cursor);
    const created = events.find((e) => /created/i.test(e.eventType));
    if (seq == null) open = ['RUNNING', 'COMPENSATING', 'SUSPENDED'].includes(short(info.status));
    const closed = info.closedAt && !info.closedAt.startsWith('1970');
    const until = closed ? Date.parse(info.closedAt) : cursor ?? Date.now();
    const unfolded = new Set([...body.querySelectorAll('details[open][id]')].map((x) => x.id));
    const filled = seq === drawnAt ? [...body.querySelectorAll('input[id], select[id], textarea[id]')].map((f) => [f.id, f.type === 'checkbox' ? f.checked : f.value]) : [];
    const declared = def ? stepIds(def.workflow.document) : [];
    const ran = stepsThatRan(declared.map((s) => s.id), events);
    drawSteps = () => steps(def, declared, d, past, ran);
    head.innerHTML = `<h1>${esc(info.workflow)} <span class="muted">v${esc(info.version)}</span> ${badge(info.status)}</h1>`;
    body.innerHTML = `${notice}
      <div class="grid">
        <div class="card"><dl class="kv">
          <dt>Execution</dt><dd class="mono" id="execution-id">${esc(info.executionId)}</dd>
          <dt>Run</dt><dd id="execution-run">${esc(info.run)}</dd>
          <dt>Created</dt><dd>${esc(when(info.createdAt))}</dd>
          <dt>Closed</dt><dd>${esc(when(info.closedAt)) || '—'}</dd>
          <dt>Duration</dt><dd>${esc(span(until - Date.parse(info.createdAt)))}</dd>
          ${info.parentId ? `<dt>Parent</dt><dd class="mono"><a href="/ui/executions/${encodeURIComponent(info.parentId)}">${esc(info.parentId)}</a></dd>` : ''}
          ${info.rootId && info.rootId !== info.executionId ? `<dt>Root</dt><dd class="mono"><a href="/ui/executions/${encodeURIComponent(info.rootId)}">${esc(info.rootId)}</a></dd>` : ''}
          ${info.scheduleId ? `<dt>Schedule</dt><dd class="mono"><a href="/ui/schedules?id=${encodeURIComponent(info.scheduleId)}">${esc(info.scheduleId)}</a></dd>` : ''}
          <dt>Definition</dt><dd class="mono"><a href="/ui/workflows?name=${encodeURIComponent(info.workflow)}&version=${encodeURIComponent(info.version)}">${esc(info.definitionHash.slice(0, 16))}</a></dd>
        </dl></div>
        <div class="card"><h2>Input</h2>${json(created?.payload?.input ?? null)}</div>
        <div class="card" id="state"><h2>${d.error?.code ? 'Error' : 'Output'}</h2>${d.error?.code ? `<p class="error" id="execution-error">${esc(d.error.code)}: ${esc(d.error.message)}</p>${d.error.details ? json(d.error.details) : ''}` : json(d.output ?? null)}
          ${d.suspension?.reason ? `<p class="error">Suspended: ${esc(d.suspension.reason)} (${esc(d.suspension.failures)} failures)</p>` : ''}
          ${d.waitingForSlot ? `<p class="waiting" id="waiting-for-slot">Waiting for a slot of concurrency key <span class="mono">${esc(d.waitingForSlot)}</span>: another execution holds it; this one starts when it closes.</p>` : ''}</div>
      </div>
      <h2>Timeline</h2>${LEGEND}${chart.html}<div id="bar-detail" class="card result" aria-live="polite"></div>
      <h2>Steps</h2><div id="steps-tree">${drawSteps()}</div>
      ${pending(d)}
      ${children.executions.length ? `<h2>Children</h2><ul>${children.executions.map((c) => `<li><a class="mono" href="/ui/executions/${encodeURIComponent(c.executionId)}">${esc(c.executionId)}</a> ${esc(c.workflow)} ${badge(c.status)}</li>`).join('')}</ul>` : ''}
      <h2>Actions</h2>${actions(open, seq)}${panels(open, seq, ran)}
      <details id="history-details"><summary class="h2">History (${events.length} events)</summary>${historyTable(id, events, seq)}</details>`;
    for (const x of unfolded) body.querySelector(`#${x}`)?.setAttribute('open', '');
    for (const [fid, v] of filled) {
      const f = body.querySelector(`#${fid}`);
      if (f?.type === 'checkbox') f.checked = v;
      else if (f && (f.tagName !== 'SELECT' || [...f.options].some((o) => o.value === v))) f.value = v;
    }
    drawnAt = seq;
    // What the view shows: the seq (the head's when live), for links and tests.
    body.dataset.seq = String(shown);
    body.dataset.live = String(seq == null);
    scrub.update(events, seq);
    const detail = body.querySelector('#bar-detail');
    const pick = (i) => {
      const b = chart.bars[i];
      if (!b) return;
      selected = String(i);
      const q = new URLSearchParams(location.search); q.set('bar', i);
      window.history.replaceState(null, '', `${location.pathname}?${q}`);
      detail.innerHTML = `<dl class="kv" id="attempt-detail"><dt>Step</dt><dd>${esc(b.step)}</dd><dt>What</dt><dd>${esc(b.kind)}${b.attempt ? ` ${esc(b.attempt)}` : ''}${b.open ? ' (still open)' : ''}</dd>
        <dt>From</dt><dd>${esc(new Date(b.start).toLocaleString())}</dd><dt>Took</dt><dd>${esc(span(b.end - b.start))}</dd>
        ${b.worker ? `<dt>Worker</dt><dd>${esc(b.worker)}</dd>` : ''}${b.child ? `<dt>Child</dt><dd><a href="/ui/executions/${encodeURIComponent(b.child)}">${esc(b.child)}</a></dd>` : ''}
        ${b.error ? `<dt>Error</dt><dd class="error" id="attempt-error">${esc(b.error.code)}: ${esc(b.error.message)}</dd>` : ''}</dl>`;
    };
    for (const rect of body.querySelectorAll('#gantt .bar')) {
      rect.addEventListener('click', () => pick(Number(rect.dataset.bar)));
      rect.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pick(Number(rect.dataset.bar)); } });
    }
    if (selected != null) pick(Number(selected));
    wire(body, id, seq, hist.run);
    wireEvolve(body, { id, at: seq, run: hist.run, ran, onReset: reopened });
    return open;
  };
  // A reset is done: the execution goes on in its next run, shown live.
  const reopened = (r, point) => {
    const old = Number(r.run) - 1;
    notice = `<p class="banner" id="exec-notice" role="status">Reset ${esc(point)}: run ${esc(old)} ended and the execution goes on in run <b>${esc(r.run)}</b> from seq ${esc(r.plan.throughSeq)} (<code>RunRestored</code> at seq ${esc(r.seq)}); run ${esc(old)} stays readable (<code>orbit execution history ${esc(id)} --run ${esc(old)}</code>).</p>`;
    history = null;
    scrub.move(null, true);
  };
  // An event of the history table picks its seq (a plain click; others open the link).
  body.addEventListener('click', (e) => {
    const row = e.target.closest('#history tr[data-seq]');
    if (!row || (e.target.closest('a') && (e.ctrlKey || e.metaKey || e.shiftKey))) return;
    e.preventDefault();
    e.stopPropagation();
    scrub.move(Number(row.dataset.seq), true);
  });
  try { open = await load(); } catch (e) { scrub.stop(); main.innerHTML = errorBox(e); return null; }
  // Refresh while open and live (scrubbing pauses it), but never under the operator's
  // hands (a form being filled).
  const timer = setInterval(async () => {
    if (at != null || !open || document.hidden || main.contains(document.activeElement) && document.activeElement.matches('input:not(#scrub-range), textarea, select')) return;
    if (main.querySelector('.result[data-keep]')) return; // a diff, a plan or a fork shown
    try { open = await load(); } catch { /* keep the last view */ }
  }, REFRESH_MS);
  return () => { clearInterval(timer); scrub.stop(); };
}

// What flow control holds a queued attempt back on (`PendingTask.waiting_on`): the words
// shown and why (docs/flow-control.md).
const WAITS = {
  CONCURRENCY: ['concurrency limit', 'as many attempts holding its concurrency key are running as its limit allows'],
  RATE_LIMIT: ['rate limit', 'its rate-limit bucket has no start left in the current window, or its named limit is not set'],
};

// One pending task: its attempt, its place in the queue (priority 1 first … 5 last) and
// what flow control says of it (the keys it holds or takes from, what it waits on).
// The workers an attempt may go to (`on:` labels, `sticky:` worker), as `pool=gpu`.
function needs(t) {
  const labels = Object.entries(t.labels || {}).map(([k, v]) => `${esc(k)}=${esc(v)}`).join(' ');
  const sticky = t.stickyWorker ? `<span title="the worker of the previous attempt, until the sticky timeout">prefers ${esc(t.stickyWorker)}</span>` : '';
  return [labels, sticky].filter(Boolean).join('<br>');
}

function taskRow(t) {
  const wait = WAITS[short(t.waitingOn)];
  const rateLimit = t.rateLimitKey ? `<a href="/ui/rate-limits" title="the named rate limits">${esc(t.rateLimitKey)}</a>` : '';
  return `<tr data-unit="${esc(t.unit)}"${wait ? ` data-waiting="${esc(short(t.waitingOn))}"` : ''}><td class="mono">${esc(t.unit)}</td><td>${esc(t.task?.name)}</td><td>${esc(t.attempt)}</td><td>${esc(short(t.state))}</td>
    <td class="priority">${Number(t.priority) ? esc(t.priority) : ''}</td><td class="mono">${esc(t.concurrencyKey)}</td><td class="mono">${rateLimit}</td>
    <td class="waiting">${wait ? `<span class="badge s-WAITING" title="${esc(wait[1])}">${esc(wait[0])}</span>` : ''}</td>
    <td class="mono needs">${needs(t)}</td>
    <td>${esc(t.workerId)}</td><td>${esc(when(t.deadline))}</td><td>${esc(when(t.lastHeartbeatAt))}</td></tr>`;
}

function pending(d) {
  const parts = [];
  if (d.pendingTasks?.length) parts.push(`<h3>Tasks</h3><table id="pending-tasks"><thead><tr><th>Unit</th><th>Task</th><th>Attempt</th><th>State</th><th title="1 is dispatched first, 5 last">Priority</th><th>Concurrency key</th><th>Rate limit</th><th>Waiting on</th><th title="the worker labels it needs (on:) and the worker it prefers (sticky:)">Workers</th><th>Worker</th><th>Deadline</th><th>Last heartbeat</th></tr></thead><tbody>${d.pendingTasks.map(taskRow).join('')}</tbody></table>`);
  if (d.pendingTimers?.length) parts.push(`<h3>Timers</h3><ul>${d.pendingTimers.map((t) => `<li>${esc(t.unit)}: ${esc(short(t.kind))} at ${esc(when(t.fireAt))}</li>`).join('')}</ul>`);
  if (d.pendingAwaits?.length) parts.push(`<h3>Waiting for signals</h3><ul id="awaits">${d.pendingAwaits.map((a) => `<li>${esc(a.unit)} waits for <b>${esc(a.signal)}</b>${when(a.timeoutAt) ? ` until ${esc(when(a.timeoutAt))}` : ''}</li>`).join('')}</ul>`);
  return parts.length ? `<h2>Pending</h2>${parts.join('')}` : '';
}

// The operator actions. Scrubbed to a past seq, a query answers as of that seq; the
// actions that write act on the execution now, so they wait for the way back to live
// (reset and fork, in evolve.js, are about a past point: they stay).
function actions(live, at) {
  const open = live && at == null;
  return `${at == null ? '' : `<p class="muted" id="act-past">Viewing seq ${esc(at)}: a query answers as of it; reset and fork go back to it; signal, update, cancel, resume, terminate and migrate act on the execution now — back to live to use them.</p>`}
  <div class="actions card">
    <label>Name <input id="act-name" placeholder="signal / query / update name"></label>
    <label>Payload (JSON) <textarea id="act-payload" rows="2">{}</textarea></label>
    <button id="act-signal" ${open ? '' : 'disabled'}>Signal</button>
    <button id="act-query">${at == null ? 'Query' : `Query at seq ${esc(at)}`}</button>
    <button id="act-update" ${open ? '' : 'disabled'}>Update</button>
    <button id="act-cancel" ${open ? '' : 'disabled'}>Cancel…</button>
    <button id="act-replay">Replay check</button>
    <button id="act-resume" ${open ? '' : 'disabled'}>Resume</button>
    <button id="act-terminate" ${open ? '' : 'disabled'}>Terminate…</button>
  </div><div id="act-result" class="result" aria-live="polite"></div>`;
}

function wire(main, id, at, runNo) {
  const out = main.querySelector('#act-result');
  const name = () => main.querySelector('#act-name').value.trim();
  const payload = () => JSON.parse(main.querySelector('#act-payload').value || 'null');
  const run = async (what, fn) => {
    out.innerHTML = `<p class="muted">${esc(what)}…</p>`;
    try { out.innerHTML = `<p><b>${esc(what)}</b> done</p>${json(await fn())}`; } catch (e) { out.innerHTML = errorBox(e); }
  };
  const rid = () => `console-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  main.querySelector('#act-signal').onclick = () => run('Signal', () => call('WorkflowService/SignalExecution', { executionId: id, name: name(), payload: payload(), requestId: rid() }));
  main.querySelector('#act-query').onclick = () => run('Query', () => call('WorkflowService/QueryExecution', at == null ? { executionId: id, name: name() } : { executionId: id, name: name(), run: runNo, atSeq: at }));
  main.querySelector('#act-update').onclick = () => run('Update', () => call('WorkflowService/UpdateExecution', { executionId: id, name: name(), args: payload(), requestId: rid() }));
  main.querySelector('#act-cancel').onclick = () => confirm(`Cancel ${id}?`) && run('Cancel', () => call('WorkflowService/CancelExecution', { executionId: id, reason: 'cancelled from the console', requestId: rid() }));
  main.querySelector('#act-replay').onclick = () => run('Replay check', () => call('AdminService/Replay', { executionId: id }));
  main.querySelector('#act-resume').onclick = () => run('Resume', () => call('WorkflowService/ResumeExecution', { executionId: id }));
  main.querySelector('#act-terminate').onclick = () => confirm(`Terminate ${id}?`) && run('Terminate', () => call('WorkflowService/TerminateExecution', { executionId: id, reason: 'terminated from the console' }));
}

// The raw history; a row picks its seq (the link opens the page at it). Scrubbed, the row
// shown is marked and the later ones are dimmed.
function historyTable(id, events, at) {
  const row = (e) => {
    const seq = Number(e.seq);
    const cls = at == null ? '' : seq === at ? 'sel' : seq > at ? 'future' : '';
    return `<tr data-seq="${esc(seq)}"${cls ? ` class="${cls}"` : ''}${seq === at ? ' aria-current="step"' : ''}><td><a href="/ui/executions/${encodeURIComponent(id)}?at=${esc(seq)}" title="View as of seq ${esc(seq)}">${esc(seq)}</a></td><td>${esc(when(e.timestamp))}</td><td>${esc(e.eventType)}</td><td>${esc(e.step)}</td><td class="mono">${esc(JSON.stringify(e.payload))}</td></tr>`;
  };
  return `<table id="history"><thead><tr><th>Seq</th><th>Time</th><th>Event</th><th>Step</th><th>Payload</th></tr></thead><tbody>${events.map(row).join('')}</tbody></table>`;
}
