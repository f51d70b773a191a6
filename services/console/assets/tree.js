// The execution page's steps table, drawn as the definition nests (issue 29): a group, a
// switch or race branch, an `on_failure` branch, a `for_each` group and a `repeat` show
// their sub-steps indented under them with each unit's status, attempt, task, last error
// and output. A switch says which branch ran, a race which branch won (the losers' units
// are CANCELLED). A loop shows its element (or iteration) counts by status and a strip of
// at most STRIP elements around the selected one, with a pager; only the selected
// element's units are drawn, so a 1,000-element loop stays one screen. The selection is
// in the URL (`?unit=orders[2]`, `units.js` `chosen`/`choose`), so it can be linked and
// survives a reload; nested loops select at each level. Flat steps draw as before. The
// tree is built by `units.js` (pure); this file only writes HTML and wires the clicks.

import { esc, badge } from './api.js';
import { tree, shape, idPath, status, loop, chosen, choose, verdict } from './units.js';

/** Elements drawn in a loop's strip at once. */
const STRIP = 40;
/** Characters of an output shown in a row (the whole value is its title). */
const OUTPUT_CHARS = 80;
const KINDS = { group: 'group', switch: 'switch', race: 'race', repeat: 'repeat', for_each: 'for_each group' };

/** The `unit` values of the URL. */
export const selection = () => new URLSearchParams(location.search).getAll('unit');

/** The steps table: `ids` the definition's top-level steps ({id, needs}), `d` the
 * description, `events` the history shown, `ran` the steps a reset may go back to. */
export function steps(def, ids, d, events, ran) {
  const units = d.units || [];
  const root = tree(units, events);
  const shapes = def ? shape(def.workflow.document) : new Map();
  const sel = selection();
  const declared = new Set(ids.map((s) => s.id));
  const rows = [];
  for (const { id, needs } of ids) {
    const after = esc(needs.join(', '));
    // A step that ran can be reset to (its first row links to the reset panel).
    const here = ran.includes(id) ? `<a href="#restore" class="reset-here" data-step="${esc(id)}" title="Reset to just before ${esc(id)} first started">reset here</a>` : '';
    const n = root.children.get(id);
    if (n && nested(n, shapes)) { rows.push(...drawNode(n, { shapes, sel, after, here, depth: 0 })); continue; }
    const mine = units.filter((u) => u.step === id);
    rows.push(mine.length ? mine.map((u, i) => unitRow(u, after, i ? '' : here)).join('') : `<tr><td>${esc(id)}</td><td>${after}</td><td></td><td><span class="badge">NOT REACHED</span></td><td></td><td></td><td></td><td>${here}</td></tr>`);
  }
  // Units of handlers, compensations and steps the definition shown does not have: flat.
  for (const u of units) {
    const top = u.key.includes(':') ? null : u.key.split(/[.[]/)[0];
    if (top == null || !declared.has(top)) rows.push(unitRow(u, '', ''));
  }
  return `<table id="steps"><thead><tr><th>Step</th><th>Needs</th><th>Unit</th><th>State</th><th>Attempt</th><th>Task</th><th>Last error</th><th></th></tr></thead><tbody>${rows.join('')}</tbody></table>
    ${def ? `<details id="def-source"><summary>Definition source (${esc(def.workflow.definitionHash?.slice(0, 12))})</summary><pre class="mono">${esc(def.workflow.document)}</pre></details>` : ''}`;
}

export function unitRow(u, after, here) {
  return `<tr><td>${esc(u.step)}</td><td>${after}</td><td class="mono">${esc(u.key)}</td><td>${badge(u.status)}</td><td>${esc(u.attempt || '')}${u.redelivery ? ' (redelivery)' : ''}</td><td>${esc(u.task)}</td><td class="error">${u.lastError?.code ? `${esc(u.lastError.code)}: ${esc(u.lastError.message)}` : ''}</td><td>${here}</td></tr>`;
}

/** Picks element `index` of loop `loopKey`: the URL changes (replaced, as `?bar=` is) and
 * `redraw` draws the table again. Wired once per page on the table's container. */
export function wireTree(container, redraw) {
  const pick = (loopKey, index) => {
    const q = new URLSearchParams(location.search);
    const next = choose(q.getAll('unit'), loopKey, index);
    q.delete('unit');
    for (const v of next) q.append('unit', v);
    window.history.replaceState(null, '', `${location.pathname}?${q}`);
    redraw();
  };
  container.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-loop]');
    if (!b || !container.contains(b)) return;
    e.preventDefault();
    pick(b.dataset.loop, Number(b.dataset.index));
  });
  container.addEventListener('change', (e) => {
    const f = e.target.closest('input.loop-goto');
    if (!f) return;
    const i = Number(f.value);
    if (Number.isInteger(i) && i >= 0 && i < Number(f.max) + 1) pick(f.dataset.loop, i);
  });
}

