// The rate limits page (`/ui/rate-limits?name=`): the server-wide named rate limits steps
// take from (`rate_limit: {name: ...}`), by name — each one's limit, window and last
// change, with Edit (fills the form) and Delete… (asks first) — and the "Set a rate limit"
// form (name, limit, window in the CLI's duration syntax: `500ms`, `10s`, `1m`, `1h30m`,
// `1d`), which creates or replaces one. A limit allows at most LIMIT task starts per
// window of PERIOD, windows aligned to the Unix epoch (docs/flow-control.md). No refresh
// timer: limits change only when someone sets them (`r` reloads).

import { call, esc, when, errorBox } from './api.js';

const UNITS = [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000], ['ms', 1]];
const MAX_MS = 366 * 86_400_000;

/** `1h30m`, `500ms` … → milliseconds, or null when the text is not such a duration (each
 * unit at most once, the largest first, as `orbit admin rate-limit set --per` takes it). */
export function parsePeriod(text) {
  const t = String(text || '').trim();
  if (!/^(\d+(ms|d|h|m|s))+$/.test(t)) return null;
  let ms = 0;
  let last = -1;
  for (const [, n, unit] of t.matchAll(/(\d+)(ms|d|h|m|s)/g)) {
    const i = UNITS.findIndex(([u]) => u === unit);
    if (i <= last) return null; // repeated or out of order
    last = i;
    ms += Number(n) * UNITS[i][1];
  }
  return ms;
}

/** A proto3 JSON Duration (`"60s"`, `"0.500s"`) in the same syntax (`1m`, `500ms`). */
export function periodText(d) {
  let ms = Math.round(parseFloat(d) * 1000);
  if (!Number.isFinite(ms)) return '';
  if (ms === 0) return '0s';
  let out = '';
  for (const [unit, size] of UNITS) {
    if (ms >= size) { out += `${Math.floor(ms / size)}${unit}`; ms %= size; }
  }
  return out;
}

/** Milliseconds as a proto3 JSON Duration: `60s`, `0.500s`. */
function durationJson(ms) {
  const s = Math.floor(ms / 1000);
  const frac = ms % 1000;
  return frac ? `${s}.${String(frac).padStart(3, '0')}s` : `${s}s`;
}

/** The rate limits page. */
export async function render(main, params) {
  const p = (k) => esc(params.get(k) || '');
  main.innerHTML = `<h1>Rate limits</h1>
    <p class="muted">A named limit allows at most <b>LIMIT</b> task starts per window of <b>PERIOD</b>, per bucket (its name, or its
      name and a step's evaluated <code>key:</code>); windows are aligned to the Unix epoch, so with <code>1m</code> each starts at a
      full minute. Steps take from one with <code>rate_limit: {name: …}</code>; an attempt whose bucket has no start left, or
      whose limit is not set, stays queued. Also <code>orbit admin rate-limit set|list|delete</code>.</p>
    <form class="card actions" id="rl-form">
      <label>Name <input id="rl-name" value="${p('name')}" required maxlength="128" placeholder="payments-api"></label>
      <label>Limit (task starts) <input id="rl-limit" type="number" min="1" step="1" required placeholder="10"></label>
      <label>Per (window) <input id="rl-per" required placeholder="1s, 1m, 1h"></label>
      <button type="submit" class="primary" id="rl-set">Set</button>
    </form>
    <div id="rl-result" class="result" aria-live="polite"></div>
    <div id="rl-list"><p class="muted">Loading…</p></div>`;
  const form = main.querySelector('#rl-form');
  const out = main.querySelector('#rl-result');
  const list = main.querySelector('#rl-list');
  const field = (id) => form.querySelector(id);
  let limits = [];
  const load = async () => {
    try {
      limits = [];
      let pageToken = '';
      do {
        const page = await call('AdminService/ListRateLimits', { pageSize: 1000, pageToken });
        limits.push(...(page.rateLimits || []));
        pageToken = page.nextPageToken || '';
      } while (pageToken);
      list.innerHTML = table(limits, params.get('name'));
    } catch (e) { list.innerHTML = errorBox(e); }
  };
  form.onsubmit = async (e) => {
    e.preventDefault();
    const name = field('#rl-name').value.trim();
    const limit = Number(field('#rl-limit').value);
    const per = field('#rl-per').value.trim();
    const ms = parsePeriod(per);
    if (!Number.isInteger(limit) || limit < 1) { out.innerHTML = errorBox({ message: 'The limit is a whole number of task starts, at least 1.' }); return; }
    if (ms == null || ms < 1 || ms > MAX_MS) { out.innerHTML = errorBox({ message: `“${per}” is not a window from 1ms to 366d: write e.g. 500ms, 10s, 1m, 1h30m or 1d.` }); return; }
    out.innerHTML = '<p class="muted">Setting…</p>';
    try {
      const { rateLimit: r } = await call('AdminService/SetRateLimit', { rateLimit: { name, limit, period: durationJson(ms) } });
      out.innerHTML = `<p id="rl-verdict">Set <b class="mono">${esc(r.name)}</b>: at most ${esc(r.limit)} task starts per ${esc(periodText(r.period))}.</p>`;
      await load();
    } catch (err) { out.innerHTML = errorBox(err); }
  };
  main.onclick = async (e) => {
    const edit = e.target.closest('button[data-edit]');
    if (edit) {
      const r = limits.find((x) => x.name === edit.dataset.edit);
      if (!r) return;
      field('#rl-name').value = r.name;
      field('#rl-limit').value = r.limit;
      field('#rl-per').value = periodText(r.period);
      field('#rl-limit').focus();
      return;
    }
    const del = e.target.closest('button[data-delete]');
    if (!del) return;
    const name = del.dataset.delete;
    if (!confirm(`Delete rate limit ${name}? Attempts of steps that use it stay queued until it is set again.`)) return;
    try {
      await call('AdminService/DeleteRateLimit', { name });
      out.innerHTML = `<p id="rl-verdict">Deleted <b class="mono">${esc(name)}</b>.</p>`;
      await load();
    } catch (err) { out.innerHTML = errorBox(err); }
  };
  await load();
  return null;
}

function table(limits, selected) {
  if (!limits.length) return '<p class="muted">No rate limits. Set one above, or with <code>orbit admin rate-limit set NAME --limit N --per 1m</code>.</p>';
  const rows = limits.map((r) => `<tr data-name="${esc(r.name)}"${r.name === selected ? ' class="sel"' : ''}>
    <td class="mono">${esc(r.name)}</td><td>${esc(r.limit)}</td><td>${esc(periodText(r.period))}</td>
    <td>${esc(when(r.updatedAt))}</td>
    <td><button data-edit="${esc(r.name)}">Edit</button> <button data-delete="${esc(r.name)}">Delete…</button></td></tr>`).join('');
  return `<table id="rate-limits"><thead><tr><th>Name</th><th>Limit (task starts)</th><th>Per (window)</th><th>Updated</th><th></th></tr></thead><tbody>${rows}</tbody></table>`;
}
