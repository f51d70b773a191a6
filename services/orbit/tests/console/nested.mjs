// Headless Chromium checks of the execution page's nested steps (services/console/assets/
// tree.js), run by services/orbit/tests/console_nested.rs against a real `orbit dev` where
// execution ID of `console-nested` completed (a for_each group over three orders, a repeat
// done at iteration 2, a race won by branch 1):
// and execution MANY of `console-many` (a for_each group over 1,000 numbers) completed:
//   node nested.mjs http://HOST:PORT SHOTS_DIR ID MANY
// Exits non-zero (with the reason) on the first check that does not hold.

import { open } from './browser.mjs';

const [base, shots, id, many] = process.argv.slice(2);
const { browser, page, errors, shot, check } = await open(shots);
const row = (key) => page.locator(`#steps tr[data-unit="${key}"]`);
const cell = (tr, i) => tr.locator('td').nth(i).innerText();
const statusOf = (key) => row(key).getAttribute('data-status');
const text = async (l) => (await l.textContent()).replace(/\s+/g, ' ');
const units = () => new URL(page.url()).searchParams.getAll('unit');
// The units drawn under loop `loop`'s selected element (the rows after it).
const drawn = (prefix) => page.locator('#steps tr[data-unit]').evaluateAll((rows, p) => rows.map((r) => r.dataset.unit).filter((k) => k.startsWith(p)), prefix);

