// The batches pages (docs/evolving.md, "Batches"): the list of batch jobs, newest first,
// with each one's action, state and progress, refreshed while any runs; and one batch —
// its selector, action, state, progress bar and counters, reason, its per-execution items
// (paged, optionally the failed ones only, each linked to its execution) and Cancel while
// it runs, refreshed until it ends. The "New batch" form (dry run, then start) is in
// batchform.js, on the list page.

import { call, esc, badge, when, errorBox, short, pager } from './api.js';
import { newBatchForm, actionText } from './batchform.js';

const REFRESH_MS = 3000;
const PAGE_SIZE = 50;

const n = (v) => Number(v || 0);
const stateOf = (b) => short(b.state);

/** A selector in words: the workflow, its version, the statuses (RUNNING when none, or
 * any when a query decides) and the query. */
function selectorText(s) {
  const statuses = (s.statuses || []).map(short);
  const parts = [];
  if (s.workflow) parts.push(`${s.workflow}${s.version ? ` v${s.version}` : ' (any version)'}`);
  if (statuses.length || !s.query) parts.push((statuses.length ? statuses : ['RUNNING']).join(' or '));
  if (s.query) parts.push(`query: ${s.query}`);
  return parts.join(', ');
}

/** The workflow cell or field: a link to the workflow, or "by query" when it names none. */
function workflowText(s, href) {
  if (!s.workflow) return '<span class="muted">by query</span>';
  return `<a href="${href}${encodeURIComponent(s.workflow)}">${esc(s.workflow)}</a>`;
}

/** The progress bar: succeeded, failed and skipped stacked over the total (SVG: the
 * console's CSP allows no inline style). */
export function progressBar(b, id = '') {
  const total = Math.max(n(b.total), n(b.done), 1);
  let x = 0;
  const part = (count, cls, what) => {
    const w = (1000 * count) / total;
    const rect = count ? `<rect class="${cls}" x="${x}" y="0" width="${w}" height="10"><title>${count} ${what}</title></rect>` : '';
    x += w;
    return rect;
  };
  return `<svg class="progress"${id ? ` id="${id}"` : ''} viewBox="0 0 1000 10" preserveAspectRatio="none" role="progressbar" aria-valuemin="0" aria-valuemax="${esc(n(b.total))}" aria-valuenow="${esc(n(b.done))}" aria-label="executions done">
    <rect class="track" x="0" y="0" width="1000" height="10"></rect>${part(n(b.succeeded), 'b-ok', 'succeeded')}${part(n(b.failed), 'b-bad', 'failed')}${part(n(b.skipped), 'b-queue', 'skipped')}</svg>`;
}

/** `done/total (s succeeded, f failed, k skipped)`. */
function counts(b) {
  return `${esc(n(b.done))}/${esc(n(b.total))} <span class="muted">(${esc(n(b.succeeded))} succeeded, ${esc(n(b.failed))} failed, ${esc(n(b.skipped))} skipped)</span>`;
}

const href = (id) => `/ui/batches/${encodeURIComponent(id)}`;

