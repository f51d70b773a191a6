// The execution timeline: the history folded into one row per step (in order of first
// appearance), each with its bars — queued (scheduled → dispatched), one bar per attempt
// (dispatched → succeeded / failed / uncertain), retry waits, timers, awaits for a
// signal, child executions — and signal markers, drawn as an SVG Gantt chart. Every bar
// is focusable; selecting one shows its details (the failed attempt's error) below.

import { esc, span } from './api.js';

const norm = (t) => String(t || '').replace(/^EVENT_TYPE_/, '').replace(/_/g, '').toLowerCase();

/** Rows of bars from the history events (`{seq, eventType, step, payload, timestamp}`). */
export function timeline(events, now = Date.now()) {
  const rows = new Map();
  const row = (name) => {
    if (!rows.has(name)) rows.set(name, { name, bars: [], marks: [] });
    return rows.get(name);
  };
  const open = new Map(); // `${kind}:${step}:${attempt}` → bar
  const begin = (kind, step, attempt, t, extra = {}) => {
    const bar = { kind, step, attempt, start: t, end: null, state: 'run', ...extra };
    row(step).bars.push(bar);
    open.set(`${kind}:${step}:${attempt ?? ''}`, bar);
    return bar;
  };
  const end = (kind, step, attempt, t, state, extra = {}) => {
    const key = `${kind}:${step}:${attempt ?? ''}`;
    const bar = open.get(key);
    if (bar) { Object.assign(bar, { end: t, state }, extra); open.delete(key); }
    return bar;
  };
  let first = null; let last = null;
  for (const e of events) {
    const t = Date.parse(e.timestamp);
    first = first ?? t; last = t;
    const p = e.payload || {};
    const step = e.step || p.step || '(workflow)';
    const attempt = p.attempt;
    switch (norm(e.eventType)) {
      case 'stepscheduled': begin('queue', step, null, t); break;
      case 'stepdispatched':
        end('queue', step, null, t, 'done');
        begin('attempt', step, attempt, t, { worker: p.worker_id || p.workerId });
        break;
      case 'stepsucceeded': end('attempt', step, attempt, t, 'ok') || end('child', step, null, t, 'ok'); break;
      case 'stepattemptfailed': end('attempt', step, attempt, t, 'bad', { error: p.error }); break;
      case 'stepattemptuncertain': end('attempt', step, attempt, t, 'bad', { error: { code: 'UNCERTAIN', message: p.reason } }); break;
      case 'retryscheduled':
        row(step).bars.push({ kind: 'retry', step, attempt: p.next_attempt, start: t, end: Number(p.fire_at) || t, state: 'wait' });
        break;
      case 'stepfailed':
        end('child', step, null, t, 'bad', { error: p.error });
        row(step).marks.push({ t, label: `failed: ${p.error?.code || ''}`, kind: 'bad' });
        break;
      case 'timerstarted': begin('timer', step, null, t, { due: Number(p.fire_at) }); break;
      case 'timerfired': end('timer', step, null, t, 'timer'); break;
      case 'awaitstarted': begin('await', step, null, t, { signal: p.signal || p.name }); break;
      case 'signaldelivered':
        end('await', p.step || step, null, t, 'ok');
        row(p.step || step).marks.push({ t, label: `signal ${p.name}`, kind: 'signal' });
        break;
      case 'signalreceived': row('(signals)').marks.push({ t, label: `signal ${p.name}`, kind: 'signal' }); break;
      case 'childstarted': begin('child', step, null, t, { child: p.child_execution_id || p.execution_id || p.child_id }); break;
      case 'stepcancelled':
        for (const kind of ['queue', 'attempt', 'timer', 'await', 'child']) end(kind, step, kind === 'attempt' ? attempt : null, t, 'cancelled');
        break;
      default: break;
    }
  }
  const closed = events.some((e) => /^workflow(completed|failed|cancelled|timedout|continuedasnew)$/.test(norm(e.eventType)));
  const stopAt = closed ? last : Math.max(last ?? now, now);
  for (const r of rows.values()) for (const b of r.bars) if (b.end == null) { b.end = stopAt; b.open = true; }
  return { rows: [...rows.values()], start: first ?? now, end: Math.max(stopAt ?? now, ...[...rows.values()].flatMap((r) => r.bars.map((b) => b.end))) };
}

