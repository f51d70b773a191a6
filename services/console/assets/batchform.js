// The "New batch" form of the batches page (`/ui/batches?new=1&workflow=&version=&to=&step=`,
// linked from a workflow's page): the selector (workflow, optional version, statuses),
// the action (migrate to a version, or reset to before a step with its options), the rate
// and a reason. "Dry run" answers per selected execution what the action would do — safe,
// UNSAFE with the unsafe differences, a reset's plan, or the refusal's code — and the
// total; "Start…" asks first, starts the batch (a fresh request id) and opens its page.

import { call, esc, errorBox } from './api.js';

const STATUSES = ['RUNNING', 'SUSPENDED', 'COMPENSATING', 'FAILED', 'CANCELLED', 'TIMED_OUT', 'COMPLETED'];

/** A batch's action in words: `migrate to v2`, `reset to before check, then v2`. */
export function actionText(a) {
  if (a?.migrate) return `migrate to v${a.migrate.toVersion}`;
  if (a?.reset) {
    const r = a.reset;
    return `reset to before ${r.step}${r.dropSignals ? ', signals after dropped' : ''}${r.toVersion ? `, then v${r.toVersion}` : ''}`;
  }
  if (a?.cancel) return `cancel${a.cancel.reason ? ` (${a.cancel.reason})` : ''}`;
  if (a?.terminate) return `terminate${a.terminate.reason ? ` (${a.terminate.reason})` : ''}`;
  if (a?.signal) {
    const payload = a.signal.payload === undefined || a.signal.payload === null ? '' : ` ${JSON.stringify(a.signal.payload)}`;
    return `signal ${a.signal.name}${payload}`;
  }
  if (a?.delete) return 'delete (finished executions)';
  return 'unknown action';
}

