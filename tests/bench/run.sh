#!/usr/bin/env bash
# run.sh - the `make bench` driver: allreduce f32 sum over a size sweep at
# several rank counts for ftcomm (TCP, under ftcomm-run), Open MPI (TCP, and
# shared memory through vader) and Gloo (ring and bcube over TCP), all in this
# one run on this host, plus the loopback-TCP and memcpy ceilings, and
# allreduce and a DDP step through torch.distributed with the ftcomm backend
# and with gloo (system "torch", tests/bench/torch/torch_bench.py: each size
# and the DDP step timed in BENCH_TORCH_ROUNDS interleaved rounds, median); then
# tests/bench/report.py turns the rows into build/bench/bench.md, bench.csv
# and busbw.png, and the markdown is printed. Every run is bounded by a
# timeout; a system that fails or is not built is reported, not hidden.
#   BUILD=build/release tests/bench/run.sh
# The host is shared, so every system runs BENCH_REPEAT times per rank count,
# in alternating order (A B C, then C B A, ...), and the report keeps each
# system's best row per size; every pass stays in bench.csv.
# Knobs (environment): BENCH_RANKS ("2 4 8"), BENCH_MIN (8), BENCH_MAX (256M),
# BENCH_FACTOR (4), BENCH_ITERS (20), BENCH_WARMUP (5), BENCH_ITER_BYTES (512M:
# iterations at size s are min(iters, max(2, ITER_BYTES/s))), BENCH_REPEAT (2),
# BENCH_SYSTEMS, BENCH_TORCH_ROUNDS (5), BENCH_RUN_TIMEOUT (seconds per run, 600), BENCH_OUT,
# BENCH_NICE (0; e.g. -10 as root runs every system above a busy host's
# compile jobs, the same for all of them), BENCH_RECORDER (1; 0 skips the
# recorder table of tests/bench/recorder/run.sh), BENCH_CONTROLLER (1; 0 skips
# the controller at scale, tests/bench/controller/run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

