// The console's calls to /ui/api: the token (sessionStorage, this tab only), JSON in and
// out, the login dialog on 401, and small formatting helpers shared by the pages.

const KEY = 'orbit.token';

/** An API error: `code` is the Orbit error code (UNAUTHENTICATED, EXECUTION_NOT_FOUND…). */
export class ApiError extends Error {
  constructor(status, body) {
    super(body.message || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || 'UNKNOWN';
    // Extra facts of the refusal (`INVALID_QUERY`: position, line, column).
    this.info = body.info || {};
  }
}

let config = null;

/** `{auth}`: whether the server checks identities (then a token is needed). */
export async function serverConfig() {
  if (!config) config = await (await fetch('/ui/api/config')).json();
  return config;
}

export function token() { return sessionStorage.getItem(KEY); }
export function setToken(t) { t ? sessionStorage.setItem(KEY, t) : sessionStorage.removeItem(KEY); }

/** Calls `service/Method` (`WorkflowService/ListExecutions`) of orbit.v1 with `body`. */
export async function call(method, body = {}) {
  const headers = { 'content-type': 'application/json' };
  const t = token();
  if (t) headers.authorization = `Bearer ${t}`;
  const response = await fetch(`/ui/api/orbit.v1.${method}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const json = await response.json().catch(() => ({ message: `HTTP ${response.status}` }));
  if (!response.ok) {
    const error = new ApiError(response.status, json);
    if (response.status === 401) await login(error.message);
    throw error;
  }
  return json;
}

let pending = null;

/** Shows the token dialog; resolves once a token was entered (the page then reloads). */
export function login(reason) {
  if (pending) return pending;
  const dialog = document.getElementById('login');
  document.getElementById('login-error').textContent = token() ? `Refused: ${reason}` : '';
  pending = new Promise((resolve) => {
    document.getElementById('login-form').onsubmit = () => {
      setToken(document.getElementById('login-token').value.trim());
      pending = null;
      resolve();
      window.dispatchEvent(new Event('orbit:login'));
    };
  });
  if (!dialog.open) dialog.showModal();
  return pending;
}

/** Escapes text for HTML. */
export function esc(value) {
  return String(value ?? '').replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** `EXECUTION_STATUS_FAILED` → `FAILED` (`BATCH_STATE_RUNNING` → `RUNNING`, …). */
export function short(status) {
  return String(status || '').replace(/^(EXECUTION_STATUS|UNIT_STATUS|SERVICE_KIND|TIMER_KIND|PENDING_TASK_STATE|BATCH_STATE|BATCH_ITEM_OUTCOME|FLOW_WAIT)_/, '');
}

export function badge(status) {
  const s = short(status);
  return `<span class="badge s-${esc(s)}">${esc(s)}</span>`;
}

/** A timestamp (RFC 3339, or empty) as local time. */
export function when(ts) {
  if (!ts || ts.startsWith('1970-01-01T00:00:00')) return '';
  return new Date(ts).toLocaleString();
}

/** Milliseconds as `1.2 s`, `3 min`. */
export function span(ms) {
  if (ms == null || Number.isNaN(ms)) return '';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600000) return `${(ms / 60000).toFixed(1)} min`;
  return `${(ms / 3600000).toFixed(1)} h`;
}

export function json(value) {
  return `<pre class="mono">${esc(JSON.stringify(value, null, 2))}</pre>`;
}

export function errorBox(error) {
  return `<p class="error" role="alert">${esc(error.code ? `${error.code}: ` : '')}${esc(error.message)}</p>`;
}

/**
 * Paging links over page tokens for the list at `path`: the previous tokens ride in
 * `prev=`, the current one in `page=`; `labels` name the two directions.
 */
export function pager(path, params, next, labels = ['← Newer', 'Older →']) {
  const prev = params.getAll('prev');
  const parts = [];
  if (params.get('page')) {
    const q = new URLSearchParams(params);
    q.delete('prev');
    prev.slice(0, -1).forEach((t) => q.append('prev', t));
    const back = prev[prev.length - 1] || '';
    if (back) q.set('page', back); else q.delete('page');
    parts.push(`<a href="${path}?${q}" id="prev-page">${labels[0]}</a>`);
  }
  if (next) {
    const q = new URLSearchParams(params);
    q.append('prev', params.get('page') || '');
    q.set('page', next);
    parts.push(`<a href="${path}?${q}" id="next-page">${labels[1]}</a>`);
  }
  return `<div class="pager">${parts.join('')}</div>`;
}
