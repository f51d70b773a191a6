// The execution page's actions that evolve an execution (docs/evolving.md): migrate it to
// another version (the checked diff of a dry run, then the migration after a
// confirmation), and reset or fork it from an earlier point of its run — before a
// main-body step that ran, or after the seq the scrubber shows. A reset's dry run answers
// the plan (the point, the units kept and the ones run again, the signals after the point,
// a target version's diff); "Reset…" ends the run and the execution goes on in its next
// run; "Fork at seq N…" starts a new execution from a copy of the run up to N.
// Migrate acts on the execution now, so it waits for the view to be live; reset and fork
// are about a past point, so they stay usable while the view is scrubbed. A result shown
// here (`data-keep`) pauses the page's refresh until the next view.

import { call, esc, errorBox } from './api.js';

/** The main-body steps (`ids`) that started in the run's `events`, in the order they first
 * did: the steps a reset can go back to. */
export function stepsThatRan(ids, events) {
  const main = new Set(ids);
  const ran = [];
  for (const e of events) if (main.has(e.step) && !ran.includes(e.step)) ran.push(e.step);
  return ran;
}

/** The migrate and reset / fork panels. `live`: the execution is open and the view is at
 * the head; `at`: the seq shown (null at the head); `ran`: [`stepsThatRan`]. */
export function panels(live, at, ran) {
  const open = live && at == null;
  const points = [
    ...(at == null ? [] : [`<option value="seq:${esc(at)}" selected>after seq ${esc(at)} (the seq shown)</option>`]),
    // At the head the last step that ran is the likely one: the step that failed.
    ...ran.map((s, i) => `<option value="step:${esc(s)}"${at == null && i === ran.length - 1 ? ' selected' : ''}>before step ${esc(s)}</option>`),
  ].join('');
  return `<h3>Migrate to another version</h3>
  <div class="actions card">
    <label>Version <input id="mig-version" placeholder="e.g. 2"></label>
    <button id="mig-dry" ${open ? '' : 'disabled'}>Diff (dry run)</button>
    <button id="mig-run" ${open ? '' : 'disabled'}>Migrate…</button>
  </div><div id="mig-result" class="result" aria-live="polite"></div>
  <h3 id="restore-title">Reset / fork</h3>
  <div class="actions card" id="restore">
    <label>Point <select id="rst-point" ${points ? '' : 'disabled'}>${points || '<option value="">no step ran yet</option>'}</select></label>
    <label class="check"><input type="checkbox" id="rst-drop"> drop signals after the point</label>
    <label>To version (optional) <input id="rst-version" placeholder="keep the point's"></label>
    <label>Reason <input id="rst-reason" placeholder="recorded with the reset"></label>
    <button id="rst-dry" ${points ? '' : 'disabled'}>Plan (dry run)</button>
    <button id="rst-run" ${points ? '' : 'disabled'}>Reset…</button>
    <button id="fork-run" ${at == null ? 'disabled title="scrub to a seq or plan a reset first"' : ''}>Fork at seq ${at == null ? '…' : esc(at)}…</button>
  </div><div id="rst-result" class="result" aria-live="polite"></div>`;
}

/** The checked differences of a migration (`MigrationChange`s): one row each, UNSAFE ones
 * marked with why. */
