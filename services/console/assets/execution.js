// One execution: status, input and output, the timeline (gantt.js), the definition's steps
// with each step's state, pending work, parent and children, the raw history, and the
// operator actions (signal, query, update, cancel, replay check; resume and terminate
// when parked). Refreshes every few seconds while the execution is open.

import { call, esc, badge, when, span, json, errorBox, short } from './api.js';
import { timeline, svg, LEGEND } from './gantt.js';

const REFRESH_MS = 3000;

/** All events of the latest run (GetHistory pages). */
async function allEvents(id) {
  const events = []; let pageToken = '';
  do {
    const page = await call('WorkflowService/GetHistory', { executionId: id, pageSize: 1000, pageToken });
    events.push(...page.events);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return events;
}

/** The definition's steps in order with what each needs (the DAG's edges), from the
 * document: JSON, or YAML's `- id: name` items and their `needs: [a, b]` lines. */
export function stepIds(document) {
  try { return JSON.parse(document).steps.map((s) => ({ id: s.id, needs: s.needs || [] })); } catch { /* YAML */ }
  const steps = [];
  const body = document.split(/^steps:\s*$/m)[1] || '';
  for (const line of body.split('\n')) {
    if (/^\S/.test(line)) break; // the next top-level key
    const id = line.match(/^\s*-\s*id:\s*["']?([\w.-]+)/);
    if (id) { steps.push({ id: id[1], needs: [] }); continue; }
    const needs = line.match(/^\s+needs:\s*\[([^\]]*)\]/);
    if (needs && steps.length) steps[steps.length - 1].needs = needs[1].split(',').map((n) => n.trim().replace(/["']/g, '')).filter(Boolean);
  }
  return steps;
}

export async function render(main, id, params) {
  main.innerHTML = `<p class="muted">Loading ${esc(id)}…</p>`;
  let selected = params.get('bar');
  const load = async () => {
    const [{ execution: d }, events] = await Promise.all([
      call('WorkflowService/DescribeExecution', { executionId: id }),
      allEvents(id),
    ]);
    const info = d.info;
    const def = await call('WorkflowService/GetWorkflow', { name: info.workflow, version: info.version }).catch(() => null);
    const children = await call('WorkflowService/ListExecutions', { parentId: id, pageSize: 100 }).catch(() => ({ executions: [] }));
    const tl = timeline(events);
    const chart = svg(tl);
    const created = events.find((e) => /created/i.test(e.eventType));
    const open = ['RUNNING', 'COMPENSATING', 'SUSPENDED'].includes(short(info.status));
    main.innerHTML = `
      <h1>${esc(info.workflow)} <span class="muted">v${esc(info.version)}</span> ${badge(info.status)}</h1>
      <div class="grid">
        <div class="card"><dl class="kv">
          <dt>Execution</dt><dd class="mono" id="execution-id">${esc(info.executionId)}</dd>
          <dt>Run</dt><dd>${esc(info.run)}</dd>
          <dt>Created</dt><dd>${esc(when(info.createdAt))}</dd>
          <dt>Closed</dt><dd>${esc(when(info.closedAt)) || '—'}</dd>
          <dt>Duration</dt><dd>${esc(span((info.closedAt && !info.closedAt.startsWith('1970') ? Date.parse(info.closedAt) : Date.now()) - Date.parse(info.createdAt)))}</dd>
          ${info.parentId ? `<dt>Parent</dt><dd class="mono"><a href="/ui/executions/${encodeURIComponent(info.parentId)}">${esc(info.parentId)}</a></dd>` : ''}
          ${info.rootId && info.rootId !== info.executionId ? `<dt>Root</dt><dd class="mono"><a href="/ui/executions/${encodeURIComponent(info.rootId)}">${esc(info.rootId)}</a></dd>` : ''}
          ${info.scheduleId ? `<dt>Schedule</dt><dd class="mono"><a href="/ui/schedules?id=${encodeURIComponent(info.scheduleId)}">${esc(info.scheduleId)}</a></dd>` : ''}
          <dt>Definition</dt><dd class="mono"><a href="/ui/workflows?name=${encodeURIComponent(info.workflow)}&version=${encodeURIComponent(info.version)}">${esc(info.definitionHash.slice(0, 16))}</a></dd>
        </dl></div>
        <div class="card"><h2>Input</h2>${json(created?.payload?.input ?? null)}</div>
        <div class="card"><h2>${d.error?.code ? 'Error' : 'Output'}</h2>${d.error?.code ? `<p class="error" id="execution-error">${esc(d.error.code)}: ${esc(d.error.message)}</p>${d.error.details ? json(d.error.details) : ''}` : json(d.output ?? null)}
          ${d.suspension?.reason ? `<p class="error">Suspended: ${esc(d.suspension.reason)} (${esc(d.suspension.failures)} failures)</p>` : ''}</div>
      </div>
      <h2>Timeline</h2>${LEGEND}${chart.html}<div id="bar-detail" class="card result" aria-live="polite"></div>
      <h2>Steps</h2>${steps(def, d)}
      ${pending(d)}
      ${children.executions.length ? `<h2>Children</h2><ul>${children.executions.map((c) => `<li><a class="mono" href="/ui/executions/${encodeURIComponent(c.executionId)}">${esc(c.executionId)}</a> ${esc(c.workflow)} ${badge(c.status)}</li>`).join('')}</ul>` : ''}
      <h2>Actions</h2>${actions(open)}
      <details><summary class="h2">History (${events.length} events)</summary>${historyTable(events)}</details>`;
    const detail = main.querySelector('#bar-detail');
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
    for (const rect of main.querySelectorAll('#gantt .bar')) {
      rect.addEventListener('click', () => pick(Number(rect.dataset.bar)));
      rect.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); pick(Number(rect.dataset.bar)); } });
    }
    if (selected != null) pick(Number(selected));
    wire(main, id);
    return open;
  };
  let open;
  try { open = await load(); } catch (e) { main.innerHTML = errorBox(e); return null; }
  // Refresh while open, but never under the operator's hands (a form being filled).
  const timer = setInterval(async () => {
    if (!open || document.hidden || main.contains(document.activeElement) && document.activeElement.matches('input, textarea, select')) return;
    if (main.querySelector('#mig-result')?.dataset.keep) return;
    try { open = await load(); } catch { /* keep the last view */ }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}

function steps(def, d) {
  const ids = def ? stepIds(def.workflow.document) : [];
  const units = d.units || [];
  const seen = new Set();
  const rows = [];
  for (const { id, needs } of ids) {
    const mine = units.filter((u) => u.step === id);
    mine.forEach((u) => seen.add(u.key));
    const after = esc(needs.join(', '));
    rows.push(mine.length ? mine.map((u) => unitRow(u, after)).join('') : `<tr><td>${esc(id)}</td><td>${after}</td><td></td><td><span class="badge">NOT REACHED</span></td><td></td><td></td><td></td></tr>`);
  }
  for (const u of units) if (!seen.has(u.key)) rows.push(unitRow(u, ''));
  return `<table id="steps"><thead><tr><th>Step</th><th>Needs</th><th>Unit</th><th>State</th><th>Attempt</th><th>Task</th><th>Last error</th></tr></thead><tbody>${rows.join('')}</tbody></table>
    ${def ? `<details><summary>Definition source (${esc(def.workflow.definitionHash?.slice(0, 12))})</summary><pre class="mono">${esc(def.workflow.document)}</pre></details>` : ''}`;
}

function unitRow(u, after) {
  return `<tr><td>${esc(u.step)}</td><td>${after}</td><td class="mono">${esc(u.key)}</td><td>${badge(u.status)}</td><td>${esc(u.attempt || '')}${u.redelivery ? ' (redelivery)' : ''}</td><td>${esc(u.task)}</td><td class="error">${u.lastError?.code ? `${esc(u.lastError.code)}: ${esc(u.lastError.message)}` : ''}</td></tr>`;
}

function pending(d) {
  const parts = [];
  if (d.pendingTasks?.length) parts.push(`<h3>Tasks</h3><table><thead><tr><th>Unit</th><th>Task</th><th>Attempt</th><th>State</th><th>Worker</th><th>Deadline</th><th>Last heartbeat</th></tr></thead><tbody>${d.pendingTasks.map((t) => `<tr><td class="mono">${esc(t.unit)}</td><td>${esc(t.task?.name)}</td><td>${esc(t.attempt)}</td><td>${esc(short(t.state))}</td><td>${esc(t.workerId)}</td><td>${esc(when(t.deadline))}</td><td>${esc(when(t.lastHeartbeatAt))}</td></tr>`).join('')}</tbody></table>`);
  if (d.pendingTimers?.length) parts.push(`<h3>Timers</h3><ul>${d.pendingTimers.map((t) => `<li>${esc(t.unit)}: ${esc(short(t.kind))} at ${esc(when(t.fireAt))}</li>`).join('')}</ul>`);
  if (d.pendingAwaits?.length) parts.push(`<h3>Waiting for signals</h3><ul id="awaits">${d.pendingAwaits.map((a) => `<li>${esc(a.unit)} waits for <b>${esc(a.signal)}</b>${when(a.timeoutAt) ? ` until ${esc(when(a.timeoutAt))}` : ''}</li>`).join('')}</ul>`);
  return parts.length ? `<h2>Pending</h2>${parts.join('')}` : '';
}

function actions(open) {
  return `<div class="actions card">
    <label>Name <input id="act-name" placeholder="signal / query / update name"></label>
    <label>Payload (JSON) <textarea id="act-payload" rows="2">{}</textarea></label>
    <button id="act-signal" ${open ? '' : 'disabled'}>Signal</button>
    <button id="act-query">Query</button>
    <button id="act-update" ${open ? '' : 'disabled'}>Update</button>
    <button id="act-cancel" ${open ? '' : 'disabled'}>Cancel…</button>
    <button id="act-replay">Replay check</button>
    <button id="act-resume" ${open ? '' : 'disabled'}>Resume</button>
    <button id="act-terminate" ${open ? '' : 'disabled'}>Terminate…</button>
  </div><div id="act-result" class="result" aria-live="polite"></div>
  <h3>Migrate to another version</h3>
  <div class="actions card">
    <label>Version <input id="mig-version" placeholder="e.g. 2"></label>
    <button id="mig-dry" ${open ? '' : 'disabled'}>Diff (dry run)</button>
    <button id="mig-run" ${open ? '' : 'disabled'}>Migrate…</button>
  </div><div id="mig-result" class="result" aria-live="polite"></div>`;
}

// The checked diff of a migration (`MigrateExecutionResponse`): one row per difference,
// UNSAFE ones marked; the page stops refreshing while it is shown.
function migration(r, dryRun) {
  const rows = (r.changes || []).map((c) => `<tr class="${c.safe ? 'safe' : 'unsafe'}"><td>${c.safe ? 'safe' : '<b class="error">UNSAFE</b>'}</td><td>${esc(c.kind)}</td><td class="mono">${esc(c.step)}</td><td>${esc(c.detail)}</td><td class="muted">${esc(c.reason)}</td></tr>`).join('');
  const verdict = dryRun
    ? (r.safe ? 'safe: a migration would be recorded' : 'UNSAFE: a migration would be refused')
    : (r.migrated ? `migrated (seq ${esc(r.seq)})` : 'already runs this version: nothing written');
  return `<p id="mig-verdict"><b>v${esc(r.fromVersion)} → v${esc(r.toVersion)}</b>: ${verdict}</p>
    ${rows ? `<table id="mig-diff"><thead><tr><th></th><th>Change</th><th>Step</th><th>What</th><th>Why</th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">No differences.</p>'}`;
}

function wire(main, id) {
  const out = main.querySelector('#act-result');
  const name = () => main.querySelector('#act-name').value.trim();
  const payload = () => JSON.parse(main.querySelector('#act-payload').value || 'null');
  const run = async (what, fn) => {
    out.innerHTML = `<p class="muted">${esc(what)}…</p>`;
    try { out.innerHTML = `<p><b>${esc(what)}</b> done</p>${json(await fn())}`; } catch (e) { out.innerHTML = errorBox(e); }
  };
  const rid = () => `console-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  main.querySelector('#act-signal').onclick = () => run('Signal', () => call('WorkflowService/SignalExecution', { executionId: id, name: name(), payload: payload(), requestId: rid() }));
  main.querySelector('#act-query').onclick = () => run('Query', () => call('WorkflowService/QueryExecution', { executionId: id, name: name() }));
  main.querySelector('#act-update').onclick = () => run('Update', () => call('WorkflowService/UpdateExecution', { executionId: id, name: name(), args: payload(), requestId: rid() }));
  main.querySelector('#act-cancel').onclick = () => confirm(`Cancel ${id}?`) && run('Cancel', () => call('WorkflowService/CancelExecution', { executionId: id, reason: 'cancelled from the console', requestId: rid() }));
  main.querySelector('#act-replay').onclick = () => run('Replay check', () => call('AdminService/Replay', { executionId: id }));
  main.querySelector('#act-resume').onclick = () => run('Resume', () => call('WorkflowService/ResumeExecution', { executionId: id }));
  const mig = main.querySelector('#mig-result');
  const migrate = async (dryRun) => {
    const toVersion = main.querySelector('#mig-version').value.trim();
    mig.dataset.keep = '1';
    mig.innerHTML = '<p class="muted">Migrate…</p>';
    try {
      mig.innerHTML = migration(await call('WorkflowService/MigrateExecution', { executionId: id, toVersion, dryRun, reason: 'from the console', requestId: dryRun ? '' : rid() }), dryRun);
    } catch (e) { mig.innerHTML = errorBox(e); }
  };
  main.querySelector('#mig-dry').onclick = () => migrate(true);
  main.querySelector('#mig-run').onclick = () => confirm(`Migrate ${id}?`) && migrate(false);
  main.querySelector('#act-terminate').onclick = () => confirm(`Terminate ${id}?`) && run('Terminate', () => call('WorkflowService/TerminateExecution', { executionId: id, reason: 'terminated from the console' }));
}

function historyTable(events) {
  return `<table id="history"><thead><tr><th>Seq</th><th>Time</th><th>Event</th><th>Step</th><th>Payload</th></tr></thead><tbody>${events.map((e) => `<tr><td>${esc(e.seq)}</td><td>${esc(when(e.timestamp))}</td><td>${esc(e.eventType)}</td><td>${esc(e.step)}</td><td class="mono">${esc(JSON.stringify(e.payload))}</td></tr>`).join('')}</tbody></table>`;
}