/** What `shape` says node `n` is ('step' when the document does not say). */
const kindOf = (n, shapes) => shapes.get(idPath(n.key))?.kind ?? 'step';

/** Whether a top-level step draws nested (anything under it but a task's `for_each` elements). */
function nested(n, shapes) {
  if (kindOf(n, shapes) !== 'step' || n.children.size || n.branches.size || n.failure) return true;
  return [...n.elements.values()].some((e) => e.children.size || e.branches.size || e.failure);
}

function output(n) {
  if (n.output === undefined) return '';
  const text = JSON.stringify(n.output);
  const cut = text.length > OUTPUT_CHARS ? `${text.slice(0, OUTPUT_CHARS)}…` : text;
  return `<code class="out" title="${esc(text)}">${esc(cut)}</code>`;
}

/** One row of the tree: `label` in the step column, indented by `depth`. */
function row(n, label, { depth, after = '', here = '', extra = '' }) {
  const u = n.unit;
  const s = status(n);
  const state = u ? badge(u.status) : `<span class="badge s-${esc(s.replace(' ', '_'))}">${esc(s)}</span>`;
  return `<tr class="nested d${Math.min(depth, 8)}" data-unit="${esc(n.key)}" data-status="${esc(s)}"${extra}><td>${label}</td><td>${after}</td><td class="mono">${esc(n.key)}</td><td>${state}</td><td>${esc(u?.attempt || '')}${u?.redelivery ? ' (redelivery)' : ''}</td><td>${esc(u?.task || '')}</td><td class="error">${u?.lastError?.code ? `${esc(u.lastError.code)}: ${esc(u.lastError.message)}` : ''}</td><td>${here}${output(n)}</td></tr>`;
}

/** Node `n` (a step) and everything drawn under it. */
function drawNode(n, ctx) {
  const { shapes, depth } = ctx;
  const kind = kindOf(n, shapes);
  const tag = KINDS[kind] ? ` <span class="kind">${esc(KINDS[kind])}</span>` : '';
  const out = [row(n, `${esc(n.id)}${tag}`, { depth, after: ctx.after, here: ctx.here, extra: ` data-kind="${esc(kind)}"` })];
  const inner = { ...ctx, after: '', here: '', depth: depth + 1 };
  if (n.elements.size || n.fanOut != null || kind === 'repeat' || kind === 'for_each') out.push(...drawLoop(n, kind, inner));
  else if (!n.branches.size && kind !== 'switch' && kind !== 'race') out.push(...drawList(n, inner));
  if (n.branches.size) {
    const v = verdict(n, kind);
    for (const [i, b] of [...n.branches].sort((x, y) => x[0] - y[0])) {
      const word = v.kind === 'switch' ? 'ran' : v.winner == null ? 'racing' : v.winner === i ? 'won' : 'lost';
      out.push(row(b, `branch ${esc(i)} <span class="verdict v-${word}">${word}</span>`, { depth: depth + 1, extra: ` data-branch="${esc(i)}" data-verdict="${word}"` }));
      out.push(...drawList(b, { ...inner, depth: depth + 2 }));
    }
  }
  if (n.failure) {
    out.push(row(n.failure, '<span class="kind">on_failure</span> branch', { depth: depth + 1, extra: ' data-branch="on_failure"' }));
    out.push(...drawList(n.failure, { ...inner, depth: depth + 2 }));
  }
  return out;
}