/** Draws the form into `slot` (open when the URL asks for it) and wires it. */
export async function newBatchForm(slot, params) {
  const p = (k) => esc(params.get(k) || '');
  const open = params.has('new') || params.has('workflow');
  const reset = params.has('step') && !params.has('to');
  slot.innerHTML = `<details id="new-batch" ${open ? 'open' : ''}><summary class="h2">New batch</summary>
    <form class="card batch-form" id="nb-form">
      <fieldset><legend>Executions</legend><div class="actions">
        <label>Workflow <input id="nb-workflow" list="nb-workflows" value="${p('workflow')}" placeholder="name (or a query)"></label>
        <datalist id="nb-workflows"></datalist>
        <label>Version <input id="nb-version" value="${p('version')}" placeholder="any"></label>
        <label>Query <input id="nb-query" class="mono" value="${p('query')}" placeholder="workflow = 'billing' AND created < '2026-11-24'"></label>
        <span class="statuses" role="group" aria-label="statuses">${STATUSES.map((s) => `<label class="check"><input type="checkbox" name="nb-status" value="${s}" ${s === 'RUNNING' ? 'checked' : ''}> ${s}</label>`).join('')}</span>
      </div></fieldset>
      <fieldset><legend>Action</legend>
        <div class="actions"><label class="check"><input type="radio" name="nb-action" value="migrate" id="nb-migrate" ${reset ? '' : 'checked'}> migrate to version</label>
          <label>Version <input id="nb-to" value="${p('to')}" placeholder="e.g. 2"></label></div>
        <div class="actions"><label class="check"><input type="radio" name="nb-action" value="reset" id="nb-reset" ${reset ? 'checked' : ''}> reset to before step</label>
          <label>Step <input id="nb-step" value="${p('step')}" placeholder="a main-body step"></label>
          <label class="check"><input type="checkbox" id="nb-drop"> drop signals after the point</label>
          <label>Then version (optional) <input id="nb-reset-version" placeholder="keep the point's"></label></div>
        <div class="actions"><label class="check"><input type="radio" name="nb-action" value="signal" id="nb-signal"> signal</label>
          <label>Name <input id="nb-signal-name" placeholder="a declared signal"></label>
          <label>Payload (JSON) <input id="nb-signal-payload" class="mono" placeholder="{}"></label></div>
        <div class="actions"><label class="check"><input type="radio" name="nb-action" value="cancel" id="nb-cancel"> cancel</label>
          <label class="check"><input type="radio" name="nb-action" value="terminate" id="nb-terminate"> terminate</label>
          <label class="check"><input type="radio" name="nb-action" value="delete" id="nb-delete"> delete (finished executions: pick their statuses)</label></div>
      </fieldset>
      <div class="actions">
        <label>Rate (a second) <input id="nb-rate" type="number" min="1" max="1000" placeholder="50"></label>
        <label>Reason <input id="nb-reason" placeholder="recorded with the batch"></label>
        <button type="button" id="nb-dry">Dry run</button>
        <button type="button" class="primary" id="nb-start">Start…</button>
      </div>
    </form><div id="nb-result" class="result" aria-live="polite"></div></details>`;
  const form = slot.querySelector('#nb-form');
  const out = slot.querySelector('#nb-result');
  const value = (sel) => form.querySelector(sel).value.trim();
  form.onsubmit = (e) => e.preventDefault();
  // The registered workflows, for the name field (a read the page can do without).
  call('WorkflowService/ListWorkflows', { pageSize: 1000 }).then(({ workflows }) => {
    const names = [...new Set(workflows.map((w) => w.name))];
    slot.querySelector('#nb-workflows').innerHTML = names.map((name) => `<option value="${esc(name)}">`).join('');
  }).catch(() => {});

  const request = (dryRun) => {
    const statuses = [...form.querySelectorAll('input[name=nb-status]:checked')].map((i) => `EXECUTION_STATUS_${i.value}`);
    const action = batchAction(form.querySelector('input[name=nb-action]:checked')?.value, value, form);
    return {
      selector: { workflow: value('#nb-workflow'), version: value('#nb-version'), statuses, query: value('#nb-query') },
      action,
      ratePerSecond: Number(value('#nb-rate') || 0),
      reason: value('#nb-reason') || 'from the console',
      requestId: dryRun ? '' : `console-${Date.now()}-${Math.random().toString(36).slice(2)}`,
      dryRun,
    };
  };
  slot.querySelector('#nb-dry').onclick = async () => {
    let req;
    try { req = request(true); } catch (e) { out.innerHTML = errorBox(e); return; }
    out.innerHTML = '<p class="muted">Dry run…</p>';
    try { out.innerHTML = dryRunView(await call('WorkflowService/StartBatch', req), req); } catch (e) { out.innerHTML = errorBox(e); }
  };
  slot.querySelector('#nb-start').onclick = async () => {
    let req;
    try { req = request(false); } catch (e) { out.innerHTML = errorBox(e); return; }
    const s = req.selector;
    const which = `${s.statuses.map((x) => x.replace('EXECUTION_STATUS_', '')).join(' or ') || 'RUNNING'} executions${s.workflow ? ` of ${s.workflow}${s.version ? ` v${s.version}` : ''}` : ''}${s.query ? ` matching ${s.query}` : ''}`;
    if (!confirm(`Start a batch: ${actionText(req.action)}, for every one of the ${which}? It runs on the server until every selected execution has an outcome (Cancel stops it).`)) return;
    out.innerHTML = '<p class="muted">Starting…</p>';
    try {
      const r = await call('WorkflowService/StartBatch', req);
      window.orbitGo(`/ui/batches/${encodeURIComponent(r.batchId)}`);
    } catch (e) { out.innerHTML = errorBox(e); }
  };
}

/** The `BatchAction` of the form's chosen action (`kind`); a payload that is not JSON
 * throws, before anything is sent. */
function batchAction(kind, value, form) {
  switch (kind) {
    case 'reset':
      return { reset: { step: value('#nb-step'), dropSignals: form.querySelector('#nb-drop').checked, toVersion: value('#nb-reset-version') } };
    case 'signal': {
      const text = value('#nb-signal-payload');
      let payload = null;
      if (text) {
        try { payload = JSON.parse(text); } catch (e) { throw new Error(`the signal's payload is not JSON: ${e.message}`); }
      }
      return { signal: { name: value('#nb-signal-name'), payload } };
    }
    case 'cancel': return { cancel: { reason: value('#nb-reason') } };
    case 'terminate': return { terminate: { reason: value('#nb-reason') } };
    case 'delete': return { delete: {} };
    default: return { migrate: { toVersion: value('#nb-to') } };
  }
}