try {
  await page.goto(`${base}/ui/executions/${encodeURIComponent(id)}`);
  await page.locator('h1 .badge', { hasText: 'COMPLETED' }).waitFor();
  await row('orders').waitFor();
  // The tree: each top-level step once, in order, the loops and the race marked.
  const tops = await page.locator('#steps tbody tr.d0').evaluateAll((rows) => rows.map((r) => [r.dataset.unit, r.dataset.kind]));
  const kinds = [['orders', 'for_each'], ['poll', 'repeat'], ['decision', 'race'], ['each', 'for_each'], ['ship', 'group'], ['route', 'switch'], ['charge', 'step']];
  check(JSON.stringify(tops) === JSON.stringify(kinds), `the top-level steps: ${JSON.stringify(tops)}`);
  for (const key of ['orders', 'poll', 'decision', 'each', 'ship', 'route']) check(await statusOf(key) === 'SUCCEEDED', `${key} SUCCEEDED`);
  // A group's steps, the switch's branch that ran, the failure branch: under their step.
  check(await row('ship.label').getAttribute('class') === 'nested d1' && await statusOf('ship.label') === 'SUCCEEDED', 'ship.label under ship');
  check(await row('route.1').getAttribute('data-verdict') === 'ran' && await row('route.0').count() === 0, 'the switch ran branch 1 only');
  check(await row('route.1.small').getAttribute('class') === 'nested d2' && await statusOf('route.1.small') === 'SUCCEEDED', 'route.1.small under its branch');
  check(await row('charge.on_failure').getAttribute('data-branch') === 'on_failure', 'the failure branch under charge');
  check(await statusOf('charge.on_failure.tell') === 'SUCCEEDED' && (await cell(row('charge.on_failure.tell'), 7)).includes('told'), 'the failure branch ran');
  check((await cell(row('charge'), 6)).includes('EXPRESSION_ERROR'), `charge's error: ${await cell(row('charge'), 6)}`);
  check(await page.locator('#steps tbody tr', { hasText: 'NOT REACHED' }).count() === 0, 'no sub-step drawn as a top-level step not reached');
  // The for_each group: three elements, all succeeded; element 0 shown by default, its two
  // steps indented under it (and no other element's units drawn).
  const nav = page.locator('#steps tr.loop-nav[data-loop="orders"]');
  check((await text(nav)).includes('3 elements: 3 succeeded'), `the counts: ${await text(nav)}`);
  check(await nav.locator('button.cell').count() === 3, 'one cell per element');
  check(await nav.locator('button.cell[aria-pressed=true]').getAttribute('data-index') === '0', 'element 0 shown first');
  check(JSON.stringify(await drawn('orders[')) === JSON.stringify(['orders[0]', 'orders[0].charge', 'orders[0].ship']), `element 0's units: ${await drawn('orders[')}`);
  check(await row('orders[0].charge').getAttribute('class') === 'nested d2', 'the group\'s steps are indented under the element');
  // Element 2 by a click: the URL names it, its units are drawn with status, attempt, output.
  await nav.locator('button.cell[data-index="2"]').click();
  await row('orders[2].ship').waitFor();
  check(JSON.stringify(units()) === JSON.stringify(['orders[2]']), `the URL: ${page.url()}`);
  check(JSON.stringify(await drawn('orders[')) === JSON.stringify(['orders[2]', 'orders[2].charge', 'orders[2].ship']), `element 2's units: ${await drawn('orders[')}`);
  for (const key of ['orders[2]', 'orders[2].charge', 'orders[2].ship']) check(await statusOf(key) === 'SUCCEEDED', `${key} SUCCEEDED`);
  check(await cell(row('orders[2].charge'), 0) === 'charge', 'the step column names the sub-step');
  check(await cell(row('orders[2].charge'), 4) === '1', 'the attempt');
  check(await cell(row('orders[2].charge'), 5) === 'nest.charge', 'the task');
  check((await cell(row('orders[2].ship'), 7)).includes('"tracking":"T-ch-o-2"'), `ship's output: ${await cell(row('orders[2].ship'), 7)}`);
  check((await cell(row('orders[2]'), 7)).includes('"order":"o-2"'), 'the element\'s output');
  // The repeat: three iterations; iteration 2 by a click keeps element 2 of the other loop.
  const polls = page.locator('#steps tr.loop-nav[data-loop="poll"]');
  check((await text(polls)).includes('3 iterations: 3 succeeded'), `the iterations: ${await text(polls)}`);
  await polls.locator('button.cell[data-index="2"]').click();
  await polls.locator('button.cell[data-index="2"][aria-pressed=true]').waitFor();
  check(JSON.stringify(units()) === JSON.stringify(['orders[2]', 'poll[2]']), `both selections in the URL: ${page.url()}`);
  check(await statusOf('poll[2].check') === 'SUCCEEDED', 'iteration 2\'s check');
  check((await cell(row('poll[2].check'), 7)).includes('"state":"done"'), 'iteration 2 saw done');
  check(await row('poll[0].check').count() === 0, 'iteration 0 is not drawn');
  // The race: branch 1 won, branch 0 lost with its sleep cancelled.
  check(await row('decision.1').getAttribute('data-verdict') === 'won', 'branch 1 won');
  check(await row('decision.0').getAttribute('data-verdict') === 'lost', 'branch 0 lost');
  check(await statusOf('decision.0.deadline') === 'CANCELLED', 'the loser\'s sleep was cancelled');
  check(await statusOf('decision.1.quick') === 'SUCCEEDED', 'the winner\'s task');
  await row('orders').scrollIntoViewIfNeeded();
  await shot('console-nested');
  console.log('nested drawing: ok');
  // A reload keeps both selections.
  await page.reload();
  await row('orders[2].ship').waitFor();
  check(await page.locator('#steps tr.loop-nav[data-loop="orders"] button.cell[aria-pressed=true]').getAttribute('data-index') === '2', 'element 2 still selected');
  check(await row('poll[2].check').count() === 1, 'iteration 2 still shown');
  // The pager's field goes to an element too (element 1).
  await page.fill('#steps input.loop-goto[data-loop="orders"]', '1');
  await page.press('#steps input.loop-goto[data-loop="orders"]', 'Enter');
  await row('orders[1].charge').waitFor();
  check(JSON.stringify(units()) === JSON.stringify(['poll[2]', 'orders[1]']), `the field's pick in the URL: ${page.url()}`);
  console.log('selection kept: ok');
  // Loops nested: element 1 of `each`, then iteration 1 of the repeat in it; one `unit=`
  // names both levels, and a reload keeps them.
  await page.locator('#steps tr.loop-nav[data-loop="each"] button.cell[data-index="1"]').click();
  const inner = page.locator('#steps tr.loop-nav[data-loop="each[1].again"]');
  await inner.waitFor();
  check((await text(inner)).includes('2 iterations: 2 succeeded'), `the inner counts: ${await text(inner)}`);
  check(await row('each[1].again').getAttribute('data-kind') === 'repeat', 'the inner loop is a repeat');
  await inner.locator('button.cell[data-index="1"]').click();
  await row('each[1].again[1].step').waitFor();
  check(units().includes('each[1].again[1]') && !units().includes('each[1]'), `one value for both levels: ${page.url()}`);
  check(await statusOf('each[1].again[1].step') === 'SUCCEEDED', 'the inner step');
  check((await cell(row('each[1].again[1].step'), 7)) === '1', `the inner step's output: ${await cell(row('each[1].again[1].step'), 7)}`);
  await page.reload();
  await row('each[1].again[1].step').waitFor();
  check(await page.locator('#steps tr.loop-nav[data-loop="each"] button.cell[aria-pressed=true]').getAttribute('data-index') === '1', 'element 1 of each still selected');
  console.log('nested loops: ok');
  // A thousand elements: counted, a strip of 40 cells, one element's units drawn; the
  // pager's » goes to the last one.
  await page.goto(`${base}/ui/executions/${encodeURIComponent(many)}`);
  const big = page.locator('#steps tr.loop-nav[data-loop="many"]');
  await big.waitFor();
  check((await text(big)).includes('1000 elements: 1000 succeeded'), `the counts: ${await text(big)}`);
  check(await big.locator('button.cell').count() === 40, `a strip of 40: ${await big.locator('button.cell').count()}`);
  check(JSON.stringify(await drawn('many[')) === JSON.stringify(['many[0]', 'many[0].double']), `one element drawn: ${await drawn('many[')}`);
  await big.locator('button.page', { hasText: '»' }).click();
  await row('many[999].double').waitFor();
  check(JSON.stringify(units()) === JSON.stringify(['many[999]']), `the URL: ${page.url()}`);
  check(await big.locator('button.cell').first().getAttribute('data-index') === '960', 'the strip ends at the last element');
  check((await cell(row('many[999].double'), 7)).includes('1998'), 'the last element\'s output');
  console.log('a thousand elements: ok');
  check(errors.length === 0, `no script errors: ${errors.join('; ')}`);
} catch (e) {
  await shot('nested-failure').catch(() => {});
  console.error(e.message, '\nat', page.url(), '\nscript errors:', errors.join('; '));
  process.exitCode = 1;
} finally {
  await browser.close();
}
