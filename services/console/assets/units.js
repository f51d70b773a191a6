// The unit tree of an execution (pure: no DOM, unit-tested by services/console/tests/units.test.mjs).
// Unit keys carry the nesting of issue 29 (docs/events.md, "Units and keys"): `g.sub` (a
// group's step), `s.1.sub` (a switch's or race's branch 1), `t.on_failure.sub` (a failure
// branch), `loop[i].sub` (element i of a `for_each` group, iteration i of a `repeat`; the
// element itself is unit `loop[i]` once resolved), nested in each other
// (`each[1].again[2].step`). `tree` folds DescribeExecution's units and the history's
// outputs into that shape; `shape` reads from the definition document what each step is
// (group, switch, race, repeat, for_each) and which sub-steps it declares, so that steps
// not reached yet show too. The selection of elements and iterations lives in the URL as
// repeated `unit=` parameters (`?unit=orders[2]&unit=each[1].again[3]`): `chosen` and
// `choose` read and write it.

/** Unit statuses after which nothing more happens to the unit. */
const FINAL = new Set(['SUCCEEDED', 'FAILED', 'SKIPPED', 'CANCELLED']);

/** `UNIT_STATUS_FAILED` → `FAILED`. */
const bare = (s) => String(s || '').replace(/^UNIT_STATUS_/, '');

/** A main-body unit key as its segments (`{id}` or `{id, index}`); null for a key of another
 * scope (`compensate:`, `on:<outcome>:`, `on_signal:`, `update:`), drawn flat. */
export function segments(key) {
  if (key.includes(':')) return null;
  return key.split('.').map((s) => {
    const m = s.match(/^(\w+)\[(\d+)\]$/);
    return m ? { id: m[1], index: Number(m[2]) } : { id: s };
  });
}

function node(key, kind, id, index) {
  return { key, kind, id, index, unit: null, output: undefined, children: new Map(), branches: new Map(), elements: new Map(), failure: null, fanOut: null };
}

/** The tree of the main body's units: `{children}` by step id, each node `{key, kind
 * ('step' | 'branch' | 'failure' | 'element'), id, index, unit, output, children, branches,
 * elements, failure, fanOut}` (`fanOut`: the size of a frozen `for_each` list). */
export function tree(units, events = []) {
  const root = node('', 'root');
  const byKey = new Map();
  const at = (key) => {
    const segs = segments(key);
    if (!segs) return null;
    let cur = root;
    for (const seg of segs) {
      if (cur !== root && seg.index == null && /^\d+$/.test(seg.id)) {
        const i = Number(seg.id);
        if (!cur.branches.has(i)) cur.branches.set(i, node(`${cur.key}.${i}`, 'branch', seg.id, i));
        cur = cur.branches.get(i);
        continue;
      }
      if (cur !== root && cur.kind === 'step' && seg.index == null && seg.id === 'on_failure') {
        cur.failure ??= node(`${cur.key}.on_failure`, 'failure', 'on_failure');
        cur = cur.failure;
        continue;
      }
      if (!cur.children.has(seg.id)) cur.children.set(seg.id, node(cur === root ? seg.id : `${cur.key}.${seg.id}`, 'step', seg.id));
      cur = cur.children.get(seg.id);
      if (seg.index != null) {
        if (!cur.elements.has(seg.index)) cur.elements.set(seg.index, node(`${cur.key}[${seg.index}]`, 'element', seg.id, seg.index));
        cur = cur.elements.get(seg.index);
      }
    }
    byKey.set(key, cur);
    return cur;
  };
  for (const u of units) {
    const n = at(u.key);
    if (n) n.unit = u;
  }
  for (const e of events) {
    if (!e.step) continue;
    const type = e.eventType;
    if (type === 'StepSucceeded' || type === 'StepFailureCaught') {
      const n = byKey.get(e.step) ?? at(e.step);
      if (n) n.output = e.payload?.output;
    } else if (type === 'StepFanOut') {
      const n = byKey.get(e.step) ?? at(e.step);
      if (n) n.fanOut = (e.payload?.items || []).length;
    }
  }
  return root;
}

/** A node's status: its unit's; without one (a group, a branch, an element still running
 * has no unit until it resolves; a switch's or race's branch never has one): NOT REACHED
 * when nothing under it has a unit, RUNNING while anything under it is open (or a frozen
 * list has elements not started), else CANCELLED if some of it was cancelled (a race's
 * loser, a wind-down), FAILED if some of it failed, SUCCEEDED. */
export function status(n) {
  if (n.unit) return bare(n.unit.status);
  const below = [];
  let open = false;
  const walk = (m) => {
    if (m.fanOut != null && m.elements.size < m.fanOut) open = true;
    for (const c of [...m.children.values(), ...m.branches.values(), ...m.elements.values(), ...(m.failure ? [m.failure] : [])]) {
      if (c.unit) below.push(bare(c.unit.status)); else walk(c);
    }
  };
  walk(n);
  if (!below.length) return open ? 'RUNNING' : 'NOT REACHED';
  if (open || !below.every((s) => FINAL.has(s))) return 'RUNNING';
  for (const s of ['CANCELLED', 'FAILED']) if (below.includes(s)) return s;
  return 'SUCCEEDED';
}

/** What each step of the document is and which sub-steps it declares, by path of step ids
 * (`orders`, `orders/charge`): `{kind: 'step' | 'group' | 'switch' | 'race' | 'repeat' |
 * 'for_each' | 'failure', children: [id]}` (a failure branch is `<step>/on_failure`). JSON documents are walked; YAML is read by indentation
 * (`- id: x` items and the `group:`/`switch:`/`race:`/`repeat:`/`for_each:` keys under
 * them) — enough for drawing, not a YAML parser: a step whose `id` is not its first key
 * is only known from its units. */
