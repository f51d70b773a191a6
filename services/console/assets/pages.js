// The smaller pages: workflows (definitions, versions, source, a new batch of their
// executions), workers (sessions, tasks,
// in flight, last heartbeat), task queues (backlog, oldest age), schedules (specs, next
// fires, recent executions, pause/resume/trigger) and cluster (nodes, readiness, owned
// executions). Each reads one list call and refreshes every few seconds.

import { call, esc, badge, when, span, json, errorBox, short } from './api.js';

const REFRESH_MS = 5000;

/** Renders `draw()` into `main` now and every REFRESH_MS; returns the stop function. */
async function live(main, title, draw) {
  main.innerHTML = `<h1>${esc(title)}</h1><div id="body"><p class="muted">Loading…</p></div>`;
  const body = main.querySelector('#body');
  const load = async () => {
    if (main.contains(document.activeElement) && document.activeElement.matches('input, textarea, select')) return;
    try { body.innerHTML = await draw(); } catch (e) { body.innerHTML = errorBox(e); }
  };
  await load();
  const timer = setInterval(() => { if (!document.hidden) load(); }, REFRESH_MS);
  return () => clearInterval(timer);
}

const pb = (d) => (d ? span(parseFloat(d) * 1000) : ''); // a proto3 JSON Duration ("1.5s")

// The mark of a workflow's latest version (`WorkflowDefinition.latest`).
const latest = (w) => (w.latest ? ' <span class="badge latest" title="what a start without a version runs">latest</span>' : '');

export async function workflows(main, params) {
  const name = params.get('name');
  if (name) {
    const { workflows: versions } = await call('WorkflowService/ListWorkflows', { name, includeDocument: true, pageSize: 100 });
    // Without a version asked for: the latest, the one a start without a version runs
    // (the highest semantic version, not the last registered).
    const pick = versions.find((w) => w.version === params.get('version')) || versions.find((w) => w.latest) || versions[0];
    main.innerHTML = `<h1>${esc(name)}</h1>
      <p>Versions: ${versions.map((w) => `<a href="/ui/workflows?name=${encodeURIComponent(name)}&version=${encodeURIComponent(w.version)}">${w === pick ? `<b>v${esc(w.version)}</b>` : `v${esc(w.version)}`}</a>${latest(w)}`).join(' · ')}
      · <a href="/ui/executions?workflow=${encodeURIComponent(name)}">executions</a>
      · <a id="new-batch-link" href="/ui/batches?new=1&workflow=${encodeURIComponent(name)}${pick ? `&to=${encodeURIComponent(pick.version)}` : ''}" title="migrate or reset many executions of this workflow">new batch…</a></p>
      ${pick ? `<p class="muted">hash ${esc(pick.definitionHash)} · registered ${esc(when(pick.createdAt))}</p><pre class="mono" id="source">${esc(pick.document)}</pre>` : '<p>No such workflow.</p>'}`;
    return null;
  }
  return live(main, 'Workflows', async () => {
    const { workflows: all } = await call('WorkflowService/ListWorkflows', { pageSize: 1000 });
    const rows = all.map((w) => `<tr data-href="/ui/workflows?name=${encodeURIComponent(w.name)}&version=${encodeURIComponent(w.version)}" tabindex="-1"><td><a href="/ui/workflows?name=${encodeURIComponent(w.name)}&version=${encodeURIComponent(w.version)}">${esc(w.name)}</a></td><td>${esc(w.version)}${latest(w)}</td><td class="mono">${esc(w.definitionHash.slice(0, 16))}</td><td>${esc(when(w.createdAt))}</td><td><a href="/ui/executions?workflow=${encodeURIComponent(w.name)}">executions</a></td></tr>`).join('');
    return all.length ? `<table id="workflows"><thead><tr><th>Name</th><th>Version</th><th>Hash</th><th>Registered</th><th></th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">No workflows registered.</p>';
  });
}

export async function workers(main) {
  return live(main, 'Workers', async () => {
    const { workers: all } = await call('AdminService/ListWorkers', { pageSize: 1000 });
    const rows = all.map((w) => `<tr><td class="mono">${esc(w.workerId)}</td><td>${w.online ? '<span class="badge s-COMPLETED">ONLINE</span>' : '<span class="badge">OFFLINE</span>'}</td>
      <td>${esc(w.sdk)} ${esc(w.runtime)}</td><td>${w.tasks.map((t) => `${esc(t.name)}${t.version ? `@${esc(t.version)}` : ''}`).join(', ')}</td>
      <td>${esc(w.inFlight)} / ${esc(w.maxConcurrency)}</td><td>${esc(when(w.lastSeenAt))}</td>
      <td class="mono frontend">${[...new Set(w.sessions.map((s) => s.frontendNodeId))].map(esc).join(', ')}</td>
      <td>${w.sessions.map((s) => `<div class="mono">${esc(s.sessionId.slice(0, 12))} on ${esc(s.frontendNodeId)}${s.identity ? ` as ${esc(s.identity)}` : ''} · since ${esc(when(s.connectedAt))} · ${esc(s.inFlight)} in flight, ${esc(s.credits)} credits${s.draining ? ' · draining' : ''}</div>`).join('')}</td></tr>`).join('');
    return all.length ? `<table id="workers"><thead><tr><th>Worker</th><th>State</th><th>SDK</th><th>Tasks</th><th>In flight / max</th><th>Last heartbeat</th><th>Frontend</th><th>Sessions</th></tr></thead><tbody>${rows}</tbody></table>
      <p class="muted">Workers of every live frontend; another frontend's sessions are as of its last heartbeat.</p>` : '<p class="muted">No workers connected.</p>';
  });
}