/** The list of batches (`/ui/batches`) and the "New batch" form. */
export async function render(main, params) {
  main.innerHTML = `<h1>Batches</h1>
    <div id="new-batch-slot"></div>
    <div id="batch-list"><p class="muted">Loading…</p></div>`;
  await newBatchForm(main.querySelector('#new-batch-slot'), params);
  const list = main.querySelector('#batch-list');
  let running = false;
  const load = async () => {
    try {
      const answer = await call('WorkflowService/ListBatches', { pageSize: PAGE_SIZE, pageToken: params.get('page') || '' });
      running = answer.batches.some((b) => stateOf(b) === 'RUNNING');
      const selected = list.querySelector('tr.sel')?.dataset.href;
      list.innerHTML = table(answer.batches) + pager('/ui/batches', params, answer.nextPageToken, ['← Previous', 'Next →']);
      if (selected) list.querySelector(`tr[data-href="${CSS.escape(selected)}"]`)?.classList.add('sel');
    } catch (e) { list.innerHTML = errorBox(e); }
  };
  await load();
  // Live while a batch of the page runs; a finished list does not change by itself.
  const timer = setInterval(() => { if (running && !document.hidden) load(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

function table(batches) {
  if (!batches.length) return '<p class="muted">No batches yet. Start one above, or with <code>orbit batch start</code>.</p>';
  const rows = batches.map((b) => `<tr data-href="${esc(href(b.batchId))}" data-state="${esc(stateOf(b))}" tabindex="-1">
    <td class="mono"><a href="${esc(href(b.batchId))}">${esc(b.batchId)}</a></td>
    <td>${workflowText(b.selector, '/ui/executions?workflow=')}${b.selector.version ? ` <span class="muted">v${esc(b.selector.version)}</span>` : ''}</td>
    <td>${esc(actionText(b.action))}</td>
    <td>${badge(b.state)}</td>
    <td class="progress-cell">${progressBar(b)}<span class="count">${counts(b)}</span></td>
    <td>${esc(when(b.createdAt))}</td></tr>`).join('');
  return `<table id="batches"><thead><tr><th>Batch</th><th>Workflow</th><th>Action</th><th>State</th><th>Progress: done/total</th><th>Created</th></tr></thead><tbody>${rows}</tbody></table>`;
}


/** One batch (`/ui/batches/<id>?failed=1&page=`): refreshed every few seconds while it
 * runs; its items paged, the failed ones only with `failed=1`. */
export async function one(main, id, params) {
  const onlyFailed = params.get('failed') === '1';
  main.innerHTML = `<div id="batch-head"><p class="muted">Loading ${esc(id)}…</p></div>
    <div id="batch-act" class="result" aria-live="polite"></div>
    <h2>Executions</h2>
    <div class="actions"><label class="check"><input type="checkbox" id="only-failed" ${onlyFailed ? 'checked' : ''}> failed only</label></div>
    <div id="batch-items"></div>`;
  const head = main.querySelector('#batch-head');
  const items = main.querySelector('#batch-items');
  const act = main.querySelector('#batch-act');
  main.querySelector('#only-failed').onchange = (e) => {
    const q = new URLSearchParams();
    if (e.target.checked) q.set('failed', '1');
    window.orbitGo(`${href(id)}${q.size ? `?${q}` : ''}`, true);
  };
  let running = true;
  let generation = 0;
  const load = async () => {
    const mine = ++generation;
    const [{ batch: b }, page] = await Promise.all([
      call('WorkflowService/DescribeBatch', { batchId: id }),
      call('WorkflowService/ListBatchItems', { batchId: id, pageSize: PAGE_SIZE, pageToken: params.get('page') || '', onlyFailed }),
    ]);
    if (mine !== generation) return;
    running = stateOf(b) === 'RUNNING';
    head.innerHTML = batchHead(b);
    items.innerHTML = itemsTable(page.items, onlyFailed) + pager(href(id), params, page.nextPageToken, ['← Previous', 'Next →']);
    const cancel = head.querySelector('#batch-cancel');
    if (cancel) {
      cancel.onclick = async () => {
        if (!confirm(`Cancel batch ${id}? No further execution is sent; the ones already sent are still recorded.`)) return;
        act.innerHTML = '<p class="muted">Cancelling…</p>';
        try {
          const r = await call('WorkflowService/CancelBatch', { batchId: id, reason: 'cancelled from the console' });
          act.innerHTML = `<p id="cancel-verdict">${r.cancelled ? 'Cancelled: the runner sends no further execution.' : 'It was no longer running: nothing changed.'}</p>`;
          await load();
        } catch (e) { act.innerHTML = errorBox(e); }
      };
    }
  };
  try { await load(); } catch (e) { main.innerHTML = errorBox(e); return null; }
  const timer = setInterval(async () => {
    if (!running || document.hidden) return;
    try { await load(); } catch { /* keep the last view */ }
  }, REFRESH_MS);
  return () => clearInterval(timer);
}

function batchHead(b) {
  const s = b.selector;
  const state = stateOf(b);
  return `<h1>Batch <span class="mono">${esc(b.batchId)}</span> <span id="batch-state">${badge(b.state)}</span></h1>
    <div class="grid" id="batch" data-state="${esc(state)}" data-done="${esc(n(b.done))}" data-total="${esc(n(b.total))}">
      <div class="card"><dl class="kv">
        <dt>Workflow</dt><dd>${workflowText(s, '/ui/workflows?name=')}</dd>
        <dt>Selector</dt><dd id="batch-selector">${esc(selectorText(s))}${s.workflow ? ` · <a href="/ui/executions?workflow=${encodeURIComponent(s.workflow)}">executions</a>` : ''}</dd>
        ${s.query ? `<dt>Query</dt><dd class="mono" id="batch-query">${esc(s.query)}</dd>` : ''}
        <dt>Action</dt><dd id="batch-action">${esc(actionText(b.action))}</dd>
        <dt>Rate</dt><dd>at most ${esc(b.ratePerSecond)} executions a second</dd>
        <dt>Reason</dt><dd id="batch-reason">${esc(b.reason) || '<span class="muted">none given</span>'}</dd>
        <dt>Created</dt><dd>${esc(when(b.createdAt))}</dd>
        <dt>Updated</dt><dd>${esc(when(b.updatedAt))}</dd>
        ${b.cursor ? `<dt>Cursor</dt><dd class="mono">${esc(b.cursor)}</dd>` : ''}
      </dl></div>
      <div class="card"><h2>Progress</h2>
        ${progressBar(b, 'batch-progress')}
        <dl class="kv counters">
          <dt>Done</dt><dd><b id="batch-done">${esc(n(b.done))}</b> of <b id="batch-total">${esc(n(b.total))}</b></dd>
          <dt>Succeeded</dt><dd id="batch-succeeded">${esc(n(b.succeeded))}</dd>
          <dt>Failed</dt><dd id="batch-failed">${esc(n(b.failed))}</dd>
          <dt>Skipped</dt><dd id="batch-skipped">${esc(n(b.skipped))}</dd>
        </dl>
        <p class="muted">${state === 'RUNNING' ? 'Refreshed every few seconds while it runs.' : state === 'COMPLETED' ? 'Every selected execution has an outcome; the total is the number acted on.' : ''}</p>
        ${state === 'RUNNING' ? '<button id="batch-cancel">Cancel batch…</button>' : ''}
      </div>
    </div>`;
}

function itemsTable(items, onlyFailed) {
  if (!items.length) return `<p class="muted">${onlyFailed ? 'No failed execution.' : 'No execution reached yet.'}</p>`;
  const rows = items.map((i) => {
    const link = `/ui/executions/${encodeURIComponent(i.executionId)}`;
    return `<tr data-href="${esc(link)}" data-outcome="${esc(short(i.outcome))}" tabindex="-1">
      <td class="mono"><a href="${esc(link)}">${esc(i.executionId)}</a></td><td>${badge(i.outcome)}</td>
      <td class="mono">${esc(i.code)}</td><td>${esc(i.message)}</td><td>${n(i.seq) ? esc(i.seq) : ''}</td></tr>`;
  }).join('');
  return `<table id="batch-items-table"><thead><tr><th>Execution</th><th>Outcome</th><th>Code</th><th>Message</th><th>Event seq</th></tr></thead><tbody>${rows}</tbody></table>`;
}
