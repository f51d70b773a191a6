// The executions page: a query in the list language (querybar.js, `q=`) and filters
// (workflow, status, created after/before, schedule id, parent) in the URL, one page of ListExecutions at a time with its page token (the
// previous pages' tokens ride in the URL too, so Back and shared links work), and a live
// refresh every few seconds while the page is open. Above the list, the counts by status of
// every execution the filters match (CountExecutions, the filters written as a query), each
// a link to the list filtered to that status.

import { call, esc, badge, when, errorBox, pager } from './api.js';
import * as querybar from './querybar.js';

const STATUSES = ['RUNNING', 'COMPENSATING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'CONTINUED_AS_NEW', 'SUSPENDED'];
const REFRESH_MS = 3000;

/** The ListExecutions request of the URL's filters. */
export function request(params) {
  const body = { pageSize: Number(params.get('size') || 50), pageToken: params.get('page') || '' };
  if (params.get('workflow')) body.workflow = params.get('workflow');
  if (params.get('status')) body.statuses = [`EXECUTION_STATUS_${params.get('status')}`];
  if (params.get('schedule')) body.scheduleId = params.get('schedule');
  if (params.get('parent')) body.parentId = params.get('parent');
  if (params.get('after')) body.createdAfter = new Date(params.get('after')).toISOString();
  if (params.get('before')) body.createdBefore = new Date(params.get('before')).toISOString();
  if (params.get('q')) body.query = params.get('q');
  return body;
}

/** A string literal of the list query language ('' for a quote). */
const literal = (s) => `'${String(s).replaceAll("'", "''")}'`;

/** The list query of the URL's filters, for CountExecutions. */
export function countQuery(params) {
  const terms = [];
  if (params.get('workflow')) terms.push(`workflow = ${literal(params.get('workflow'))}`);
  if (params.get('status')) terms.push(`status = ${literal(params.get('status'))}`);
  if (params.get('schedule')) terms.push(`schedule = ${literal(params.get('schedule'))}`);
  if (params.get('parent')) terms.push(`parent = ${literal(params.get('parent'))}`);
  if (params.get('after')) terms.push(`created >= ${literal(new Date(params.get('after')).toISOString())}`);
  if (params.get('before')) terms.push(`created < ${literal(new Date(params.get('before')).toISOString())}`);
  const q = withoutOrder(params.get('q') || '').trim();
  if (q) terms.push(`(${q})`);
  return terms.join(' AND ');
}

/** The query bar's query without its `ORDER BY` (a count has no order): the last one
 * outside a string literal. */
export function withoutOrder(q) {
  const re = /\border\s+by\b/gi;
  let cut = -1;
  for (let m = re.exec(q); m; m = re.exec(q)) {
    if ((q.slice(0, m.index).match(/'/g) || []).length % 2 === 0) cut = m.index;
  }
  return cut < 0 ? q : q.slice(0, cut);
}

/** The counts strip: each status with its count (a link to it), then the total. */
function counts(answer, params) {
  const link = (status) => {
    const q = new URLSearchParams(params);
    q.set('status', status);
    q.delete('page');
    q.delete('prev');
    return `/ui/executions?${q}`;
  };
  const groups = (answer.groups || []).map((g) => `<a class="count" data-status="${esc(g.values[0])}" href="${esc(link(g.values[0]))}">${badge(`EXECUTION_STATUS_${g.values[0]}`)} <b>${esc(g.count)}</b></a>`);
  return `${groups.join(' ')} <span class="muted">total</span> <b id="count-total">${esc(answer.count || 0)}</b>`;
}

export async function render(main, params) {
  const v = (k) => esc(params.get(k) || '');
  main.innerHTML = `
    <h1>Executions</h1>
    <form class="filters" id="filters">
      ${querybar.html(params.get('q') || '')}
      <label>Workflow <input name="workflow" value="${v('workflow')}" placeholder="any"></label>
      <label>Status <select name="status"><option value="">any</option>${STATUSES.map((s) => `<option ${params.get('status') === s ? 'selected' : ''}>${s}</option>`).join('')}</select></label>
      <label>Created after <input type="datetime-local" name="after" value="${v('after')}"></label>
      <label>Created before <input type="datetime-local" name="before" value="${v('before')}"></label>
      <label>Schedule id <input name="schedule" value="${v('schedule')}" placeholder="any"></label>
      <label>Parent id <input name="parent" value="${v('parent')}" placeholder="any"></label>
      <button class="primary" type="submit">Filter</button>
      <a href="/ui/executions">Clear</a>
      <label class="live"><span><input type="checkbox" id="live" ${params.get('live') === '0' ? '' : 'checked'}> live</span></label>
    </form>
    <p id="counts" class="muted"></p>
    <div id="list"><p class="muted">Loading…</p></div>`;
  main.querySelector('#filters').onsubmit = (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [k, val] of new FormData(e.target)) if (val) q.set(k, val);
    window.orbitGo(`/ui/executions?${q}`);
  };
  const list = main.querySelector('#list');
  const strip = main.querySelector('#counts');
  // Completion offers the system attributes at once and the declared ones when they come
  // (the page never waits for them).
  const names = [];
  querybar.attach(main.querySelector('#filters'), names);
  searchNames().then((declared) => names.push(...declared));
  const load = async () => {
    call('WorkflowService/CountExecutions', { query: countQuery(params), groupBy: ['status'] })
      .then((answer) => { strip.innerHTML = counts(answer, params); })
      .catch((e) => { strip.textContent = `counts: ${e.message || e}`; });
    try {
      const answer = await call('WorkflowService/ListExecutions', request(params));
      const empty = !answer.executions.length && answer.nextPageToken
        ? '<p class="muted">No match on this page; the time filters are applied page by page, so older pages may still hold some.</p>' : '';
      // Keep the row selected with j/k across refreshes.
      const selected = list.querySelector('tr.sel')?.dataset.href;
      list.innerHTML = (empty || table(answer.executions)) + pager('/ui/executions', params, answer.nextPageToken);
      if (selected) list.querySelector(`tr[data-href="${CSS.escape(selected)}"]`)?.classList.add('sel');
    } catch (e) {
      list.innerHTML = e.code === 'INVALID_QUERY' ? querybar.errorHtml(e, params.get('q') || '') : errorBox(e);
    }
  };
  await load();
  const timer = setInterval(() => { if (main.querySelector('#live')?.checked && !document.hidden) load(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

/** The declared search attributes' names, for completion (none when they cannot be read:
 * completion then offers the system attributes only). */
async function searchNames() {
  const names = [];
  let pageToken = '';
  try {
    do {
      const page = await call('WorkflowService/ListSearchAttributes', { pageSize: 1000, pageToken });
      names.push(...page.attributes.filter((a) => !a.system).map((a) => a.name));
      pageToken = page.nextPageToken;
    } while (pageToken);
  } catch {
    return names;
  }
  return names;
}

function table(rows) {
  if (!rows.length) return '<p class="muted">No executions match.</p>';
  const body = rows.map((x) => {
    const href = `/ui/executions/${encodeURIComponent(x.executionId)}`;
    return `<tr data-href="${esc(href)}" tabindex="-1">
      <td class="mono"><a href="${esc(href)}">${esc(x.executionId)}</a></td>
      <td><a href="/ui/executions?workflow=${encodeURIComponent(x.workflow)}">${esc(x.workflow)}</a> <span class="muted">v${esc(x.version)}</span></td>
      <td>${badge(x.status)}</td>
      <td>${x.run > 1 ? esc(x.run) : ''}</td>
      <td>${esc(when(x.createdAt))}</td>
      <td>${esc(when(x.closedAt))}</td>
      <td class="mono">${x.scheduleId ? `<a href="/ui/executions?schedule=${encodeURIComponent(x.scheduleId)}">${esc(x.scheduleId)}</a>` : ''}${x.parentId ? `parent <a href="/ui/executions/${encodeURIComponent(x.parentId)}">${esc(x.parentId)}</a>` : ''}</td>
    </tr>`;
  }).join('');
  return `<table id="executions"><thead><tr><th>Execution</th><th>Workflow</th><th>Status</th><th>Run</th><th>Created</th><th>Closed</th><th>Schedule / parent</th></tr></thead><tbody>${body}</tbody></table>`;
}