export async function queues(main) {
  return live(main, 'Task queues', async () => {
    const { queues: all } = await call('AdminService/DescribeTaskQueue', { pageSize: 1000 });
    const rows = all.map((q) => `<tr><td>${esc(q.task?.name)}</td><td>${esc(q.task?.version)}</td><td>${esc(q.backlog)}</td><td>${esc(pb(q.oldestAge))}</td><td>${esc(q.inFlight)}</td><td>${esc(q.onlineWorkers)}</td></tr>`).join('');
    return all.length ? `<table id="queues"><thead><tr><th>Task</th><th>Version</th><th>Backlog</th><th>Oldest waiting</th><th>In flight</th><th>Online workers</th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">No task queues.</p>';
  });
}

function spec(s) {
  const trigger = s.cron ? `cron ${s.cron}` : s.interval ? `every ${pb(s.interval)}` : '';
  const more = (s.more || []).map((m) => (m.cron ? `cron ${m.cron}` : `every ${pb(m.interval)}`));
  return [trigger, ...more].join(' + ') + (s.timezone ? ` (${s.timezone})` : '') + (s.jitter && s.jitter !== '0s' ? `, jitter ${pb(s.jitter)}` : '') + `, overlap ${short(s.overlap).replace('OVERLAP_POLICY_', '')}`;
}

export async function schedules(main, params) {
  const id = params.get('id');
  const stop = await live(main, id ? `Schedule ${id}` : 'Schedules', async () => {
    const all = id ? [(await call('ScheduleService/GetSchedule', { scheduleId: id })).schedule] : (await call('ScheduleService/ListSchedules', { pageSize: 1000 })).schedules;
    let extra = '';
    if (id) {
      const next = await call('ScheduleService/PreviewSchedule', { scheduleId: id, spec: all[0].spec, count: 5 }).catch(() => ({ fireTimes: [] }));
      const recent = await call('WorkflowService/ListExecutions', { scheduleId: id, pageSize: 20 });
      extra = `<h2>Next fires</h2><ul id="next-fires">${next.fireTimes.map((t) => `<li>${esc(when(t))}</li>`).join('')}</ul>
        <h2>Recent executions</h2><ul>${recent.executions.map((x) => `<li><a class="mono" href="/ui/executions/${encodeURIComponent(x.executionId)}">${esc(x.executionId)}</a> ${badge(x.status)} ${esc(when(x.createdAt))}</li>`).join('')}</ul>
        <h2>Spec</h2>${json(all[0])}`;
    }
    const rows = all.map((s) => `<tr data-href="/ui/schedules?id=${encodeURIComponent(s.scheduleId)}" tabindex="-1"><td class="mono"><a href="/ui/schedules?id=${encodeURIComponent(s.scheduleId)}">${esc(s.scheduleId)}</a></td>
      <td>${esc(s.action.workflow)}</td><td>${esc(spec(s.spec))}</td><td>${s.state.paused ? '<span class="badge s-SUSPENDED">PAUSED</span>' : '<span class="badge s-RUNNING">ACTIVE</span>'}</td>
      <td>${esc(when(s.state.nextFireAt))}</td><td>${esc(when(s.state.lastFireAt))}${s.state.lastExecutionId ? ` <a href="/ui/executions/${encodeURIComponent(s.state.lastExecutionId)}">last</a>` : ''}</td>
      <td>${esc(s.state.firedCount)} fired, ${esc(s.state.skippedCount)} skipped${s.state.lastError ? `<div class="error">${esc(s.state.lastError)}</div>` : ''}</td>
      <td><button data-act="${s.state.paused ? 'ResumeSchedule' : 'PauseSchedule'}" data-id="${esc(s.scheduleId)}">${s.state.paused ? 'Resume' : 'Pause'}</button> <button data-act="TriggerSchedule" data-id="${esc(s.scheduleId)}">Trigger now</button></td></tr>`).join('');
    return (all.length ? `<table id="schedules"><thead><tr><th>Schedule</th><th>Workflow</th><th>Spec</th><th>State</th><th>Next fire</th><th>Last fire</th><th>Counts</th><th></th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">No schedules.</p>') + `<div id="act-result" class="result"></div>${extra}`;
  });
  main.onclick = async (e) => {
    const b = e.target.closest('button[data-act]');
    if (!b) return;
    const out = main.querySelector('#act-result');
    try {
      const answer = await call(`ScheduleService/${b.dataset.act}`, { scheduleId: b.dataset.id });
      out.innerHTML = `<p>${esc(b.dataset.act)} done</p>${answer.executionId ? `<p>Started <a href="/ui/executions/${encodeURIComponent(answer.executionId)}">${esc(answer.executionId)}</a></p>` : ''}`;
    } catch (err) { out.innerHTML = errorBox(err); }
  };
  return stop;
}

