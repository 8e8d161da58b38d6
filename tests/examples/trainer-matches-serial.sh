#!/usr/bin/env bash
# The example trainer run on N ranks matches the 1-rank run: every rank ends
# with the same parameter bytes, and the final loss and parameter checksum
# agree with the serial run to within float summation-order error (1e-9
# relative: gradients are f64 sums of the same terms in another order).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BUILD:-build/release}/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() {
  local n=$1
  timeout 120 "$BIN/ftcomm-run" -n "$n" --job "trainer-$n" -- \
    "$BIN/ftcomm-trainer" --steps 60 --batch 96 --samples 2048 --seed 7 >"$tmp/out-$n" 2>&1 || {
    echo "trainer on $n ranks failed:"; cat "$tmp/out-$n"; exit 1; }
}
final() { grep -o 'final: rank [0-9]*/[0-9]* loss [^ ]* checksum [^ ]* params_hash [0-9a-f]*' "$tmp/out-$1"; }
run 1
ref_loss=$(final 1 | awk '{print $5}')
ref_sum=$(final 1 | awk '{print $7}')
for n in 2 3 4; do
  run "$n"
  count=$(final "$n" | wc -l)
  [ "$count" -eq "$n" ] || { echo "expected $n final lines on $n ranks, got $count"; cat "$tmp/out-$n"; exit 1; }
  hashes=$(final "$n" | awk '{print $9}' | sort -u | wc -l)
  [ "$hashes" -eq 1 ] || { echo "ranks diverged on $n ranks:"; final "$n"; exit 1; }
  loss=$(final "$n" | head -1 | awk '{print $5}')
  sum=$(final "$n" | head -1 | awk '{print $7}')
  awk -v a="$loss" -v b="$ref_loss" -v c="$sum" -v d="$ref_sum" -v n="$n" 'BEGIN {
    rl = (a - b) / (b == 0 ? 1 : b); if (rl < 0) rl = -rl
    rs = (c - d) / (d == 0 ? 1 : d); if (rs < 0) rs = -rs
    if (rl > 1e-9 || rs > 1e-9) { printf "%d ranks: loss %s vs %s, checksum %s vs %s\n", n, a, b, c, d; exit 1 }
    printf "%d ranks: loss %s (serial %s), checksum %s (serial %s), all ranks identical\n", n, a, b, c, d }'
done
