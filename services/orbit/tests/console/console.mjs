// Headless Chromium checks of the Orbit web console, run by services/orbit/tests/console.rs
// against a real `orbit dev` holding the scenario of tests/common/console.rs:
//   node console.mjs http://HOST:PORT SHOTS_DIR [--token TOKEN]
// Opens every page, clicks from the list to the failed execution and its failed attempt,
// sends a signal from the page, scrubs the signalled execution's history (time travel),
// migrates, resets the execution that failed in `check` (its worker fixed meanwhile) and
// forks another at a past seq, migrates three waiting executions with a batch (dry run,
// start, its page until COMPLETED, the list), dry-runs batches by query that signal,
// cancel and delete them, uses the keyboard, and saves screenshots
// into SHOTS_DIR.
// With --token the server checks identities: the page must ask for the token first.
// Exits non-zero (with the reason) on the first check that does not hold.

import { open } from './browser.mjs';

const [base, shots, flag, token] = process.argv.slice(2);
const { browser, page, errors, shot, check } = await open(shots);

try {
  if (flag === '--token') {
    // Auth on: the shell asks for a token before showing anything.
    await page.goto(`${base}/ui/executions`);
    await page.locator('#login').waitFor({ state: 'visible' });
    await shot('console-login');
    await page.fill('#login-token', 'not-a-token');
    await page.click('#login-form button[type=submit]');
    await page.locator('#login-error', { hasText: 'unknown token' }).waitFor();
    await page.fill('#login-token', token);
    await page.click('#login-form button[type=submit]');
    await page.locator('h1', { hasText: 'Executions' }).waitFor();
    await page.locator('main', { hasText: 'No executions match' }).waitFor();
    console.log('login: ok');
  } else {
    // The list, filtered to the failed executions through the form (the URL keeps it).
    await page.goto(`${base}/ui/executions`);
    await page.locator('#executions tbody tr').first().waitFor();
    check(await page.locator('#executions tbody tr').count() >= 7, 'the list shows every execution');
    // The counts by status of everything the filters match (CountExecutions).
    await page.locator('#counts a.count[data-status="FAILED"]').waitFor();
    const total = Number(await page.locator('#count-total').innerText());
    check(total >= 7, `the counts cover every execution: ${total}`);
    const failedCount = await page.locator('#counts a.count[data-status="FAILED"] b').innerText();
    check(failedCount === '2', `two failed executions counted: ${failedCount}`);
    await shot('console-list');
    await page.selectOption('select[name=status]', 'FAILED');
    await page.click('#filters button[type=submit]');
    await page.waitForURL(/status=FAILED/);
    await page.locator('#executions tbody tr', { hasText: 'demo-fail' }).waitFor();
    const failedIds = await page.locator('#executions tbody a[href^="/ui/executions/"]').allInnerTexts();
    check(JSON.stringify(failedIds.sort()) === '["demo-fail","demo-repair"]', `the failed executions only: ${failedIds}`);
    // The query bar: completion of an attribute name (Tab) and of a status name inside
    // the quotes (Enter), the query in the URL, its matches only; then a refused query
    // drawn with a caret under the column the server names.
    await page.goto(`${base}/ui/executions`);
    await page.locator('#executions tbody tr').first().waitFor();
    await page.click('#query');
    await page.keyboard.type('stat');
    await page.locator('#query-complete li', { hasText: 'status' }).waitFor();
    await page.keyboard.press('Tab');
    check(await page.inputValue('#query') === 'status ', `Tab takes the attribute: ${await page.inputValue('#query')}`);
    await page.keyboard.type("= 'FA");
    await page.locator('#query-complete li', { hasText: 'FAILED' }).waitFor();
    await page.keyboard.press('Enter');
    check(await page.inputValue('#query') === "status = 'FAILED'", `Enter takes the status: ${await page.inputValue('#query')}`);
    check(await page.locator('#query-complete').isHidden(), 'the suggestions close once one is taken');
    await page.keyboard.type(" AND execution_id STARTS_WITH 'demo-f'");
    await page.keyboard.press('Enter');
    await page.waitForURL(/[?&]q=/);
    await page.locator('#executions tbody tr', { hasText: 'demo-fail' }).waitFor();
    const queried = await page.locator('#executions tbody a[href^="/ui/executions/"]').allInnerTexts();
    check(JSON.stringify(queried) === '["demo-fail"]', `the query's match only: ${queried}`);
    await page.locator('#count-total', { hasText: /^1$/ }).waitFor();
    await shot('console-query');
    // A declared search attribute is offered too (console-metered declares `account`).
    await page.fill('#query', '');
    await page.keyboard.type('acc');
    await page.locator('#query-complete li', { hasText: 'account' }).waitFor();
    await page.keyboard.press('Escape');
    await page.fill('#query', "status = 'FAILED' AND created > 5");
    await page.keyboard.press('Enter');
    await page.locator('#query-error', { hasText: 'INVALID_QUERY' }).waitFor();
    const caret = (await page.locator('#query-caret').innerText()).split('\n');
    check(caret[1].indexOf('^') === caret[0].indexOf('5'), `the caret is under the refused value: ${JSON.stringify(caret)}`);
    await shot('console-query-error');
    console.log('query bar: ok');
    await page.goto(`${base}/ui/executions?status=FAILED`);
    await page.locator('#executions tbody tr', { hasText: 'demo-fail' }).waitFor();
    // The counts follow the filter: the failed ones only.
    await page.locator('#count-total', { hasText: /^2$/ }).waitFor();
    check(await page.locator('#counts a.count').count() === 1, 'one status counted under the FAILED filter');
    // Click through to it and its failed attempt on the timeline.
    await page.click('#executions a:has-text("demo-fail")');
    await page.waitForURL(/\/ui\/executions\/demo-fail/);
    await page.locator('#execution-error', { hasText: 'DEMO_FAILED' }).waitFor();
    const failedBars = page.locator('#gantt rect.b-bad');
    check(await failedBars.count() === 2, 'two failed attempts drawn');
    await failedBars.first().click();
    await page.locator('#attempt-error', { hasText: 'DEMO_FAILED' }).waitFor();
    check(/bar=/.test(page.url()), 'the selected bar is in the URL');
    await shot('console-execution-failed');
    // The retried one: a failed attempt, a retry wait, a successful attempt.
    await page.goto(`${base}/ui/executions/demo-flaky`);
    await page.locator('#gantt rect.b-ok').first().waitFor();
    check(await page.locator('#gantt rect.b-bad').count() === 1, 'one failed attempt before the success');
    check(await page.locator('#gantt rect.b-wait').count() >= 1, 'the retry wait is drawn');
    await shot('console-timeline');
    // A signal sent from the page completes the waiting execution.
    await page.goto(`${base}/ui/executions/demo-wait`);
    await page.locator('#awaits', { hasText: 'approve' }).waitFor();
    await page.fill('#act-name', 'approve');
    await page.fill('#act-payload', '{"by": "chromium"}');
    await page.click('#act-signal');
    await page.locator('#act-result', { hasText: 'Signal' }).waitFor();
    check(!(await page.locator('#act-result .error').count()), 'the signal was accepted');
    await page.locator('h1 .badge', { hasText: 'COMPLETED' }).waitFor();
    await shot('console-signalled');
    // Time travel on it: as of its `AwaitStarted` the first step had succeeded and the
    // approval (step 2) had not; back at the head it has; a `?at=` link opens at that seq.
    const steps = () => page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#steps tbody tr')]
      .map((r) => [r.cells[0].textContent.trim(), r.cells[3].textContent.trim()])));
    const shown = (seq) => page.locator(`#exec-body[data-seq="${seq}"][data-live=false]`).waitFor();
    const banner = async () => (await page.locator('#scrub-banner').innerText()).trim();
    await page.locator('#exec-body[data-live=true]').waitFor();
    check(await page.locator('#scrub-banner').isHidden(), 'no banner at the head');
    let states = await steps();
    check(states.work === 'SUCCEEDED' && states.approval === 'SUCCEEDED', `live: work and approval succeeded: ${JSON.stringify(states)}`);
    const events = await page.evaluate(() => [...document.querySelectorAll('#history tbody tr')]
      .map((r) => ({ seq: Number(r.dataset.seq), type: r.cells[2].textContent, step: r.cells[3].textContent })));
    const head = events[events.length - 1].seq;
    const waited = events.find((e) => e.type === 'AwaitStarted' && e.step === 'approval')?.seq;
    const approved = events.find((e) => e.type === 'StepSucceeded' && e.step === 'approval')?.seq;
    check(waited && approved && waited < approved && approved < head, `the history has the await then its success: ${JSON.stringify(events)}`);
    const asOfWait = async (how) => {
      check((await banner()).startsWith(`Viewing seq ${waited} of ${head} (`), `${how}: the banner shows seq ${waited} of ${head}: ${await banner()}`);
      check(page.url().includes(`at=${waited}`), `${how}: the URL keeps the seq`);
      states = await steps();
      check(states.work === 'SUCCEEDED', `${how}: step 1 succeeded: ${JSON.stringify(states)}`);
      check(states.approval !== 'SUCCEEDED', `${how}: step 2 not yet: ${JSON.stringify(states)}`);
      check((await page.locator('h1 .badge').innerText()) === 'RUNNING', `${how}: the execution was running`);
      check(await page.locator('#awaits', { hasText: 'approve' }).count() === 1, `${how}: the await was pending`);
    };
    await page.fill('#scrub-range', String(waited));
    await shown(waited);
    await asOfWait('scrubbed');
    check(await page.locator('#gantt-cursor').count() === 1, 'the timeline marks the seq');
    // A query from the page answers as of the seq.
    await page.fill('#act-name', 'mode');
    await page.click('#act-query');
    await page.locator('#act-result', { hasText: 'asOfSeq' }).waitFor();
    check(new RegExp(`"asOfSeq": "?${waited}"?`).test(await page.locator('#act-result').innerText()), 'the query ran as of the seq');
    await page.evaluate(() => window.scrollTo(0, 0)); // the sticky banner in its place
    await shot('console-time-travel');
    // The → key and the previous-event button move one event; a click on an event picks it.
    await page.evaluate(() => document.activeElement?.blur());
    await page.keyboard.press('ArrowRight');
    await shown(waited + 1);
    await page.click('#scrub-prev');
    await shown(waited);
    await page.click('#history-details summary');
    await page.click(`#history tr[data-seq="${approved}"] td:nth-child(3)`);
    await shown(approved);
    check((await banner()).startsWith(`Viewing seq ${approved} of ${head}`), `the banner follows the click: ${await banner()}`);
    check((await steps()).approval === 'SUCCEEDED', 'as of its success, step 2 succeeded');
    // Back to live: no banner, no seq in the URL, step 2 succeeded.
    await page.click('#scrub-live');
    await page.locator(`#exec-body[data-seq="${head}"][data-live=true]`).waitFor();
    check(await page.locator('#scrub-banner').isHidden(), 'no banner back at the head');
    check(!page.url().includes('at='), 'the URL is live again');
    states = await steps();
    check(states.work === 'SUCCEEDED' && states.approval === 'SUCCEEDED', `back to live: step 2 succeeded: ${JSON.stringify(states)}`);
    // The link opens at the seq.
    await page.goto(`${base}/ui/executions/demo-wait?at=${waited}`);
    await shown(waited);
    await asOfWait('opened by link');
    console.log('time travel: ok');
    // Keyboard: 1 → list, j selects the first row, Enter opens it.
    await page.locator('body').click({ position: { x: 5, y: 5 } });
    await page.keyboard.press('1');
    await page.locator('#executions tbody tr').first().waitFor();
    await page.keyboard.press('j');
    await page.keyboard.press('Enter');
    await page.waitForURL(/\/ui\/executions\/[^/?]+/);
    await page.locator('#gantt').waitFor();
    // Every other page.
    for (const [path, selector, text, name] of [
      ['/ui/workflows', '#workflows', 'console-demo', 'console-workflows'],
      ['/ui/workflows?name=console-demo', '#source', 'demo.work', null],
      ['/ui/workers', '#workers', 'console-worker', 'console-workers'],
      ['/ui/queues', '#queues', 'demo.lonely', 'console-queues'],
      ['/ui/schedules', '#schedules', 'demo-hourly', 'console-schedules'],
      ['/ui/schedules?id=demo-hourly', '#next-fires li', '', null],
      ['/ui/cluster', '#nodes', 'dev', 'console-cluster'],
    ]) {
      await page.goto(`${base}${path}`);
      await page.locator(selector, { hasText: text }).first().waitFor();
      if (name) await shot(name);
      console.log(`${path}: ok`);
    }
    // Migrate the sleeping execution: v3 (the completed `work` renamed) is UNSAFE in the
    // dry run's diff; v2 (a step added) is safe and migrates after the confirmation.
    await page.goto(`${base}/ui/executions/demo-sleep`);
    await page.fill('#mig-version', '3');
    await page.click('#mig-dry');
    await page.locator('#mig-diff tr.unsafe', { hasText: 'work' }).first().waitFor();
    check((await page.locator('#mig-verdict').innerText()).includes('UNSAFE'), 'v3 is unsafe for it');
    await page.locator('#mig-diff').scrollIntoViewIfNeeded();
    await shot('console-migrate-diff');
    await page.fill('#mig-version', '2');
    await page.click('#mig-dry');
    await page.locator('#mig-verdict', { hasText: 'safe: a migration would be recorded' }).waitFor();
    check(await page.locator('#mig-diff tr.unsafe').count() === 0, 'v2 is safe for it');
    page.once('dialog', (d) => d.accept());
    await page.click('#mig-run');
    await page.locator('#mig-verdict', { hasText: 'migrated' }).waitFor();
    await page.reload();
    await page.locator('h1 .muted', { hasText: 'v2' }).waitFor();
    console.log('migrate: ok');
    // Reset the execution that failed in `check` (the worker has been fixed since): "reset
    // here" on the step's row picks the point; the dry run's plan keeps `prepare` and runs
    // `check` again from the seq before `check` first started; v3 (the kept `prepare`
    // renamed) shows UNSAFE in its diff; v2 (a step added) is safe and shows its diff.
    await page.goto(`${base}/ui/executions/demo-repair`);
    await page.locator('#execution-error', { hasText: 'DEMO_BUG' }).waitFor();
    await page.locator('#exec-body[data-live=true]').waitFor();
    check(await page.locator('#execution-run').innerText() === '1', 'run 1 failed');
    const repairEvents = await page.evaluate(() => [...document.querySelectorAll('#history tbody tr')]
      .map((r) => ({ seq: Number(r.dataset.seq), type: r.cells[2].textContent, step: r.cells[3].textContent })));
    const beforeCheck = repairEvents.find((e) => e.step === 'check').seq - 1;
    check(await page.locator('#steps a.reset-here').count() === 2, 'both steps that ran have "reset here"');
    await page.click('#steps a.reset-here[data-step="check"]');
    check(await page.inputValue('#rst-point') === 'step:check', 'the link picked the step');
    await page.fill('#rst-reason', 'the check worker was fixed');
    await page.fill('#rst-version', '3');
    await page.click('#rst-dry');
    await page.locator('#rst-plan').waitFor();
    check((await page.locator('#rst-migrate').innerText()).includes('v1 → v3: UNSAFE'), 'to v3: UNSAFE');
    await page.locator('#rst-diff tr.unsafe', { hasText: 'prepare' }).waitFor();
    await page.fill('#rst-version', '2');
    await page.click('#rst-dry');
    await page.locator('#rst-plan').waitFor();
    check(await page.locator('#rst-through').innerText() === String(beforeCheck), `through the seq before check started (${beforeCheck})`);
    check((await page.locator('#rst-kept').innerText()).trim() === 'prepare', `prepare kept: ${await page.locator('#rst-kept').innerText()}`);
    check((await page.locator('#rst-again').innerText()).trim() === 'check (started after the point)', `check runs again: ${await page.locator('#rst-again').innerText()}`);
    check((await page.locator('#rst-signals').innerText()).trim() === '0', 'no signals after the point');
    check((await page.locator('#rst-migrate').innerText()).includes('v1 → v2: safe'), 'to v2: safe');
    await page.locator('#rst-diff tr.safe', { hasText: 'notify' }).waitFor();
    check(await page.locator('#rst-diff tr.unsafe').count() === 0, 'v2 has no unsafe difference');
    check(await page.inputValue('#rst-point') === 'step:check', 'the plan did not refresh the form away');
    check((await page.locator('#fork-run').innerText()) === `Fork at seq ${beforeCheck}…`, 'the fork defaults to the plan\'s seq');
    await page.locator('#restore-title').scrollIntoViewIfNeeded();
    await shot('console-reset-plan');
    // Reset (after the confirmation): the page shows run 2, on v2, which completes.
    page.once('dialog', (d) => d.accept());
    await page.click('#rst-run');
    await page.locator('#execution-run', { hasText: /^2$/ }).waitFor();
    check((await page.locator('#exec-notice').innerText()).includes('goes on in run 2'), 'the page says what the reset did');
    await page.locator('h1 .muted', { hasText: 'v2' }).waitFor();
    await page.locator('h1 .badge', { hasText: 'COMPLETED' }).waitFor();
    states = await steps();
    check(states.prepare === 'SUCCEEDED' && states.check === 'SUCCEEDED' && states.notify === 'SUCCEEDED', `run 2 completed every step: ${JSON.stringify(states)}`);
    check(await page.locator('#history tbody tr', { hasText: 'RunRestored' }).count() === 1, 'run 2 begins with the restored prefix');
    console.log('reset: ok');
    // Fork the sleeping demo as of its `work` success: scrubbed there, reset and fork stay
    // usable while the actions on the execution now (usable at the head: it runs) are
    // disabled; the fork's id is asked (prefilled `<id>-fork-<seq>`) and the answer links
    // to the new execution, which goes on from that seq to the same sleep.
    await page.goto(`${base}/ui/executions/demo-sleep`);
    await page.locator('#exec-body[data-live=true]').waitFor();
    const writers = ['#act-signal', '#act-cancel', '#mig-run'];
    for (const sel of writers) check(await page.locator(sel).isEnabled(), `live: ${sel} enabled`);
    const sleepEvents = await page.evaluate(() => [...document.querySelectorAll('#history tbody tr')]
      .map((r) => ({ seq: Number(r.dataset.seq), type: r.cells[2].textContent, step: r.cells[3].textContent })));
    const workDone = sleepEvents.find((e) => e.type === 'StepSucceeded' && e.step === 'work').seq;
    check(workDone < sleepEvents[sleepEvents.length - 1].seq, 'the work step succeeded before the head');
    await page.fill('#scrub-range', String(workDone));
    await shown(workDone);
    check(await page.inputValue('#rst-point') === `seq:${workDone}`, 'the point is the seq shown');
    for (const sel of writers) check(await page.locator(sel).isDisabled(), `scrubbed: ${sel} disabled`);
    for (const sel of ['#rst-dry', '#rst-run', '#fork-run']) check(await page.locator(sel).isEnabled(), `scrubbed: ${sel} enabled`);
    check((await page.locator('#fork-run').innerText()) === `Fork at seq ${workDone}…`, 'the fork is at the seq shown');
    const forkId = `demo-sleep-fork-${workDone}`;
    let asked = null;
    page.once('dialog', (d) => { asked = d.defaultValue(); d.accept(d.defaultValue()); });
    await page.click('#fork-run');
    await page.locator('#fork-link', { hasText: forkId }).waitFor();
    check(asked === forkId, `the new id is prefilled: ${asked}`);
    check((await page.locator('#fork-verdict').innerText()).startsWith('Forked'), 'the fork was created');
    await page.click('#fork-link');
    await page.waitForURL(new RegExp(`/ui/executions/${forkId}$`));
    await page.locator('#execution-id', { hasText: forkId }).waitFor();
    await page.locator('#exec-body[data-live=true]').waitFor();
    check(await page.locator('#history tbody tr', { hasText: 'RunRestored' }).count() === 1, 'the fork begins with the copied prefix');
    await page.locator('h3', { hasText: 'Timers' }).waitFor(); // it went on to the sleep
    check((await page.locator('h1 .badge').innerText()) === 'RUNNING', 'the fork runs');
    console.log('fork: ok');
    // Versions registered out of order: the latest is the highest, marked in the list and
    // shown by default on the workflow's page.
    await page.goto(`${base}/ui/workflows`);
    const latestRow = page.locator('#workflows tr', { hasText: 'console-versions' }).filter({ has: page.locator('.badge.latest') });
    await latestRow.first().waitFor();
    check(await latestRow.count() === 1, 'one latest version of console-versions');
    check((await latestRow.first().innerText()).includes('2.0.0'), 'the latest is 2.0.0, not the last registered 1.2.1');
    await page.goto(`${base}/ui/workflows?name=console-versions`);
    await page.locator('#source', { hasText: 'v2-task' }).waitFor();
    check((await page.locator('p', { hasText: 'Versions:' }).locator('b').innerText()) === 'v2.0.0', 'the latest version is the one shown');
    console.log('latest version: ok');
    // A batch (issue 26): from console-batch's page, "new batch…" opens the form with the
    // workflow and its latest version as the target. A migrate dry run answers each of the
    // three waiting v1 executions safe (v1 → v2) and the total; a reset dry run answers each
    // one's plan; an unregistered target is refused. Started, the batch's page refreshes
    // until it is COMPLETED with every item SUCCEEDED, and the list shows it.
    const batchIds = ['batch-a', 'batch-b', 'batch-c'];
    await page.goto(`${base}/ui/workflows?name=console-batch`);
    await page.click('#new-batch-link');
    await page.waitForURL(/\/ui\/batches\?new=1&workflow=console-batch&to=2$/);
    await page.locator('#new-batch[open]').waitFor();
    check(await page.inputValue('#nb-workflow') === 'console-batch', 'the form names the workflow');
    check(await page.inputValue('#nb-to') === '2', 'the target is the latest version');
    check(await page.locator('#nb-form input[name=nb-status]:checked').evaluateAll((l) => l.map((i) => i.value).join()) === 'RUNNING', 'RUNNING is the default status');
    await page.locator('#batch-list', { hasText: 'No batches yet' }).waitFor();
    await page.fill('#nb-version', '1');
    await page.fill('#nb-to', '9');
    await page.click('#nb-dry');
    await page.locator('#nb-result .error', { hasText: 'WORKFLOW_NOT_FOUND' }).waitFor();
    await page.check('#nb-reset');
    await page.fill('#nb-step', 'wait');
    await page.click('#nb-dry');
    await page.locator('#dry-verdict', { hasText: 'reset to before wait' }).waitFor();
    const planned = await page.locator('#dry-items tbody tr').evaluateAll((rows) => rows.map((r) => [r.dataset.id, r.dataset.answer, r.cells[2].textContent]));
    check(planned.length === 3 && planned.every(([id, a, what], i) => id === batchIds[i] && a === 'safe' && what.includes('kept prepare')), `each reset plan keeps prepare: ${JSON.stringify(planned)}`);
    await page.check('#nb-migrate');
    await page.fill('#nb-to', '2');
    await page.fill('#nb-reason', 'v2 adds the done step');
    await page.click('#nb-dry');
    await page.locator('#dry-verdict', { hasText: 'migrate to v2' }).waitFor();
    check(await page.locator('#dry-total').innerText() === '3', `the total: ${await page.locator('#dry-total').innerText()}`);
    const counted = await Promise.all(['#dry-safe', '#dry-unsafe', '#dry-refused'].map((sel) => page.locator(sel).innerText()));
    check(counted.join() === '3,0,0', `3 safe, 0 UNSAFE, 0 refused: ${counted}`);
    const answers = await page.locator('#dry-items tbody tr').evaluateAll((rows) => rows.map((r) => [r.dataset.id, r.dataset.answer, r.cells[2].textContent]));
    check(answers.length === 3 && answers.every(([id, a, what], i) => id === batchIds[i] && a === 'safe' && what.includes('v1 → v2')), `each execution answered safe, v1 → v2: ${JSON.stringify(answers)}`);
    check(await page.locator('#dry-items a[href="/ui/executions/batch-a"]').count() === 1, 'each answer links to its execution');
    await page.locator('#nb-result').scrollIntoViewIfNeeded();
    await shot('console-batch-dry-run');
    let confirmed = '';
    page.once('dialog', (d) => { confirmed = d.message(); d.accept(); });
    await page.click('#nb-start');
    await page.waitForURL(/\/ui\/batches\/batch-[^/?]+$/);
    check(confirmed.includes('migrate to v2') && confirmed.includes('RUNNING executions of console-batch v1'), `Start asked first: ${confirmed}`);
    const batchId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop());
    await page.locator('#batch[data-state=COMPLETED]').waitFor(); // the page refreshes while it runs
    check(await page.locator('#batch-state').innerText() === 'COMPLETED', 'the badge says COMPLETED');
    const counters = await Promise.all(['#batch-done', '#batch-total', '#batch-succeeded', '#batch-failed', '#batch-skipped'].map((sel) => page.locator(sel).innerText()));
    check(counters.join() === '3,3,3,0,0', `done == total == 3, all succeeded: ${counters}`);
    check(await page.locator('#batch-progress').getAttribute('aria-valuenow') === '3', 'the progress bar is full');
    check((await page.locator('#batch-selector').innerText()).startsWith('console-batch v1, RUNNING'), 'the selector shown');
    check(await page.locator('#batch-action').innerText() === 'migrate to v2', 'the action shown');
    check(await page.locator('#batch-reason').innerText() === 'v2 adds the done step', 'the reason shown');
    check(await page.locator('#batch-cancel').count() === 0, 'no Cancel once completed');
    const outcomes = await page.locator('#batch-items-table tbody tr').evaluateAll((rows) => rows.map((r) => [r.cells[0].textContent.trim(), r.dataset.outcome]));
    check(JSON.stringify(outcomes) === JSON.stringify(batchIds.map((id) => [id, 'SUCCEEDED'])), `every item SUCCEEDED: ${JSON.stringify(outcomes)}`);
    await page.evaluate(() => window.scrollTo(0, 0));
    await shot('console-batch');
    // An item links to its execution, now on v2; back, "failed only" lists none.
    await page.click('#batch-items-table a:has-text("batch-b")');
    await page.waitForURL(/\/ui\/executions\/batch-b$/);
    await page.locator('h1 .muted', { hasText: 'v2' }).waitFor();
    await page.goBack();
    await page.locator('#batch[data-state=COMPLETED]').waitFor();
    await page.check('#only-failed');
    await page.waitForURL(/failed=1/);
    await page.locator('#batch-items', { hasText: 'No failed execution.' }).waitFor();
    // The list (nav entry, key 7): the batch, completed, 3/3, newest first.
    await page.click('nav a[data-page=batches]');
    await page.waitForURL(/\/ui\/batches$/);
    const row = page.locator('#batches tbody tr').first();
    await row.waitFor();
    check(await row.getAttribute('data-state') === 'COMPLETED', 'the list shows it COMPLETED');
    const listed = await row.innerText();
    check(listed.includes(batchId) && listed.includes('console-batch') && listed.includes('migrate to v2') && listed.includes('3/3') && listed.includes('3 succeeded, 0 failed, 0 skipped'), `the list row: ${listed}`);
    await page.locator('body').click({ position: { x: 5, y: 5 } });
    await page.keyboard.press('1');
    await page.waitForURL(/\/ui\/executions$/);
    await page.keyboard.press('7');
    await page.waitForURL(/\/ui\/batches$/);
    await page.locator('#batches tbody tr', { hasText: batchId }).waitFor();
    console.log('batch: ok');
    // Batches by query (issue 28): the form selects by a query alone and signals, cancels,
    // terminates or deletes; the dry runs answer each execution without changing any.
    await page.goto(`${base}/ui/batches?new=1`);
    await page.locator('#new-batch[open]').waitFor();
    await page.fill('#nb-workflow', '');
    await page.fill('#nb-query', "workflow = 'console-batch'");
    await page.check('#nb-signal');
    await page.fill('#nb-signal-name', 'go');
    await page.fill('#nb-signal-payload', '{"ok": ');
    await page.click('#nb-dry');
    await page.locator('#nb-result .error', { hasText: 'not JSON' }).waitFor();
    await page.fill('#nb-signal-payload', '{"ok": true}');
    const dryAnswers = async (what) => {
      await page.click('#nb-dry');
      await page.locator('#dry-verdict', { hasText: what }).waitFor();
      return page.locator('#dry-items tbody tr').evaluateAll((rows) => rows.map((r) => [r.dataset.id, r.dataset.answer, r.cells[2].textContent.trim()]));
    };
    const signalled = await dryAnswers('signal go {"ok":true}');
    check(JSON.stringify(signalled) === JSON.stringify(batchIds.map((id) => [id, 'safe', 'would be: signal go {"ok":true}'])), `each waiting execution would be signalled: ${JSON.stringify(signalled)}`);
    await page.check('#nb-cancel');
    await page.fill('#nb-reason', 'no longer needed');
    const cancelled = await dryAnswers('cancel (no longer needed)');
    check(cancelled.length === 3 && cancelled.every(([id, a], i) => id === batchIds[i] && a === 'safe'), `each would be cancelled: ${JSON.stringify(cancelled)}`);
    await page.check('#nb-delete');
    const deleted = await dryAnswers('delete (finished executions)');
    check(deleted.length === 3 && deleted.every(([, a]) => a === 'EXECUTION_NOT_FINISHED'), `an open execution is not deleted: ${JSON.stringify(deleted)}`);
    await page.fill('#nb-query', "workflow = ");
    await page.click('#nb-dry');
    await page.locator('#nb-result .error', { hasText: 'INVALID_QUERY' }).waitFor();
    console.log('batch by query: ok');
    // Flow control (issue 27): a step that names a rate limit the server does not define
    // waits on it, and says so; the Rate limits page (key 8) defines it.
    await page.goto(`${base}/ui/executions/demo-metered`);
    const waiting = page.locator('#pending-tasks tr[data-unit=meter][data-waiting=RATE_LIMIT]');
    await waiting.waitFor();
    const waitText = await waiting.innerText();
    check(waitText.includes('rate limit') && waitText.includes('console-api') && waitText.includes('console-metered.meter/acme'), `the waiting task: ${waitText}`);
    check(waitText.includes('pool=console'), `the worker labels it needs: ${waitText}`);
    await shot('console-flow-waiting');
    await page.locator('body').click({ position: { x: 5, y: 5 } });
    await page.keyboard.press('8');
    await page.waitForURL(/\/ui\/rate-limits$/);
    await page.fill('#rl-name', 'console-api');
    await page.fill('#rl-limit', '5');
    await page.fill('#rl-per', '1m');
    await page.click('#rl-set');
    await page.locator('#rl-verdict', { hasText: 'console-api' }).waitFor();
    await page.locator('#rate-limits tr[data-name="console-api"]').waitFor();
    await shot('console-rate-limits');
    console.log('rate limits: ok');
    // Trigger the schedule from its page: an execution of it appears.
    await page.goto(`${base}/ui/schedules`);
    await page.click('button[data-act=TriggerSchedule]');
    await page.locator('#act-result a').waitFor();
    await page.goto(`${base}/ui/executions?schedule=demo-hourly`);
    await page.locator('#executions tbody tr').first().waitFor();
  }
  check(errors.length === 0, `no script errors: ${errors.join('; ')}`);
  console.log('console pages: ok');
} catch (e) {
  await shot('failure').catch(() => {});
  console.error(e.message, '\nat', page.url(), '\nscript errors:', errors.join('; '));
  process.exitCode = 1;
} finally {
  await browser.close();
}