export function diffTable(changes, id) {
  const rows = (changes || []).map((c) => `<tr class="${c.safe ? 'safe' : 'unsafe'}"><td>${c.safe ? 'safe' : '<b class="error">UNSAFE</b>'}</td><td>${esc(c.kind)}</td><td class="mono">${esc(c.step)}</td><td>${esc(c.detail)}</td><td class="muted">${esc(c.reason)}</td></tr>`).join('');
  return rows ? `<table id="${id}" class="diff"><thead><tr><th></th><th>Change</th><th>Step</th><th>What</th><th>Why</th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">No differences.</p>';
}

// `MigrateExecutionResponse`: the verdict and the diff.
function migration(r, dryRun) {
  const verdict = dryRun
    ? (r.safe ? 'safe: a migration would be recorded' : 'UNSAFE: a migration would be refused')
    : (r.migrated ? `migrated (seq ${esc(r.seq)})` : 'already runs this version: nothing written');
  return `<p id="mig-verdict"><b>v${esc(r.fromVersion)} → v${esc(r.toVersion)}</b>: ${verdict}</p>${diffTable(r.changes, 'mig-diff')}`;
}

const units = (list) => (list?.length ? list.map((u) => `<span class="mono">${esc(u)}</span>`).join(', ') : '<span class="muted">none</span>');

/** What a restoration from `plan` runs again: the units it forgets (open at the point,
 * undone by compensation, or depending on those), then the steps of `ran` (the main-body
 * steps that ran in the run) that had not started by the point — a main-body unit's key
 * is its step id, `[i]` for a fan-out element. */
export function runsAgain(plan, ran) {
  const known = [...(plan.kept || []), ...(plan.forgotten || [])];
  const covered = (step) => known.some((k) => k === step || k.startsWith(`${step}[`));
  const after = ran.filter((s) => !covered(s));
  const parts = [
    ...(plan.forgotten || []).map((u) => `<span class="mono">${esc(u)}</span>`),
    ...after.map((s) => `<span class="mono">${esc(s)}</span> <span class="muted">(started after the point)</span>`),
  ];
  return parts.length ? parts.join(', ') : '<span class="muted">none</span>';
}

/** A reset's dry run (`RestorePlan`), for the point `point` (words) with the options asked;
 * `ran`: the main-body steps that ran in the run. */
export function planView(plan, point, { dropSignals, toVersion }, ran) {
  const through = esc(plan.throughSeq);
  const signals = Number(plan.signalsAfter || 0);
  const migrating = toVersion && toVersion !== plan.version;
  return `<p id="rst-verdict"><b>Reset ${esc(point)}</b>: dry run, nothing written</p>
    <dl class="kv card" id="rst-plan">
      <dt>Point</dt><dd>through seq <b id="rst-through">${through}</b> (v${esc(plan.version)}): the next run copies events 2–${through} and goes on from there</dd>
      <dt>Kept</dt><dd id="rst-kept">${units(plan.kept)}</dd>
      <dt>Runs again</dt><dd id="rst-again">${runsAgain(plan, ran)}</dd>
      <dt>Signals after the point</dt><dd id="rst-signals">${signals}${signals ? (dropSignals ? ' (dropped)' : ' (received again, in order)') : ''}</dd>
      ${migrating ? `<dt>Version</dt><dd id="rst-migrate">v${esc(plan.version)} → v${esc(toVersion)}: ${plan.safe ? 'safe' : '<b class="error">UNSAFE</b>'}</dd>` : ''}
    </dl>${migrating ? diffTable(plan.changes, 'rst-diff') : ''}`;
}

/** Wires the panels of [`panels`] in `main` for execution `id`, whose run `run` is shown
 * as of `at` (null: the head) and in which the main-body steps `ran` started.
 * `onReset(response, point)` is called once a reset is done. */
export function wireEvolve(main, { id, at, run, ran, onReset }) {
  const rid = () => `console-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const value = (sel) => main.querySelector(sel).value.trim();
  const mig = main.querySelector('#mig-result');
  const migrate = async (dryRun) => {
    mig.dataset.keep = '1';
    mig.innerHTML = '<p class="muted">Migrate…</p>';
    try {
      mig.innerHTML = migration(await call('WorkflowService/MigrateExecution', { executionId: id, toVersion: value('#mig-version'), dryRun, reason: 'from the console', requestId: dryRun ? '' : rid() }), dryRun);
    } catch (e) { mig.innerHTML = errorBox(e); }
  };
  main.querySelector('#mig-dry').onclick = () => migrate(true);
  main.querySelector('#mig-run').onclick = () => confirm(`Migrate ${id}?`) && migrate(false);

  const out = main.querySelector('#rst-result');
  const pointSelect = main.querySelector('#rst-point');
  const forkButton = main.querySelector('#fork-run');
  let planned = null; // the through seq of the last plan shown: a fork's default point
  const point = () => {
    const [kind, what] = pointSelect.value.split(/:(.*)/s);
    return kind === 'seq'
      ? { to: { seq: what }, words: `to after seq ${what}` }
      : { to: { step: what }, words: `to before step ${what}` };
  };
  const options = () => ({ dropSignals: main.querySelector('#rst-drop').checked, toVersion: value('#rst-version'), reason: value('#rst-reason') || 'from the console' });
  const forkAt = () => at ?? planned;
  const showForkAt = () => {
    const seq = forkAt();
    forkButton.disabled = seq == null;
    forkButton.textContent = `Fork at seq ${seq ?? '…'}…`;
    if (seq != null) forkButton.removeAttribute('title');
  };
  const reset = async (dryRun) => {
    const p = point();
    const o = options();
    out.dataset.keep = '1';
    out.innerHTML = `<p class="muted">${dryRun ? 'Planning' : 'Resetting'} ${esc(p.words)}…</p>`;
    try {
      const r = await call('WorkflowService/ResetExecution', { executionId: id, ...p.to, ...o, requestId: dryRun ? '' : rid(), dryRun });
      if (!dryRun) { delete out.dataset.keep; onReset(r, p.words); return; }
      planned = Number(r.plan.throughSeq);
      out.innerHTML = planView(r.plan, p.words, o, ran);
      showForkAt();
    } catch (e) { out.innerHTML = errorBox(e); }
  };
  main.querySelector('#rst-dry').onclick = () => reset(true);
  main.querySelector('#rst-run').onclick = () => confirm(`Reset ${id} ${point().words}? Run ${run} ends (its open work is cancelled, not compensated) and the execution goes on in run ${Number(run) + 1}; the work after the point runs again.`) && reset(false);
  // A changed point makes the plan shown stale: the fork falls back to the seq shown.
  pointSelect.onchange = () => { planned = null; showForkAt(); };
  forkButton.onclick = async () => {
    const seq = forkAt();
    if (seq == null) return;
    const newId = prompt(`Fork ${id} (run ${run}) at seq ${seq} into a new execution with the id:`, `${id}-fork-${seq}`)?.trim();
    if (!newId) return;
    const o = options();
    out.dataset.keep = '1';
    out.innerHTML = `<p class="muted">Forking at seq ${esc(seq)}…</p>`;
    try {
      const r = await call('WorkflowService/ForkExecution', { executionId: id, run, atSeq: String(seq), newExecutionId: newId, version: o.toVersion, reason: o.reason });
      out.innerHTML = `<p id="fork-verdict"><b>${r.created ? 'Forked' : 'Already exists (nothing written)'}</b>: <a id="fork-link" class="mono" href="/ui/executions/${encodeURIComponent(r.executionId)}">${esc(r.executionId)}</a> (v${esc(r.version)}), a copy of run ${esc(run)} through seq ${esc(r.plan.throughSeq)}; runs again there: ${runsAgain(r.plan, ran)}</p>`;
    } catch (e) { out.innerHTML = errorBox(e); }
  };
  // A step row's "reset here" picks that step as the point.
  for (const a of main.querySelectorAll('a.reset-here')) {
    a.onclick = (e) => {
      e.preventDefault();
      e.stopPropagation();
      pointSelect.value = `step:${a.dataset.step}`;
      pointSelect.onchange();
      main.querySelector('#restore-title').scrollIntoView({ block: 'start' });
      pointSelect.focus();
    };
  }
  showForkAt();
}
