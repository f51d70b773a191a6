// The executions page's filter bar: a query in the list language (docs/queries.md) with
// completion of attribute names, keywords and status names at the cursor, and an
// INVALID_QUERY refusal drawn as the query with a caret under the column it names.
//
// The attribute names are the system attributes below plus the declared search
// attributes, which the page passes in (`names`): completion never guesses a name the
// server would refuse.

import { esc } from './api.js';

/** The system attributes of libs/query's catalog, in its order. */
export const SYSTEM = ['execution_id', 'workflow', 'version', 'status', 'created', 'updated',
  'closed', 'duration', 'schedule', 'parent', 'root'];

const KEYWORDS = ['AND', 'OR', 'NOT', 'IN', 'BETWEEN', 'STARTS_WITH', 'IS', 'NULL', 'ORDER BY',
  'ASC', 'DESC', 'TRUE', 'FALSE'];

const STATUSES = ['RUNNING', 'COMPENSATING', 'COMPLETED', 'FAILED', 'CANCELLED', 'TIMED_OUT',
  'CONTINUED_AS_NEW', 'SUSPENDED', 'PENDING'];

/** The bar's HTML: the input (named `q`, so the form carries it) and its suggestion list. */
export function html(value) {
  return `<div class="querybar">
    <label>Query <input name="q" id="query" autocomplete="off" spellcheck="false" value="${esc(value)}"
      placeholder="workflow = 'billing' AND status = 'FAILED' AND created > '2026-11-24'"
      role="combobox" aria-autocomplete="list" aria-controls="query-complete" aria-expanded="false"></label>
    <ul id="query-complete" role="listbox" hidden></ul>
  </div>`;
}

/**
 * What to suggest for `text` with the cursor at `at`: `{from, to, items}`, the word being
 * typed (`from`..`to`) and the candidates that extend it. Inside a quoted string right
 * after `status =`/`IN (` the status names; elsewhere attribute names and keywords.
 */
export function suggest(text, at, names) {
  const before = text.slice(0, at);
  const quotes = (before.match(/'/g) || []).length;
  if (quotes % 2 === 1) {
    // In a string: complete status names after `status =`, `status IN (…, '`.
    const open = before.lastIndexOf("'");
    const head = before.slice(0, open);
    if (!/\bstatus\s*(=|!=|<>|in\s*\(.*)\s*$/i.test(head)) return { from: at, to: at, items: [] };
    const word = before.slice(open + 1).toUpperCase();
    return { from: open + 1, to: at, items: STATUSES.filter((s) => s.startsWith(word) && s !== word) };
  }
  const m = before.match(/[A-Za-z_][A-Za-z0-9_]*$/);
  const word = m ? m[0] : '';
  if (!word) return { from: at, to: at, items: [] };
  const lower = word.toLowerCase();
  const attrs = [...new Set([...SYSTEM, ...names])].filter((n) => n.toLowerCase().startsWith(lower) && n !== word);
  const keys = KEYWORDS.filter((k) => k.toLowerCase().startsWith(lower) && k.toLowerCase() !== lower);
  return { from: at - word.length, to: at, items: [...attrs, ...keys].slice(0, 12) };
}

/** Wires completion to the bar inside `root`: typing suggests, ↑/↓ choose, Tab or Enter take. */
export function attach(root, names) {
  const input = root.querySelector('#query');
  const list = root.querySelector('#query-complete');
  let current = { items: [] };
  let chosen = 0;
  const close = () => { list.hidden = true; input.setAttribute('aria-expanded', 'false'); current = { items: [] }; };
  const draw = () => {
    list.innerHTML = current.items.map((item, i) =>
      `<li role="option" data-i="${i}" ${i === chosen ? 'aria-selected="true" class="sel"' : ''}>${esc(item)}</li>`).join('');
    list.hidden = !current.items.length;
    input.setAttribute('aria-expanded', String(!list.hidden));
  };
  const take = (i) => {
    const item = current.items[i];
    if (item == null) return;
    const text = input.value;
    const quoted = text[current.from - 1] === "'";
    const tail = quoted ? "'" : ' ';
    const rest = text.slice(current.to);
    const after = rest.startsWith(tail) ? '' : tail;
    input.value = text.slice(0, current.from) + item + after + rest;
    const cursor = current.from + item.length + (after ? 1 : rest.startsWith(tail) ? 1 : 0);
    input.setSelectionRange(cursor, cursor);
    close();
  };
  input.addEventListener('input', () => {
    current = suggest(input.value, input.selectionStart, names);
    chosen = 0;
    draw();
  });
  input.addEventListener('keydown', (e) => {
    if (list.hidden) return;
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const n = current.items.length;
      chosen = (chosen + (e.key === 'ArrowDown' ? 1 : n - 1)) % n;
      draw();
    } else if (e.key === 'Tab' || e.key === 'Enter') {
      e.preventDefault();
      take(chosen);
    } else if (e.key === 'Escape') {
      close();
    }
  });
  list.addEventListener('mousedown', (e) => {
    const li = e.target.closest('li');
    if (!li) return;
    e.preventDefault();
    take(Number(li.dataset.i));
  });
  input.addEventListener('blur', close);
}

/**
 * An INVALID_QUERY refusal of `query`: the message and the query with a caret under the
 * column the server named (`info.line`, `info.column`, 1-based).
 */
export function errorHtml(error, query) {
  const line = Number(error.info?.line || 0);
  const column = Number(error.info?.column || 0);
  const text = query.split('\n')[line - 1];
  const caret = line && column && text != null
    ? `<pre class="mono query-caret" id="query-caret">${esc(text)}\n${' '.repeat(column - 1)}^</pre>` : '';
  return `<div class="error" role="alert" id="query-error">${esc(error.code)}: ${esc(error.message)}${caret}</div>`;
}