export function shape(document) {
  const out = new Map();
  const add = (parent, id, kind = 'step') => {
    const path = parent ? `${parent}/${id}` : id;
    if (!out.has(path)) out.set(path, { kind, children: [] });
    // A failure branch is no sub-step of its step: its steps are its own children.
    if (parent && kind !== 'failure' && !out.get(parent).children.includes(id)) out.get(parent).children.push(id);
    return path;
  };
  let doc = null;
  try { doc = JSON.parse(document); } catch { /* YAML */ }
  if (doc && typeof doc === 'object') {
    const walk = (steps, parent) => {
      for (const s of steps || []) {
        if (!s || typeof s.id !== 'string') continue;
        const path = add(parent, s.id);
        const me = out.get(path);
        if (s.group) { me.kind = s.for_each == null ? 'group' : 'for_each'; walk(s.group.steps, path); }
        if (s.repeat) { me.kind = 'repeat'; walk(s.repeat.steps, path); }
        if (Array.isArray(s.switch)) { me.kind = 'switch'; for (const b of s.switch) walk(b.steps || b.default, path); }
        if (Array.isArray(s.race)) { me.kind = 'race'; for (const b of s.race) walk(b.steps, path); }
        if (s.on_failure) walk(s.on_failure.steps, add(path, 'on_failure', 'failure'));
      }
    };
    walk(doc.steps, '');
    return out;
  }
  const body = String(document || '').split(/^steps:\s*$/m)[1] || '';
  const stack = []; // the enclosing items: {indent, path, forEach}
  for (const line of body.split('\n')) {
    if (/^\S/.test(line)) break; // the next top-level key
    if (/^\s*(#|$)/.test(line)) continue;
    const item = line.match(/^(\s*)-\s*(?:\{\s*)?id:\s*["']?(\w+)/);
    const key = item ? null : line.match(/^(\s*)(group|switch|race|repeat|for_each|on_failure):/);
    const indent = (item || key)?.[1].length;
    if (indent == null) continue;
    while (stack.length && stack[stack.length - 1].indent >= indent) stack.pop();
    const top = stack[stack.length - 1];
    if (item) { stack.push({ indent, path: add(top?.path, item[2]) }); continue; }
    if (!top) continue;
    const me = out.get(top.path);
    if (key[2] === 'on_failure') stack.push({ indent, path: add(top.path, 'on_failure', 'failure') });
    else if (key[2] === 'for_each') { top.forEach = true; if (me.kind === 'group') me.kind = 'for_each'; } else if (key[2] === 'group') me.kind = top.forEach ? 'for_each' : 'group';
    else me.kind = key[2];
  }
  return out;
}

/** A node's path of step ids (`orders[2].charge` → `orders/charge`, `t.on_failure.x` →
 * `t/on_failure/x`), the key of `shape`: branch indices and element indices dropped. */
export function idPath(key) {
  return (segments(key) || []).filter((s) => !/^\d+$/.test(s.id)).map((s) => s.id).join('/');
}

/** A loop's elements (or iterations) and their counts: `{total, indices, counts: {status: n}}`;
 * `total` is the frozen list's size for a `for_each`, else the iterations that ran. */
export function loop(n) {
  const indices = [...n.elements.keys()].sort((a, b) => a - b);
  const total = Math.max(n.fanOut ?? 0, indices.length ? indices[indices.length - 1] + 1 : 0);
  const counts = {};
  for (const i of indices) { const s = status(n.elements.get(i)); counts[s] = (counts[s] || 0) + 1; }
  if (total > indices.length) counts['NOT REACHED'] = total - indices.length;
  return { total, indices, counts };
}

const prefix = (loopKey) => `${loopKey}[`;

/** The element of loop `loopKey` selected by the URL's `unit` values (a deeper selection,
 * `each[1].again[2]`, selects element 1 of `each` too), else the first failed, else the
 * first running, else the first; null for a loop with no element. */
export function chosen(selection, loopKey, n) {
  for (const v of selection) {
    if (!v.startsWith(prefix(loopKey))) continue;
    const m = v.slice(prefix(loopKey).length).match(/^(\d+)\]/);
    if (m) return Number(m[1]);
  }
  const { indices, total } = loop(n);
  if (!total) return null;
  const first = (s) => indices.find((i) => status(n.elements.get(i)) === s);
  return first('FAILED') ?? first('RUNNING') ?? 0;
}

/** The `unit` values after picking element `index` of loop `loopKey`: the loop's earlier
 * choice (and the choices inside it) give way, and so do choices the new one implies. */
export function choose(selection, loopKey, index) {
  const picked = `${loopKey}[${index}]`;
  const kept = selection.filter((v) => !v.startsWith(prefix(loopKey)) && !picked.startsWith(`${v}.`) && picked !== v);
  return [...kept, picked];
}

/** Which branch of a switch or race node ran or won: `{kind, winner}` (`winner`: the race's
 * winner once it resolved, the switch's branch; null while undecided). */
export function verdict(n, kind) {
  const out = n.output && typeof n.output === 'object' ? n.output : {};
  if (kind === 'race' || (kind !== 'switch' && ('winner' in out || n.branches.size > 1))) {
    return { kind: 'race', winner: Number.isInteger(out.winner) ? out.winner : null };
  }
  const ran = Number.isInteger(out.branch) ? out.branch : n.branches.size === 1 ? [...n.branches.keys()][0] : null;
  return { kind: 'switch', winner: ran };
}
