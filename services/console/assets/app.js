// The console's router: the path picks the page (/ui/executions, /ui/executions/<id>,
// /ui/workflows, /ui/workers, /ui/queues, /ui/schedules, /ui/cluster, /ui/batches,
// /ui/batches/<id>, /ui/rate-limits), the query holds its
// filters, so every view is a shareable link. Also the keyboard shortcuts and sign-in.

import { serverConfig, token, setToken, login } from './api.js';
import * as executions from './executions.js';
import * as execution from './execution.js';
import * as pages from './pages.js';
import * as batches from './batches.js';
import * as rateLimits from './ratelimits.js';

const ROUTES = {
  executions: executions.render,
  workflows: pages.workflows,
  workers: pages.workers,
  queues: pages.queues,
  schedules: pages.schedules,
  cluster: pages.cluster,
  batches: batches.render,
  'rate-limits': rateLimits.render,
};

let stop = null; // the current page's cleanup (its refresh timer)

/** Shows the page of the current URL. */
export async function show() {
  if (stop) stop();
  stop = null;
  const main = document.getElementById('main');
  main.onclick = null;
  const parts = location.pathname.replace(/^\/ui\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const page = parts[0] || 'executions';
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.page === page);
  const params = new URLSearchParams(location.search);
  const one = { executions: execution.render, batches: batches.one }[page];
  const render = one && parts[1] ? (m, p) => one(m, parts[1], p) : ROUTES[page];
  if (!render) { main.innerHTML = '<h1>Not found</h1>'; return; }
  document.title = `Orbit · ${parts[1] || page}`;
  try {
    stop = (await render(main, params)) || null;
  } catch (e) {
    main.innerHTML = `<p class="error">${e.message}</p>`;
  }
}

/** Goes to `url` inside the console without reloading. */
export function go(url, replace = false) {
  if (replace) history.replaceState(null, '', url); else history.pushState(null, '', url);
  show();
}
window.orbitGo = go;

document.addEventListener('click', (e) => {
  const a = e.target.closest('a');
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey || a.target) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin || !url.pathname.startsWith('/ui')) return;
  e.preventDefault();
  go(url.pathname + url.search);
});
window.addEventListener('popstate', show);
window.addEventListener('orbit:login', show);

const KEYS = { 1: 'executions', 2: 'workflows', 3: 'workers', 4: 'queues', 5: 'schedules', 6: 'cluster', 7: 'batches', 8: 'rate-limits' };
document.addEventListener('keydown', (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey || e.target.closest('input, textarea, select, dialog')) return;
  if (KEYS[e.key]) { go(`/ui/${KEYS[e.key]}`); return; }
  if (e.key === '/') { const f = document.querySelector('main input'); if (f) { e.preventDefault(); f.focus(); } return; }
  if (e.key === 'r') { show(); return; }
  if (e.key === '?') { alert('1–8: pages\n/: first filter\nj/k: next/previous row\nEnter: open the row\nr: refresh\n←/→: previous/next history event (an execution)'); return; }
  if (e.key === 'j' || e.key === 'k') {
    const rows = [...document.querySelectorAll('main tbody tr[data-href]')];
    if (!rows.length) return;
    let i = rows.findIndex((r) => r.classList.contains('sel'));
    if (i >= 0) rows[i].classList.remove('sel');
    i = Math.max(0, Math.min(rows.length - 1, i + (e.key === 'j' ? 1 : -1)));
    rows[i].classList.add('sel');
    rows[i].focus();
    return;
  }
  if (e.key === 'Enter') {
    const row = document.querySelector('main tbody tr.sel[data-href]');
    if (row) go(row.dataset.href);
  }
});

async function start() {
  const cfg = await serverConfig();
  const out = document.getElementById('logout');
  out.hidden = !cfg.auth;
  out.onclick = () => { setToken(null); location.reload(); };
  // Signing in fires orbit:login, which shows the page.
  if (cfg.auth && !token()) { login(''); return; }
  show();
}
start();
