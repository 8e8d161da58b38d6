#!/usr/bin/env bash
# tests/bench/recovery/windows.sh - where a shrink's time goes, from the
# kernel's scheduler: one crash run of the recovery benchmark (as run.sh's)
# under `perf record` of the sched_switch and signal_generate tracepoints,
# then, over the windows from each victim's SIGKILL to the last survivor's
# first collective at N-1:
#   - the victim's own death: from its SIGKILL to the first thread its exit
#     wakes (its sockets closing; the kernel tears down the address space
#     before it closes files), the part of the window no library can shorten,
#     and the restart-everything baseline pays it as well;
#   - the CPU time of every kind of thread (by name: the ranks' ftc-progress,
#     ftc-member, ftc-watchdog, ... and the launcher's coordinator), summed
#     over all processes and averaged per window, against the 2 x window
#     that two CPUs offer: near it, the window is CPU-bound and only less
#     work makes it shorter; well under it, it is a chain of wake-ups.
#
# With MODE grow (third argument; default shrink) the windows are the grows:
# from each replacement's "ready" to the last rank's first collective at N
# (the BENCH times, CLOCK_REALTIME, taken to the trace's CLOCK_MONOTONIC by
# their offset when the run ends), and no victim's death is printed.
#
# Usage: tests/bench/recovery/windows.sh [RANKS] [TRIALS] [shrink|grow]   (default 16 10 shrink)
# Needs perf with tracepoint access (root, or kernel.perf_event_paranoid
# <= -1) and `make bench-bins`. Not part of `make bench` (perf is not).
# docs/performance/recovery.md, "Where the CPU goes in a shrink", has its
# numbers.
set -uo pipefail
cd "$(dirname "$0")/../../.."
n=${1:-16}
trials=${2:-10}
mode=${3:-shrink}
case $mode in shrink|grow) ;; *) echo "windows.sh: MODE must be shrink or grow, not '$mode'" >&2; exit 2;; esac
BUILD=${BUILD:-build/release}
RUN=$BUILD/bin/ftcomm-run
PROG=$BUILD/bench/recovery_bench
case $n in ''|*[!0-9]*) echo "windows.sh: RANKS must be a number of ranks >= 3, not '$n'" >&2; exit 2;; esac
case $trials in ''|*[!0-9]*) echo "windows.sh: TRIALS must be a positive number, not '$trials'" >&2; exit 2;; esac
[ "$n" -ge 3 ] && [ "$trials" -ge 1 ] || { echo "windows.sh: need RANKS >= 3 and TRIALS >= 1" >&2; exit 2; }
[ -x "$PROG" ] && [ -x "$RUN" ] || { echo "windows.sh: build $PROG and $RUN first (make bench-bins)" >&2; exit 1; }
command -v perf >/dev/null || { echo "windows.sh: needs perf (linux-perf), not found" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! perf record -q -a -e sched:sched_switch -o "$tmp/probe.data" -- true 2>"$tmp/probe.err"; then
  echo "windows.sh: perf cannot record sched tracepoints here (root, or kernel.perf_event_paranoid <= -1): $(head -c 300 "$tmp/probe.err")" >&2
  exit 1
fi
unset FTCOMM_FAULT
export FTCOMM_HEARTBEAT_MS=100 FTCOMM_CONNECT_TIMEOUT_MS=30000 FTCOMM_RECOVER_TIMEOUT_MS=30000
export FTCOMM_HEARTBEAT_TIMEOUT_MS=3000 FTCOMM_TIMEOUT_MS=20000
echo "windows.sh: $n ranks, $trials crashes under perf" >&2
perf record -q -a -k 1 -e sched:sched_switch,sched:sched_wakeup,signal:signal_generate -o "$tmp/sched.data" -- \
  timeout -k 5 300 "$RUN" -n "$n" --min-size $((n - 1)) --replace --replace-delay 0.05 --quiet \
  --job "windows-$n" --dump-dir "$tmp/dumps" -- "$PROG" --mode crash --trials "$trials" \
  >"$tmp/run.log" 2>&1 || { echo "windows.sh: the crash run failed:" >&2; tail -5 "$tmp/run.log" >&2; exit 1; }
perf script -i "$tmp/sched.data" -F pid,tid,cpu,time,event,trace --ns >"$tmp/sched.txt" 2>/dev/null
# CLOCK_REALTIME - CLOCK_MONOTONIC (perf -k 1), for the BENCH times of grow windows
off=$(python3 -c 'import time; print(time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC))')
python3 - "$tmp/run.log" "$tmp/sched.txt" "$n" "$mode" "$off" <<'PY'
import collections, re, statistics, sys

log, trace, n, mode, off = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
# BENCH lines: kill (victim's wall clock just before raise(SIGKILL)), shrunk,
# ready (a replacement), grown. The ranks write their lines at exit
# (recovery_bench.c): order by time.
events = []
for line in open(log):
    m = re.search(r'BENCH (kill|shrunk|ready|grown) .*ts=(\d+)', line)
    if m:
        events.append((int(m.group(2)), m.group(1)))
events.sort()
kills = []
for t, kind in events:
    if kind == 'kill':
        kills.append({'ts': t, 'end': None})
    elif kind == 'shrunk' and kills:
        kills[-1]['end'] = max(kills[-1]['end'] or 0, t)
sigs, switches, wakes = [], [], []
tgid = {}  # thread -> process, from the events each thread ran
for line in open(trace):
    p = line.split()
    if len(p) < 5 or '/' not in p[0]:
        continue
    pid, tid = p[0].split('/')
    tgid[int(tid)] = int(pid)
    t = float(p[2].rstrip(':'))
    if 'signal_generate' in line:
        if 'sig=9 ' in line and 'comm=recovery_bench' in line:
            victim = int(re.search(r' pid=(\d+)', line).group(1))
            sigs.append((t, victim))
        continue
    m = re.search(r'prev_comm=(.*?) prev_pid=(\d+) .*==> next_comm=(.*?) next_pid=(\d+)', line)
    if m:
        switches.append((t, int(p[1].strip('[]')), m.group(3)))
        continue
    if 'sched_wakeup' in line:
        wakes.append((t, int(pid), int(re.search(r' pid=(\d+)', line).group(1))))
# The victim's SIGKILL is the one it sends itself (raise); the launcher's
# kills at the end of the run come after the last window.
sigs = [s for s in sigs][:len(kills)]
rows = collections.defaultdict(list)
deaths, windows, spans = [], [], []
if mode == 'shrink':
    for k, (s0, victim) in zip(kills, sigs):
        if k['end'] is None:
            continue
        w0, w1 = s0, s0 + (k['end'] - k['ts']) / 1e9
        spans.append((w0, w1))
        # The victim's death: the first wake-up its exiting threads cause (the
        # kernel wakes the survivors when it closes the victim's sockets).
        d = next((t for t, p, wakee in wakes
                  if p == victim and tgid.get(wakee) != victim and w0 < t < w1), None)
        if d is not None:
            deaths.append((d - w0) * 1e3)
else:
    cur = None
    for t, kind in events:
        if kind in ('kill', 'shrunk'):
            cur = None
        elif kind == 'ready':
            cur = [t / 1e9 - off, None]
            spans.append(cur)
        elif cur is not None:  # grown
            cur[1] = t / 1e9 - off
    spans = [(a, b) for a, b in spans if b is not None]
for w0, w1 in spans:
    windows.append((w1 - w0) * 1e3)
    cpu = collections.Counter()
    running = {}
    for t, c, nxt in switches:
        if t < w0 - 0.1:
            continue
        if t > w1:
            break
        if c in running:
            since, name = running.pop(c)
            a = max(since, w0)
            if t > a and not name.startswith('swapper'):
                cpu[name] += t - a
        running[c] = (t, re.sub(r'/\d+$', '', nxt))
    for c, (since, name) in running.items():
        a = max(since, w0)
        if w1 > a and not name.startswith('swapper'):
            cpu[name] += w1 - a
    for name in set(cpu) | set(rows):
        rows[name].append(cpu.get(name, 0.0) * 1e3)
if not windows:
    sys.exit('windows.sh: no complete window in the run (see its log)')
nw = len(windows)
print('%d ranks, %d windows (%s)' % (n, nw, 'SIGKILL to the last first collective at N-1'
      if mode == 'shrink' else "the replacement's ready to the last first collective at N"))
print('window: median %.2f ms; two CPUs offer %.2f ms of CPU in it' % (statistics.median(windows), 2 * statistics.median(windows)))
if deaths:
    print("the victim's death (SIGKILL to its sockets closing): median %.2f ms (%d of %d windows)"
          % (statistics.median(deaths), len(deaths), nw))
print()
print('| thread | CPU ms per window (mean) |')
print('|---|---|')
total = 0.0
for name, v in sorted(rows.items(), key=lambda x: -sum(x[1])):
    mean = sum(v) / nw
    total += mean
    if mean >= 0.005:
        print('| %s | %.2f |' % (name, mean))
print('| all | %.2f |' % total)
PY