export async function cluster(main) {
  return live(main, 'Cluster', async () => {
    const [status, ready] = await Promise.all([
      call('AdminService/ClusterStatus', { includeDead: true }),
      fetch('/readyz').then((r) => r.json()).catch(() => ({ status: 'unknown' })),
    ]);
    const rows = status.nodes.map((n) => `<tr><td class="mono">${esc(n.nodeId)}</td><td>${esc(short(n.service))}</td><td>${n.live ? '<span class="badge s-COMPLETED">LIVE</span>' : '<span class="badge s-FAILED">DEAD</span>'}</td>
      <td class="mono">${esc(n.addr)}</td><td>${esc(n.incarnation)}</td><td>${esc(when(n.startedAt))}</td><td>${esc(when(n.heartbeatAt))}</td><td>${esc(n.ownedExecutions)}</td></tr>`).join('');
    return `<p id="readiness">This process: <b>${esc(ready.status)}</b>${ready.check ? ` (${esc(ready.check)}: ${esc(ready.reason)})` : ''} · orphaned executions: ${esc(status.orphanedExecutions)}</p>
      <table id="nodes"><thead><tr><th>Node</th><th>Service</th><th>State</th><th>Address</th><th>Incarnation</th><th>Started</th><th>Last heartbeat</th><th>Owned executions</th></tr></thead><tbody>${rows}</tbody></table>`;
  });
}