# Everything runs inside main, which bash parses whole before it starts: an
# edit to this file while a long sweep runs cannot change what runs.
main() {

  BUILD=${BUILD:-build/release}
  OUT=${BENCH_OUT:-build/bench}
  RANKS=${BENCH_RANKS:-2 4 8}
  MIN=${BENCH_MIN:-8}
  MAX=${BENCH_MAX:-256M}
  FACTOR=${BENCH_FACTOR:-4}
  ITERS=${BENCH_ITERS:-20}
  WARMUP=${BENCH_WARMUP:-5}
  ITER_BYTES=${BENCH_ITER_BYTES:-512M}
  REPEAT=${BENCH_REPEAT:-2}
  SYSTEMS=${BENCH_SYSTEMS:-ftcomm-tcp openmpi-tcp openmpi-shm gloo-ring gloo-bcube torch}
  TORCH_PY=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}/bin/python
  TORCH_ROUNDS=${BENCH_TORCH_ROUNDS:-5}
  RUN_TIMEOUT=${BENCH_RUN_TIMEOUT:-600}
  BB=$BUILD/bench
  NICE=${BENCH_NICE:-0}

  mkdir -p "$OUT/raw"
  rm -f "$OUT"/raw/* "$OUT"/bench.md "$OUT"/bench.csv "$OUT"/busbw.png

  sweep=(-c allreduce -d f32 -o sum -b "$MIN" -e "$MAX" -f "$FACTOR" -n "$ITERS" -w "$WARMUP"
         -I "$ITER_BYTES" --csv)
  mpirun_base=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

  load() { cut -d' ' -f1-3 /proc/loadavg; }

  {
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "host_cpus=$(nproc)"
    echo "cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
    echo "kernel=$(uname -r)"
    echo "load_before=$(load)"
    echo "sweep=${sweep[*]}"
    echo "ranks=$RANKS"
    echo "repeat=$REPEAT"
    echo "nice=$NICE"
  } >"$OUT/raw/meta.txt"
  echo "status,system,ranks,pass,exit,seconds,load_before,load_after" >"$OUT/raw/status.csv"

  echo "bench: ceilings (loopback TCP both ways, memcpy)"
  timeout -k 5 60 nice -n "$NICE" "$BB/loopback_tcp" -t 3 --csv >"$OUT/raw/ceiling.csv" || echo "bench: loopback_tcp failed" >&2
  timeout -k 5 60 nice -n "$NICE" "$BB/memcpy_bw" -t 2 --csv >>"$OUT/raw/ceiling.csv" || echo "bench: memcpy_bw failed" >&2

  # Prints the command for one system at n ranks, or nothing if it is not built.
  command_for() {
    local sys=$1 n=$2
    case $sys in
      ftcomm-tcp)
        [ -x "$BUILD/bin/ftcomm-run" ] && [ -x "$BUILD/bin/ftcomm-bench" ] || return 0
        echo "$BUILD/bin/ftcomm-run -q -n $n --timeout $RUN_TIMEOUT -- $BUILD/bin/ftcomm-bench ${sweep[*]} -l $sys" ;;
      openmpi-tcp)
        [ -x "$BB/mpi_bench" ] || return 0
        echo "${mpirun_base[*]} -np $n --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo $BB/mpi_bench ${sweep[*]} -l $sys" ;;
      openmpi-shm)
        [ -x "$BB/mpi_bench" ] || return 0
        echo "${mpirun_base[*]} -np $n --mca pml ob1 --mca btl vader,self $BB/mpi_bench ${sweep[*]} -l $sys" ;;
      torch)  # torch.distributed, ftcomm's backend and gloo's in one job (tests/bench/torch)
        [ -x "$TORCH_PY" ] && [ -f "$BUILD/python/ftcomm/.built" ] || return 0
        echo "env PYTHONPATH=$BUILD/python OMP_NUM_THREADS=1 $BUILD/bin/ftcomm-run -q -n $n --timeout $RUN_TIMEOUT" \
          "-- $TORCH_PY tests/bench/torch/torch_bench.py -b $MIN -e $MAX -f $FACTOR -n $ITERS -w $WARMUP" \
          "-I $ITER_BYTES -R $TORCH_ROUNDS --ddp-steps 10" ;;
      gloo-ring | gloo-bcube)
        [ -x "$BB/gloo_bench" ] || return 0
        echo "$BB/gloo_bench -N $n -A ${sys#gloo-} ${sweep[*]} -l $sys" ;;
      *) echo "bench: unknown system $sys" >&2 ;;
    esac
  }

  for n in $RANKS; do
    for pass in $(seq 1 "$REPEAT"); do
      order=$SYSTEMS
      [ $((pass % 2)) -eq 0 ] && order=$(echo "$SYSTEMS" | tr ' ' '\n' | tac | tr '\n' ' ')
      for sys in $order; do
        cmd=$(command_for "$sys" "$n")
        if [ -z "$cmd" ]; then
          echo "bench: $sys: not built, skipped"
          echo "skipped,$sys,$n,$pass,,,," >>"$OUT/raw/status.csv"
          continue
        fi
        before=$(load)
        echo "bench: $sys, $n ranks, pass $pass (load $before)"
        base=$OUT/raw/$sys-$n-p$pass
        echo "$cmd" >"$base.cmd"
        start=$(date +%s.%N)
        rc=0
        # shellcheck disable=SC2086 # the command is a word list by construction
        timeout -k 10 "$RUN_TIMEOUT" nice -n "$NICE" $cmd >"$base.csv" 2>"$base.log" </dev/null || rc=$?
        secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        if [ $rc -eq 0 ]; then st=ok; elif [ $rc -eq 124 ]; then st=timeout; else st=failed; fi
        if [ $rc -ne 0 ]; then
          echo "bench: $sys, $n ranks: $st (exit $rc), last lines of its log:"
          tail -n 5 "$base.log" | sed 's/^/    /'
        fi
        echo "$st,$sys,$n,$pass,$rc,$secs,$before,$(load)" >>"$OUT/raw/status.csv"
      done
    done
  done
  echo "load_after=$(load)" >>"$OUT/raw/meta.txt"

  # Debian's python3 has python3-matplotlib; a python3 earlier on PATH may not.
  PYTHON=${PYTHON:-python3}
  [ -x /usr/bin/python3 ] && PYTHON=/usr/bin/python3
  timeout -k 5 120 "$PYTHON" tests/bench/report.py "$OUT"

  if [ "${BENCH_RECORDER:-1}" = 1 ] && [ -x tests/bench/recorder/run.sh ]; then
    echo "bench: recorder (tests/bench/recorder/run.sh)"
    {
      echo
      echo "## Flight recorder overhead (tests/bench/recorder/run.sh)"
      echo
      # BENCH_RANKS means analyzer sizes to that script, not rank counts
      env -u BENCH_RANKS BUILD="$BUILD" timeout -k 10 600 tests/bench/recorder/run.sh || echo "_tests/bench/recorder/run.sh failed (exit $?)_"
    } >>"$OUT/bench.md" 2>"$OUT/raw/recorder.log"
  fi

  if [ "${BENCH_CONTROLLER:-1}" = 1 ] && [ -x tests/bench/controller/run.sh ]; then
    echo "bench: controller at scale (tests/bench/controller/run.sh)"
    BUILD="$BUILD" BENCH_OUT="$OUT" timeout -k 10 1200 tests/bench/controller/run.sh >"$OUT/raw/controller.log" 2>&1 ||
      echo "_tests/bench/controller/run.sh failed (exit $?); see $OUT/raw/controller.log_" >>"$OUT/bench.md"
    { echo; cat "$OUT/controller.md" 2>/dev/null || true; } >>"$OUT/bench.md"
  fi

  echo
  cat "$OUT/bench.md"
  echo
  echo "bench: wrote $OUT/bench.md, $OUT/bench.csv, $OUT/busbw.png (raw rows and logs in $OUT/raw)"
}

main "$@"
exit