const CLASS = { ok: 'b-ok', bad: 'b-bad', run: 'b-run', wait: 'b-wait', timer: 'b-timer', done: 'b-queue', cancelled: 'b-queue' };

/** The SVG of `timeline(events)`; bars carry `data-bar` = index into `bars` for details.
 * `cursor` (a time) draws the line of the seq a scrubbed page shows. */
export function svg(tl, cursor = null) {
  const label = 170; const width = 1000; const rowH = 24; const top = 20;
  const total = Math.max(1, tl.end - tl.start);
  const x = (t) => label + ((t - tl.start) / total) * (width - label - 10);
  const bars = [];
  let body = '';
  tl.rows.forEach((r, i) => {
    const y = top + i * rowH;
    body += `<text x="4" y="${y + 15}">${esc(r.name.length > 24 ? `${r.name.slice(0, 23)}…` : r.name)}</text>`;
    body += `<line class="axis" x1="${label}" x2="${width}" y1="${y + rowH}" y2="${y + rowH}"/>`;
    // Thin bars (queue, retry wait, timer) are painted first and the tall ones (attempts,
    // children) over them: a 0 ms failed attempt next to its retry wait stays clickable.
    let thin = ''; let tall = '';
    for (const b of r.bars) {
      const idx = bars.push(b) - 1;
      const cls = b.kind === 'queue' ? 'b-queue' : b.kind === 'timer' ? 'b-timer' : b.kind === 'retry' || b.kind === 'await' ? 'b-wait' : CLASS[b.state] || 'b-run';
      const w = Math.max(2, x(b.end) - x(b.start));
      const h = b.kind === 'attempt' || b.kind === 'child' ? 14 : 8;
      const name = `${b.kind}${b.attempt ? ` ${b.attempt}` : ''} of ${b.step}: ${span(b.end - b.start)}${b.state === 'bad' ? ' (failed)' : ''}`;
      const rect = `<rect class="bar ${cls}" data-bar="${idx}" id="bar-${esc(b.step)}-${b.kind}-${b.attempt ?? ''}" tabindex="0" role="button" aria-label="${esc(name)}" x="${x(b.start).toFixed(1)}" y="${y + (rowH - h) / 2}" width="${w.toFixed(1)}" height="${h}" rx="2"><title>${esc(name)}</title></rect>`;
      if (h === 14) tall += rect; else thin += rect;
    }
    body += thin + tall;
    for (const m of r.marks) {
      const mx = x(m.t);
      body += `<path class="${m.kind === 'signal' ? 'm-signal' : 'b-bad'}" d="M${mx.toFixed(1)} ${y + 3} l5 9 l-5 9 l-5 -9 z"><title>${esc(m.label)}</title></path>`;
    }
  });
  const h = top + tl.rows.length * rowH + 6;
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => {
    const tx = label + f * (width - label - 10);
    return `<line class="axis" x1="${tx}" x2="${tx}" y1="${top - 4}" y2="${h}"/><text x="${tx + 2}" y="12">+${esc(span(f * total))}</text>`;
  }).join('');
  const at = cursor == null ? '' : `<line class="cursor" id="gantt-cursor" x1="${x(cursor).toFixed(1)}" x2="${x(cursor).toFixed(1)}" y1="${top - 4}" y2="${h}"/>`;
  return { bars, html: `<svg class="gantt" id="gantt" viewBox="0 0 ${width} ${h}" role="img" aria-label="Timeline of the steps">${ticks}${body}${at}</svg>` };
}

export const LEGEND = `<p class="legend"><span><i class="b-queue"></i>queued</span><span><i class="b-run"></i>running</span><span><i class="b-ok"></i>succeeded</span><span><i class="b-bad"></i>failed attempt</span><span><i class="b-wait"></i>retry wait / awaiting signal</span><span><i class="b-timer"></i>timer</span><span><i class="m-signal"></i>signal</span></p>`;