/** The steps under `n` (a group, an element, a branch): its units' nodes in the
 * definition's order, then steps not reached yet. */
function drawList(n, ctx) {
  const declared = n.kind === 'branch' ? [] : ctx.shapes.get(idPath(n.key))?.children ?? [];
  const ids = [...declared.filter((id) => n.children.has(id)), ...[...n.children.keys()].filter((id) => !declared.includes(id))];
  const out = [];
  for (const id of ids) out.push(...drawNode(n.children.get(id), ctx));
  for (const id of declared) {
    if (n.children.has(id)) continue;
    const key = n.key ? `${n.key}.${id}` : id;
    out.push(`<tr class="nested d${Math.min(ctx.depth, 8)}" data-unit="${esc(key)}" data-status="NOT REACHED"><td>${esc(id)}</td><td></td><td class="mono">${esc(key)}</td><td><span class="badge">NOT REACHED</span></td><td></td><td></td><td></td><td></td></tr>`);
  }
  return out;
}

/** A loop: its counts, the strip and pager, and the selected element with its steps. */
function drawLoop(n, kind, ctx) {
  const { total, counts } = loop(n);
  const word = kind === 'repeat' ? 'iteration' : 'element';
  const at = chosen(ctx.sel, n.key, n);
  const summary = Object.entries(counts).map(([s, c]) => `<span class="count" data-status="${esc(s)}">${esc(c)} ${esc(s.toLowerCase())}</span>`).join(' · ');
  const from = at == null ? 0 : Math.max(0, Math.min(at - Math.floor(STRIP / 2), total - STRIP));
  const cells = [];
  for (let i = from; i < Math.min(total, from + STRIP); i++) {
    const e = n.elements.get(i);
    const s = e ? status(e) : 'NOT REACHED';
    cells.push(`<button type="button" class="cell s-${esc(s.replace(' ', '_'))}" data-loop="${esc(n.key)}" data-index="${i}" data-unit="${esc(n.key)}[${i}]" data-status="${esc(s)}" aria-pressed="${i === at}" title="${esc(`${word} ${i}: ${s}`)}">${i}</button>`);
  }
  const jump = (label, i, title) => `<button type="button" class="page" data-loop="${esc(n.key)}" data-index="${i}" title="${esc(title)}"${at == null || i === at ? ' disabled' : ''}>${label}</button>`;
  const last = Math.max(0, total - 1);
  const nav = at == null ? '' : `${jump('«', 0, `first ${word}`)}${jump('‹', Math.max(0, at - 1), `previous ${word}`)}
    <label>${word} <input type="number" class="loop-goto" data-loop="${esc(n.key)}" min="0" max="${last}" value="${at}"></label> of ${esc(total)}
    ${jump('›', Math.min(last, at + 1), `next ${word}`)}${jump('»', last, `last ${word}`)}`;
  const out = [`<tr class="loop-nav d${Math.min(ctx.depth, 8)}" data-loop="${esc(n.key)}"><td colspan="8"><div class="loop-head"><b>${esc(total)} ${esc(word)}${total === 1 ? '' : 's'}</b>${summary ? `: ${summary}` : ''} ${nav}</div><div class="strip" role="group" aria-label="${esc(`${n.key} ${word}s`)}">${cells.join('')}</div></td></tr>`];
  if (at == null) return out;
  const e = n.elements.get(at) ?? { key: `${n.key}[${at}]`, kind: 'element', id: n.id, index: at, unit: null, children: new Map(), branches: new Map(), elements: new Map(), failure: null };
  out.push(row(e, `${esc(word)} ${esc(at)}`, { depth: ctx.depth, extra: ' data-selected="true"' }));
  out.push(...drawList(e, { ...ctx, depth: ctx.depth + 1 }));
  return out;
}
