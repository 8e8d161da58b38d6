#!/usr/bin/env bash
# mutations.sh - ftcomm-trace on hundreds of damaged dumps (truncated at
# every few bytes, bytes flipped, fields of the wrong type), ftcomm and
# PyTorch formats: it must report each broken file and finish with exit 1
# or 2, never crash. Meant to run under SANITIZE=address as well.
set -u
cd "$(dirname "$0")/../.."
trace=${FTC_REC_TRACE:-build/release/bin/ftcomm-trace}
[ -x "$trace" ] || { echo "missing $trace (run make)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" <<'PY'
import glob, os, random, sys
out = sys.argv[1]
random.seed(7)
srcs = [sorted(glob.glob("tests/recorder/cases/never-entered/*.json"))[0],
        sorted(glob.glob("tests/recorder/cases/unknown-fields/*.json"))[0],
        sorted(glob.glob("tests/recorder/cases/verdict-agrees/*.json"))[0],
        sorted(glob.glob("tests/recorder/cases/pytorch/nccl_trace_rank_*"))[0]]
for si, src in enumerate(srcs):
    data = open(src, "rb").read()
    d = os.path.join(out, "set%d" % si)
    os.makedirs(d)
    n = 0
    step = max(1, len(data) // 150)
    for cut in range(0, len(data), step):       # truncations
        open(os.path.join(d, "rank-%d-cut.json" % n), "wb").write(data[:cut]); n += 1
    for _ in range(150):                         # byte flips
        b = bytearray(data)
        for _ in range(random.randint(1, 4)):
            b[random.randrange(len(b))] = random.choice(b'{}[]",:0123456789-.eE \\u\x00\xff')
        open(os.path.join(d, "rank-%d-flip.json" % n), "wb").write(bytes(b)); n += 1
    s = data.decode()
    for a, z in [('"seq"', '"seq":{"x":1},"q"'), ('[', '[' * 100), ('"state"', '"state":null,"s"'),
                 ('"communicators":[', '"communicators":[7,'), ('"entries":[', '"entries":["x",'),
                 ('"version":"1.0"', '"version":1'), ('"ranks":"[', '"ranks":"[-5, 99999999999, ')]:
        open(os.path.join(d, "rank-%d-type.json" % n), "w").write(s.replace(a, z, 1)); n += 1
PY
fail=0
for d in "$tmp"/set*; do
  timeout 120 "$trace" "$d" >"$d.out" 2>&1
  rc=$?
  if [ $rc -ne 1 ] && [ $rc -ne 2 ]; then
    echo "FAIL $(basename "$d"): exit $rc"; tail -n 20 "$d.out"; fail=1
  else
    echo "ok   $(basename "$d"): $(ls "$d" | wc -l) damaged dumps, exit $rc, $(grep -c '^unreadable' "$d.out") reported unreadable"
  fi
done
exit $fail
