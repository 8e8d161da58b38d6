#!/usr/bin/env bash
# pytorch.sh - ftcomm-trace on PyTorch Flight Recorder dump sets (pickle and
# JSON, pytorch-dumps.py: 2000 entries per rank, one rank's dump missing),
# beside PyTorch's own analyzer (python -m torch.distributed.flight_recorder.
# fr_trace, on the pickles) when the torch environment is there
# (make deps; FTC_TORCH_VENV, default ~/.cache/ftcomm/torch-2.15.0).
# Prints a markdown table: wall time, CPU time and peak RSS of each, and
# whether each names the missing rank. BENCH_RANKS (default "128 1024")
# picks the sizes; FR_TRACE_MAX_RANKS (default 128) the largest set
# fr_trace runs on (it holds every dump in Python objects: 1.1 GB at 128).
set -u
cd "$(dirname "$0")/../../.."
build=${BUILD:-build/release}
make --no-print-directory -s "$build/bin/ftcomm-trace" >&2 || exit 1
trace=$build/bin/ftcomm-trace
py=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}/bin/python
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "wall cpu rss_mb" of a command; its output in $tmp/out
measure() {
  /usr/bin/time -f '%e %U %S %M' -o "$tmp/time" "$@" >"$tmp/out" 2>&1
  tail -n 1 "$tmp/time" | awk '{ printf "%s %.2f %.0f", $1, $2 + $3, $4 / 1024 }'
}
echo "Measured at $(tests/bench/stamp.sh)."
echo
echo "| dumps | tool | wall s | CPU s | peak RSS MB | names the missing rank |"
echo "|---|---|---|---|---|---|"
for ranks in ${BENCH_RANKS:-128 1024}; do
  dir=$tmp/r$ranks
  miss=$((ranks / 3))
  python3 tests/bench/recorder/pytorch-dumps.py "$ranks" 2000 "$dir" "$miss" || exit 1
  for fmt in pickle json; do
    mb=$(du -sm "$dir/$fmt" | cut -f1)
    read -r wall cpu rss < <(measure "$trace" "$dir/$fmt")
    named=$(head -n 1 "$tmp/out" | grep -q "^MISSING: no dump from rank $miss " && echo yes || echo "NO: $(head -n 1 "$tmp/out")")
    echo "| $ranks ranks x 2000, $fmt ($mb MB) | ftcomm-trace | $wall | $cpu | $rss | $named |"
  done
  if [ "$ranks" -le "${FR_TRACE_MAX_RANKS:-128}" ] && "$py" -c 'import torch' 2>/dev/null; then
    read -r wall cpu rss < <(measure "$py" -m torch.distributed.flight_recorder.fr_trace "$dir/pickle" -p rank_)
    named=$(grep -q "Missing dump files from ranks {$miss}" "$tmp/out" && echo yes || echo "NO: $(tail -n 1 "$tmp/out")")
    echo "| $ranks ranks x 2000, pickle | PyTorch fr_trace | $wall | $cpu | $rss | $named |"
  fi
  rm -rf "$dir"
done
