#!/usr/bin/env bash
# tests/bench/recovery/run.sh - recovery latencies on this host, printed as a
# markdown table (also written to $BUILD/bench/recovery.md); part of
# `make bench`, the table is in docs/recovery.md.
#
# For each size N (BENCH_RECOVERY_SIZES, default "4 8 16"), with
# BENCH_RECOVERY_TRIALS (default 20) failures each:
#   crash  ftcomm-run --replace runs recovery_bench; every trial one rank
#          SIGKILLs itself; the others print when their collective failed
#          (detection), when their first collective at N-1 succeeded
#          (shrink); the replacement prints when it is ready to create its
#          communicator and every rank when its first collective at N
#          succeeded (grow: excludes process start and application state).
#   hang   the same with SIGSTOP and a collective timeout of
#          BENCH_RECOVERY_HANG_TIMEOUT_MS (default 1000): detection is the
#          stop to every survivor's collective returning.
#   restart-everything baseline: one rank SIGKILLs itself; the launcher
#          (ftcomm-run --grace 0) sees it exit, kills the others and ends;
#          the job is launched again (coordinator, process start,
#          bootstrap) until every rank finished its first collective. The
#          time from the kill to that collective.
set -uo pipefail
cd "$(dirname "$0")/../../.."
BUILD=${BUILD:-build/release}
RUN=$BUILD/bin/ftcomm-run
PROG=$BUILD/bench/recovery_bench
TRIALS=${BENCH_RECOVERY_TRIALS:-20}
SIZES=${BENCH_RECOVERY_SIZES:-4 8 16}
HANG_MS=${BENCH_RECOVERY_HANG_TIMEOUT_MS:-1000}
OUT=$BUILD/bench
mkdir -p "$OUT"
tmp=$(mktemp -d)
# BENCH_RECOVERY_KEEP=1 keeps the rank logs (the directory is printed).
if [ -n "${BENCH_RECOVERY_KEEP:-}" ]; then echo "recovery bench: logs in $tmp" >&2; else trap 'rm -rf "$tmp"' EXIT; fi
[ -x "$PROG" ] && [ -x "$RUN" ] || { echo "recovery bench: build $PROG and $RUN first (make bench)" >&2; exit 1; }
unset FTCOMM_FAULT
export FTCOMM_HEARTBEAT_MS=100 FTCOMM_CONNECT_TIMEOUT_MS=30000 FTCOMM_RECOVER_TIMEOUT_MS=30000

for n in $SIZES; do
  echo "recovery bench: $n ranks, crash ($TRIALS trials)" >&2
  FTCOMM_HEARTBEAT_TIMEOUT_MS=3000 FTCOMM_TIMEOUT_MS=20000 \
    timeout -k 5 600 "$RUN" -n "$n" --min-size $((n - 1)) --replace --replace-delay 0.05 --quiet \
    --job "bench-crash-$n" --dump-dir "$tmp/dumps" -- "$PROG" --mode crash --trials "$TRIALS" \
    >"$tmp/crash-$n.log" 2>&1 || echo "recovery bench: the crash run at $n ranks failed (see below)" >&2
  echo "recovery bench: $n ranks, hang ($TRIALS trials)" >&2
  FTCOMM_HEARTBEAT_TIMEOUT_MS=10000 FTCOMM_TIMEOUT_MS=$HANG_MS \
    timeout -k 5 900 "$RUN" -n "$n" --min-size $((n - 1)) --replace --replace-delay 0.05 --quiet \
    --job "bench-hang-$n" --dump-dir "$tmp/dumps" -- "$PROG" --mode hang --trials "$TRIALS" \
    >"$tmp/hang-$n.log" 2>&1 || echo "recovery bench: the hang run at $n ranks failed (see below)" >&2
  echo "recovery bench: $n ranks, restart-everything baseline ($TRIALS runs)" >&2
  for i in $(seq 1 "$TRIALS"); do
    # One rank dies; the launcher sees it exit, kills the others (--grace 0)
    # and ends; the job is started again and bootstraps.
    FTCOMM_TIMEOUT_MS=20000 timeout -k 5 120 "$RUN" -n "$n" --grace 0 --quiet --job "bench-base-$n" \
      --dump-dir "$tmp/dumps" -- "$PROG" --mode crash --trials 1 --gap 5 >>"$tmp/base-$n.log" 2>&1
    timeout -k 5 120 "$RUN" -n "$n" --quiet --job "bench-base-$n" --dump-dir "$tmp/dumps" -- \
      "$PROG" --mode baseline >>"$tmp/base-$n.log" 2>&1
  done
done

python3 - "$tmp" "$TRIALS" "$HANG_MS" $SIZES >"$OUT/recovery.md" <<'EOF'
import math, re, sys
tmp, trials, hang_ms, sizes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(x) for x in sys.argv[4:]]
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
            cur = {'t0': ts, 'notified': [], 'shrunk': [], 'ready': None, 'grown': []}
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
    det = [max(t['notified']) - t['t0'] for t in out if len(t['notified']) >= n - 1]
    shr = [max(t['shrunk']) - t['t0'] for t in out if len(t['shrunk']) >= n - 1]
    gro = [max(t['grown']) - t['ready'] for t in out if t['ready'] and len(t['grown']) >= n]
    return det, shr, gro

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

print('| ranks | measure | trials | median ms | p95 ms | target | met |')
print('|---|---|---|---|---|---|---|')
for n in sizes:
    det, shr, gro = trials_of('%s/crash-%d.log' % (tmp, n), n)
    hdet, _, _ = trials_of('%s/hang-%d.log' % (tmp, n), n)
    base = baseline('%s/base-%d.log' % (tmp, n), n)
    bmed, bp95 = stats(base)
    rows = [
        ('crash detected by every survivor', det, 100, 'median <= 100 ms'),
        ('hang detected by every survivor (timeout %d ms)' % hang_ms, hdet, hang_ms + 100,
         'median <= %d ms' % (hang_ms + 100)),
        ('shrink: failure to first collective at N-1', shr, 300 if n == 8 else None,
         'median <= 300 ms at 8 ranks; 10x under restart'),
        ('grow: joiner ready to first collective at N', gro, 1000 if n == 8 else None,
         'median <= 1 s at 8 ranks; 10x under restart'),
        ('restart everything: failure to first collective (baseline)', base, None, '-'),
    ]
    for name, xs, lim, target in rows:
        med, p95 = stats(xs)
        met = '-'
        if med is not None and lim is not None:
            met = 'yes' if med <= lim else 'no'
        if med is not None and name.startswith(('shrink', 'grow')) and bmed:
            ok10 = med * 10 <= bmed
            met = ('yes' if (lim is None or med <= lim) and ok10 else 'no') + ' (%.0fx)' % (bmed / med)
        print('| %d | %s | %d | %s | %s | %s | %s |' % (n, name, len(xs), fmt(med), fmt(p95), target, met))
EOF
cat "$OUT/recovery.md"
for f in "$tmp"/crash-*.log "$tmp"/hang-*.log; do
  if grep -q 'recovery_bench: \|failed first' "$f"; then
    echo "--- problems in $(basename "$f"):" >&2
    grep -E 'recovery_bench: |failed first' "$f" | head -5 >&2
  fi
done
