// Unit tests of the console's pure unit tree (assets/units.js): run by `node --test`, from
// services/console/tests/js_units.rs (`cargo test -p orbit-console`).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { segments, tree, status, shape, idPath, loop, chosen, choose, verdict } from '../assets/units.js';

const u = (key, s, extra = {}) => ({ key, status: `UNIT_STATUS_${s}`, ...extra });
const example = (name) => readFileSync(new URL(`../../../examples/definitions/${name}.yaml`, import.meta.url), 'utf8');

test('keys of other scopes are not nested', () => {
  assert.equal(segments('compensate:orders[1].charge'), null);
  assert.equal(segments('on:failure:alert'), null);
  assert.deepEqual(segments('each[1].again[2].step'), [{ id: 'each', index: 1 }, { id: 'again', index: 2 }, { id: 'step' }]);
});

test('a for_each group: elements hold their sub-units, outputs come from the history', () => {
  const units = [u('orders[0].charge', 'SUCCEEDED'), u('orders[0].ship', 'SUCCEEDED'), u('orders[0]', 'SUCCEEDED'), u('orders[1].charge', 'DISPATCHED', { attempt: 1 })];
  const events = [
    { eventType: 'StepFanOut', step: 'orders', payload: { items: [1, 2, 3] } },
    { eventType: 'StepSucceeded', step: 'orders[0].ship', payload: { output: { tracking: 'T' } } },
  ];
  const root = tree(units, events);
  const orders = root.children.get('orders');
  assert.equal(orders.fanOut, 3);
  assert.deepEqual([...orders.elements.keys()], [0, 1]);
  const first = orders.elements.get(0);
  assert.equal(first.key, 'orders[0]');
  assert.equal(status(first), 'SUCCEEDED');
  assert.deepEqual(first.children.get('ship').output, { tracking: 'T' });
  // Element 1 has no unit of its own yet: running, from its open charge.
  assert.equal(status(orders.elements.get(1)), 'RUNNING');
  assert.equal(status(orders), 'RUNNING');
  // Every element started has ended, but the frozen list has one not started yet.
  const waiting = tree([u('orders[0]', 'SUCCEEDED'), u('orders[0].charge', 'SUCCEEDED')], events.slice(0, 1)).children.get('orders');
  assert.equal(status(waiting), 'RUNNING');
  assert.deepEqual(loop(orders), { total: 3, indices: [0, 1], counts: { SUCCEEDED: 1, RUNNING: 1, 'NOT REACHED': 1 } });
});

test('race and switch branches, failure branches', () => {
  const race = tree([u('decision.0.approval', 'SUCCEEDED'), u('decision.1.deadline', 'CANCELLED'), u('decision', 'SUCCEEDED')],
    [{ eventType: 'StepSucceeded', step: 'decision', payload: { output: { winner: 0, output: {} } } }]).children.get('decision');
  assert.deepEqual(verdict(race, 'step'), { kind: 'race', winner: 0 });
  assert.equal(status(race.branches.get(1)), 'CANCELLED');
  assert.equal(status(race.branches.get(0)), 'SUCCEEDED', 'a branch has no unit: its steps say');
  assert.equal(status(tree([u('r.0.a', 'SUCCEEDED'), u('r.0.b', 'DISPATCHED')]).children.get('r').branches.get(0)), 'RUNNING');
  assert.equal(status(tree([u('s.0.a', 'FAILED'), u('s.0.b', 'SKIPPED')]).children.get('s').branches.get(0)), 'FAILED');
  const sw = tree([u('route.1.refund', 'SUCCEEDED')]).children.get('route');
  assert.deepEqual(verdict(sw, 'switch'), { kind: 'switch', winner: 1 });
  const charge = tree([u('charge', 'WAITING'), u('charge.on_failure.tell', 'SUCCEEDED')]).children.get('charge');
  assert.equal(charge.failure.key, 'charge.on_failure');
  assert.deepEqual([...charge.failure.children.keys()], ['tell']);
  assert.equal(idPath('charge.on_failure.tell'), 'charge/on_failure/tell');
  assert.equal(idPath('route.1.refund'), 'route/refund');
});

test('nested loops: each[1].again[2].step', () => {
  const root = tree([u('each[1].again[2].step', 'FAILED'), u('each[1].again[0]', 'SUCCEEDED')]);
  const again = root.children.get('each').elements.get(1).children.get('again');
  assert.equal(again.key, 'each[1].again');
  assert.equal(again.elements.get(2).children.get('step').key, 'each[1].again[2].step');
  // The default choice is the failed iteration; a deeper link selects every level.
  assert.equal(chosen([], 'each[1].again', again), 2);
  assert.equal(chosen(['each[1].again[0]'], 'each[1].again', again), 0);
  assert.equal(chosen(['each[1].again[0]'], 'each', root.children.get('each')), 1);
});

test('choose replaces the loop\'s choice and the choices it implies', () => {
  assert.deepEqual(choose([], 'orders', 2), ['orders[2]']);
  assert.deepEqual(choose(['orders[1]', 'poll[3]'], 'orders', 2), ['poll[3]', 'orders[2]']);
  assert.deepEqual(choose(['each[1]'], 'each[1].again', 3), ['each[1].again[3]']);
  assert.deepEqual(choose(['each[1].again[3]'], 'each', 4), ['each[4]']);
});

test('shape reads the examples\' nesting from YAML and from JSON', () => {
  const loops = shape(example('loops'));
  assert.equal(loops.get('orders').kind, 'for_each');
  assert.deepEqual(loops.get('orders').children, ['charge', 'ship']);
  assert.equal(loops.get('poll').kind, 'repeat');
  assert.deepEqual(loops.get('poll').children, ['check', 'wait']);
  assert.equal(shape(example('race')).get('decision').kind, 'race');
  assert.equal(shape(example('switch')).get('route').kind, 'switch');
  assert.equal(shape(example('groups')).get('ship').kind, 'group');
  const failure = shape(example('on-failure'));
  assert.deepEqual(failure.get('charge').children, [], 'a failure branch is not a sub-step');
  assert.deepEqual(failure.get('charge/on_failure').children, ['tell', 'invoice']);
  assert.deepEqual([...failure.keys()].filter((k) => !k.includes('/')), ['reserve', 'charge', 'confirm']);
  const json = shape(JSON.stringify({ steps: [{ id: 'g', for_each: '${{ input.x }}', group: { steps: [{ id: 'a', task: 't' }] } }, { id: 'r', repeat: { steps: [{ id: 'b', compute: 1 }] } }] }));
  assert.equal(json.get('g').kind, 'for_each');
  assert.deepEqual(json.get('g').children, ['a']);
  assert.equal(json.get('r').kind, 'repeat');
});
