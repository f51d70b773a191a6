#!/usr/bin/env python3
"""Per-hop timestamps of every step from the stored rows (task_queue, inbox, history).

usage: trace_hops.py sqlite PATH | trace_hops.py pg URL

A result that took the inbox route has a `complete` entry (written by the frontend, applied
by the owner); a result handed to the owner directly (issue 14) has none, and the owner's
commit is the task row's `updated_at` (claimed -> done in that commit)."""
import sys, subprocess, statistics, sqlite3
Q = """
SELECT t.execution_id, t.id, t.created_at, t.claimed_at, i.created_at, ev.timestamp, i.done_at,
       d.timestamp, x.created_at, x.closed_at, t.updated_at
FROM task_queue t
JOIN executions x ON x.execution_id = t.execution_id
LEFT JOIN inbox i ON i.kind = 'complete' AND i.token = t.token
LEFT JOIN history_events ev ON ev.execution_id = t.execution_id AND ev.event_type = 'StepSucceeded' AND ev.step = t.unit_key
LEFT JOIN history_events d ON d.execution_id = t.execution_id AND d.event_type = 'StepDispatched' AND d.step = t.unit_key
WHERE t.state IN ('done','cancelled') AND t.token IS NOT NULL
ORDER BY t.execution_id, t.id
"""
kind, where = sys.argv[1], sys.argv[2]
if kind == 'sqlite':
    rows = sqlite3.connect(where).execute(Q).fetchall()
else:
    out = subprocess.run(['psql', where, '-AtF,', '-c', Q], capture_output=True, text=True, check=True).stdout
    rows = [tuple(None if v == '' else (int(v) if v.lstrip('-').isdigit() else v) for v in l.split(',')) for l in out.splitlines() if l]
by = {}
for r in rows:
    by.setdefault(r[0], []).append(r)
hops = {k: [] for k in ['start: created -> task1 queued', 'queued -> claimed (NOTIFY/wake + claim commit)',
        'claimed -> result written (push, worker, result write)', 'result written -> owner pass (NOTIFY/wake)',
        'claimed -> owner pass (push, worker, result handed over)',
        'owner pass -> applied (pass + commit)', 'applied -> next task queued', 'last applied -> closed',
        'StepDispatched pass - claimed (not on the path)', 'total created -> closed']}
for eid, ts in by.items():
    if any(v is None for t in ts for v in (t[2], t[3], t[5])):
        continue
    hops['start: created -> task1 queued'].append(ts[0][2] - ts[0][8])
    for i, t in enumerate(ts):
        _, _, q, c, r, p, a, d, cr, cl, up = t
        hops['queued -> claimed (NOTIFY/wake + claim commit)'].append(c - q)
        if r is None:  # handed to the owner directly
            a = up
            hops['claimed -> owner pass (push, worker, result handed over)'].append(p - c)
        else:
            hops['claimed -> result written (push, worker, result write)'].append(r - c)
            hops['result written -> owner pass (NOTIFY/wake)'].append(p - r)
        hops['owner pass -> applied (pass + commit)'].append(a - p)
        if d is not None: hops['StepDispatched pass - claimed (not on the path)'].append(d - c)
        if i + 1 < len(ts):
            hops['applied -> next task queued'].append(ts[i + 1][2] - a)
    direct = sum(1 for t in ts if t[4] is None)
    hops.setdefault('results handed over directly (count)', []).append(direct)
    if ts[-1][9] is not None:
        last = ts[-1][6] if ts[-1][6] is not None else ts[-1][10]
        hops['last applied -> closed'].append(ts[-1][9] - last)
        hops['total created -> closed'].append(ts[-1][9] - ts[0][8])
print(f"executions traced: {len(by)}")
for k, v in hops.items():
    if v:
        v.sort()
        print(f"| {k} | {statistics.median(v):.1f} | {statistics.mean(v):.2f} | {v[int(len(v)*0.9)]} |")