const mono = (list) => (list?.length ? list.map((u) => `<span class="mono">${esc(u)}</span>`).join(', ') : '<span class="muted">none</span>');

// The unsafe differences of a migration (`MigrationChange`s), one line each with why.
function unsafe(changes) {
  const bad = (changes || []).filter((c) => !c.safe);
  return bad.length ? `<ul class="unsafe-changes">${bad.map((c) => `<li><b>${esc(c.kind)}</b> <span class="mono">${esc(c.step)}</span>: ${esc(c.detail)} <span class="muted">${esc(c.reason)}</span></li>`).join('')}</ul>` : '';
}

// What one dry-run item says, for the action asked.
function answer(item, action) {
  if (item.code) return { word: item.code, cls: 's-SUSPENDED', detail: esc(item.message) };
  const word = item.safe ? 'safe' : 'UNSAFE';
  const cls = item.safe ? 's-COMPLETED' : 's-FAILED';
  if (!action.migrate && !action.reset) return { word, cls, detail: `would be: ${esc(actionText(action))}` };
  if (action.migrate) {
    const count = (item.changes || []).length;
    const to = action.migrate.toVersion;
    const detail = item.fromVersion === to
      ? `already runs v${esc(to)}: nothing to do`
      : `v${esc(item.fromVersion)} → v${esc(to)}: ${item.safe ? (count ? `${count} difference${count > 1 ? 's' : ''}, all safe` : 'no differences') : 'would be refused MIGRATION_UNSAFE'}${unsafe(item.changes)}`;
    return { word, cls, detail };
  }
  const plan = item.plan || {};
  const to = action.reset.toVersion;
  const signals = Number(plan.signalsAfter || 0);
  const detail = `through seq ${esc(plan.throughSeq)} (v${esc(plan.version)}) · kept ${mono(plan.kept)} · runs again ${plan.forgotten?.length ? `${mono(plan.forgotten)} and ` : ''}the steps started after the point · ${signals} signal${signals === 1 ? '' : 's'} after${signals ? (action.reset.dropSignals ? ' (dropped)' : ' (received again)') : ''}${to && to !== plan.version ? ` · v${esc(plan.version)} → v${esc(to)}: ${item.safe ? 'safe' : 'UNSAFE'}${unsafe(plan.changes)}` : ''}`;
  return { word, cls, detail };
}

/** A dry run's answer (`StartBatchResponse`): the total, the count of each answer, and
 * one row per execution answered. */
export function dryRunView(r, req) {
  const items = r.dryRunItems || [];
  const total = Number(r.dryRunTotal || 0);
  const answers = items.map((i) => ({ item: i, ...answer(i, req.action) }));
  const safe = answers.filter((a) => a.word === 'safe').length;
  const bad = answers.filter((a) => a.word === 'UNSAFE').length;
  const refused = answers.length - safe - bad;
  const rows = answers.map((a) => {
    const link = `/ui/executions/${encodeURIComponent(a.item.executionId)}`;
    return `<tr data-id="${esc(a.item.executionId)}" data-answer="${esc(a.word)}"${a.word === 'UNSAFE' ? ' class="unsafe"' : ''}><td class="mono"><a href="${esc(link)}">${esc(a.item.executionId)}</a></td><td><span class="badge ${a.cls}">${esc(a.word)}</span></td><td>${a.detail}</td></tr>`;
  }).join('');
  return `<p id="dry-verdict"><b>Dry run of “${esc(actionText(req.action))}”</b>, nothing written: <b id="dry-total">${esc(total)}</b> execution${total === 1 ? '' : 's'} selected${items.length < total ? ` (the first ${items.length} answered)` : ''} —
    <span id="dry-safe">${safe}</span> safe, <span id="dry-unsafe">${bad}</span> UNSAFE, <span id="dry-refused">${refused}</span> refused.</p>
    ${rows ? `<table id="dry-items" class="diff"><thead><tr><th>Execution</th><th>Answer</th><th>What it would do</th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">No execution matches the selector now.</p>'}`;
}
