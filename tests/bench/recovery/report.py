#!/usr/bin/env python3
"""report.py DIR - the recovery benchmark's table (markdown) from the rank logs
run.sh left in DIR: crash-N.log, create-N.log (the same with joiners that call
ftc_comm_create when ready), hang-N.log, base-N.log, each made of
"BENCH <event> key=value ... ts=<CLOCK_REALTIME ns>" lines, and meta.txt (the
run's stamp, trials, hang timeout, sizes and kill point, as key=value lines).
Medians and p95 (nearest rank) per measure and size, under the run's stamp
(commit, host, date). run.sh prints it at the end of a run; with the logs kept
(BENCH_RECOVERY_KEEP=1) it prints the same table again.
    python3 tests/bench/recovery/report.py DIR"""
import math, os, re, sys
if len(sys.argv) != 2:
    sys.exit('usage: report.py DIR (the directory of rank logs that tests/bench/recovery/run.sh kept)')
tmp = sys.argv[1]
meta = {}
try:
    for line in open(os.path.join(tmp, 'meta.txt')):
        if '=' in line:
            k, v = line.rstrip('\n').split('=', 1)
            meta[k] = v
except FileNotFoundError:
    sys.exit('report.py: %s has no meta.txt: not a directory of tests/bench/recovery/run.sh' % tmp)
try:
    trials, hang_ms = int(meta['trials']), int(meta['hang_ms'])
    sizes = [int(x) for x in meta['sizes'].split()]
except (KeyError, ValueError):
    sys.exit('report.py: %s/meta.txt needs trials, hang_ms and sizes' % tmp)
pat = re.compile(r'BENCH (\w+)((?: \w+=\S+)*)')

def events(path):
    ev = []
    try:
        for line in open(path, errors='replace'):
            m = pat.search(line)
            if not m:
                continue
            kv = dict(x.split('=', 1) for x in m.group(2).split())
            ev.append((int(kv['ts']), m.group(1), kv))
    except FileNotFoundError:
        pass
    return sorted(ev, key=lambda e: e[0])

def trials_of(path, n):
    out, cur = [], None
    for ts, kind, kv in events(path):
        if kind in ('kill', 'stop'):
            cur = {'t0': ts, 'notified': [], 'shrunk': [], 'ready': None, 'grown': [], 'moved': []}
            out.append(cur)
        elif cur is None:
            continue
        elif kind == 'notified' and cur['ready'] is None:
            cur['notified'].append(ts)
        elif kind == 'shrunk' and cur['ready'] is None:
            cur['shrunk'].append(ts)
        elif kind == 'ready':
            cur['ready'] = ts
        elif kind == 'grown' and cur['ready'] is not None:
            cur['grown'].append(ts)
        elif kind == 'moved' and cur['ready'] is not None:
            cur['moved'].append(ts)
    det = [max(t['notified']) - t['t0'] for t in out if len(t['notified']) >= n - 1]
    shr = [max(t['shrunk']) - t['t0'] for t in out if len(t['shrunk']) >= n - 1]
    gro = [max(t['grown']) - t['ready'] for t in out if t['ready'] and len(t['grown']) >= n]
    # the grow from the last running rank's entry into the step boundary that
    # moved it: the part left once the application reached its boundary
    mov = [max(t['grown']) - max(t['moved']) for t in out
           if t['ready'] and len(t['grown']) >= n and len(t['moved']) >= n - 1]
    return det, shr, gro, mov

def baseline(path, n):
    res, t0, firsts = [], None, []
    for ts, kind, kv in sorted(events(path), key=lambda e: e[0]):
        if kind == 'kill':
            if t0 is not None and len(firsts) >= n:
                res.append(max(firsts) - t0)
            t0, firsts = ts, []
        elif kind == 'first' and kv.get('ok') == '1':
            firsts.append(ts)
    if t0 is not None and len(firsts) >= n:
        res.append(max(firsts) - t0)
    return res

def stats(xs):
    if not xs:
        return None, None
    xs = sorted(x / 1e6 for x in xs)
    mid = len(xs) // 2
    med = xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2
    return med, xs[max(0, math.ceil(0.95 * len(xs)) - 1)]

def fmt(v):
    return '-' if v is None else ('%.1f' % v if v < 100 else '%.0f' % v)

kill_at = meta.get('kill_at', 'step')
print('Measured at %s; %d trials per row.' % (meta.get('stamp', 'an unknown commit and host'), trials))
print()
print('The victim fails %s.' % ('at the end of its compute, as the others enter the next step'
                                if kill_at == 'step' else
                                'right after a collective; the others notice after their 1 ms of compute'))
print()
print('| ranks | measure | trials | median ms | p95 ms | target | met | times faster than restart |')
print('|---|---|---|---|---|---|---|---|')
for n in sizes:
    det, shr, gro, mov = trials_of('%s/crash-%d.log' % (tmp, n), n)
    hdet = trials_of('%s/hang-%d.log' % (tmp, n), n)[0]
    cgro = trials_of('%s/create-%d.log' % (tmp, n), n)[2]
    base = baseline('%s/base-%d.log' % (tmp, n), n)
    bmed, bp95 = stats(base)
    rows = [
        ('crash detected by every survivor', det, 100, 'median <= 100 ms'),
        ('hang detected by every survivor (timeout %d ms)' % hang_ms, hdet, hang_ms + 100,
         'median <= %d ms' % (hang_ms + 100)),
        ('shrink: failure to first collective at N-1', shr, 300 if n == 8 else None,
         'median <= 300 ms at 8 ranks, 10x faster than restart'),
        ('grow: joiner ready to first collective at N', gro, 1000 if n == 8 else None,
         'median <= 1 s at 8 ranks, 10x faster than restart'),
        ('grow, the joiner calling ftc_comm_create only when ready', cgro, 1000 if n == 8 else None,
         '(without ftc_comm_create_begin at its start)'),
        ('of the grow: last running rank at its step boundary to first collective at N', mov, None,
         '(the part after the wait for the application\'s step)'),
        ('restart everything: failure to first collective (baseline)', base, None, '-'),
    ]
    for name, xs, lim, target in rows:
        med, p95 = stats(xs)
        met, faster = '-', '-'
        if med is not None and lim is not None:
            met = 'yes' if med <= lim else 'no'
        if med is not None and name.startswith(('shrink', 'grow')) and bmed:
            faster = '%.1fx (10x: %s)' % (bmed / med, 'yes' if med * 10 <= bmed else 'no')
        elif med is not None and name.startswith('of the grow') and bmed:
            faster = '(%.1fx)' % (bmed / med)
        print('| %d | %s | %d | %s | %s | %s | %s | %s |' % (n, name, len(xs), fmt(med), fmt(p95),
                                                    target, met, faster))
