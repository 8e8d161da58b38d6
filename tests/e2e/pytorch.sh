#!/usr/bin/env bash
# pytorch.sh - PyTorch training as a TrainingJob on the local cluster (docs/pytorch.md):
# the controller runs 3 pods of examples/pytorch/train_ddp.py (DDP with ftcomm.Manager,
# float64, CPU) that the node agent starts as local processes with the cached torch
# environment and the package of `make python`. Then:
#   - examples/pytorch/trainingjob.yaml is accepted by the real API server (server-side
#     dry run: the CRD's schema, defaults and validation);
#   - kubectl delete pod of a rank mid-training: the survivors recover and go on at 2
#     ranks, a replacement pod starts as a joiner, gets the model from a survivor and the
#     job is back at 3; status counts the replacement and an Event says so;
#   - a rank stopped with SIGSTOP: the others are released (they recover without it),
#     every rank's dump lands in the dump volume, ftcomm-trace on that folder names the
#     stopped rank, status has a Hang incident and there is a HangDetected Event; the hung
#     pod is replaced;
#   - the job Succeeds and every final rank prints the same parameter hash, and the same
#     loss at the last step.
# About 3 minutes; every process is stopped on exit.
. "$(dirname "$0")/../cluster/lib.sh"
venv=${FTC_TORCH_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/ftcomm/torch-2.15.0}
pypkg=$build/python
[ -x "$venv/bin/python" ] || { echo "FAIL - no torch environment at $venv: run make deps"; exit 1; }
[ -f "$pypkg/ftcomm/.built" ] || { echo "FAIL - $pypkg has no ftcomm package: run make python"; exit 1; }
agent_suite pt
if run_controller pt-1 --dump-retention 5; then ok "the controller leads and opens its coordinator port $coord_port"; else bad "controller start"; fi
start_agent node-a,node-b,node-c,node-d,node-e

# --- the example's manifest against the real API server ------------------------------------
check_out "examples/pytorch/trainingjob.yaml passes the API server's validation (dry run)" \
  'trainingjob.ftcomm.dev/pytorch-ddp created \(server dry run\)' \
  kc apply --dry-run=server -n $ns -f "$root/examples/pytorch/trainingjob.yaml"
check_out "... with the CRD's defaults filled in" '^tcp 4 2$' bash -c \
  "$FTC_KUBECTL apply --dry-run=server -n $ns -f '$root/examples/pytorch/trainingjob.yaml' -o jsonpath='{.spec.backend} {.spec.replicas} {.spec.minReplicas}'"
check "... and nothing was made" bash -c "! $FTC_KUBECTL get tj pytorch-ddp -n $ns >/dev/null 2>&1"

# --- the job ------------------------------------------------------------------------------
# 0.1 s a step (--step-ms stands in for a bigger model): a replacement that imports torch
# on a busy host joins well before the end. 1200 steps: about 2 minutes.
steps=1200
cat >"$work/job.yaml" <<YAML
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: pt, namespace: $ns}
spec:
  replicas: 3
  minReplicas: 2
  backend: tcp
  timeouts: {collectiveTimeoutSeconds: 120, hangTimeoutSeconds: 4}
  failurePolicy: {maxReplacements: 4, backoffSeconds: 1, onHang: replace}
  template:
    spec:
      terminationGracePeriodSeconds: 8
      containers:
        - name: trainer
          image: local/trainer-ftcomm
          command: ["$venv/bin/python", "$root/examples/pytorch/train_ddp.py"]
          args: ["--steps", "$steps", "--step-ms", "100", "--log-every", "50", "--dtype", "float64", "--device", "cpu"]
          env:
            - {name: PYTHONPATH, value: "$pypkg"}
            - {name: OMP_NUM_THREADS, value: "1"}
            - {name: FTCOMM_DUMP_DRAIN_MS, value: "3000"}
YAML
check "the TrainingJob of train_ddp.py applies" kc apply -f "$work/job.yaml"

tj() { kc get tj pt -n $ns -o jsonpath="$1"; }
log() { cat "$state/logs/$1.log" 2>/dev/null; }
running() { [ "$(tj '{.status.phase} {.status.worldSize}')" = "Running 3" ] && [ "$(tj '{.status.epoch}')" -ge 1 ]; }
check "3 pods run train_ddp.py and form epoch 1" eventually 120 running
trains() { log pt-0-0 | grep -q '^step  *50 '; }
check "rank 0 logs training steps" eventually 120 trains
epoch1=$(tj '{.status.epoch}')

# --- kubectl delete pod: the survivors go on, a replacement joins and gets the model ----------
t0=$(date +%s%N)
check "kubectl delete pod pt-1-0 mid-training" kc delete pod pt-1-0 -n $ns --wait=false
recovered() { log pt-0-0 | grep -q 'ftcomm.Manager: recovered at step [0-9]*: epoch [0-9]*, rank 0 of 2'; }
check "the survivors recover and go on at 2 ranks" eventually 30 recovered
echo "# recovery seen after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
shrunk() { [ "$(tj '{.status.epoch}')" -gt "$epoch1" ]; }
check "status: a later epoch" eventually 20 shrunk
check "a replacement pod pt-1-1 runs" eventually 30 bash -c "[ \"\$($FTC_KUBECTL get pod pt-1-1 -n $ns -o jsonpath='{.status.phase}' 2>/dev/null)\" = Running ]"
check_out "... started as a joiner (FTCOMM_JOINER=1)" '^1$' \
  kc get pod pt-1-1 -n $ns -o jsonpath='{.spec.containers[0].env[?(@.name=="FTCOMM_JOINER")].value}'
joined() { log pt-1-1 | grep -q 'ftcomm.Manager: joined at epoch'; }
check "... it joins the running job" eventually 120 joined
gotstate() { log pt-1-1 | grep -q 'ftcomm.Manager: rank [0-9]*: took the state of step [0-9]* from rank'; }
check "... and takes the model from a survivor" eventually 30 gotstate
grew() { log pt-0-0 | grep -q 'ftcomm.Manager: grew at step [0-9]*: epoch [0-9]*, rank 0 of 3'; }
check "the survivors admit it: back at 3 ranks" eventually 30 grew
# A step completed at 2 ranks: the Manager grew at a later step than it recovered at.
at2() {
  local r g
  r=$(log pt-0-0 | sed -n 's/.*recovered at step \([0-9]*\): epoch [0-9]*, rank 0 of 2 .*/\1/p' | head -1)
  g=$(log pt-0-0 | sed -n 's/.*grew at step \([0-9]*\): epoch [0-9]*, rank 0 of 3 .*/\1/p' | head -1)
  echo "recovered at step $r, grew at step $g"
  [ -n "$r" ] && [ -n "$g" ] && [ "$g" -gt "$r" ]
}
check_out "... after the survivors completed steps at 2 ranks" '^recovered at step [0-9]+, grew at step [0-9]+$' at2
regrown() { [ "$(tj '{.status.phase} {.status.worldSize}')" = "Running 3" ]; }
check "status: 3 members again" eventually 30 regrown
check_out "status counts the replacement with an incident naming the deleted pod" '^1 PodFailed pt-1-0$' \
  tj '{.status.replacements} {.status.incidents[0].kind} {.status.incidents[0].culprit}'
check_out "an Event MemberReplaced says the pod was deleted and replaced" 'slot 1: pod pt-1-0 was deleted.*replaced by pt-1-1' \
  kc get events -n $ns --field-selector reason=MemberReplaced -o jsonpath='{.items[*].message}'

# --- a stopped rank: the others are released, dumps, the analyzer names it -------------------
sleep 2
rank2=$(kc get tj pt -n $ns -o jsonpath='{.status.members[?(@.slot==2)].rank}')
pid2=$(cat "$state/pids/pt-2-0")
epoch2=$(tj '{.status.epoch}')
kill -STOP "$pid2"
echo "# stopped pt-2-0 (pid $pid2, rank $rank2)"
released() { log pt-0-0 | sed -n '/grew at step/,$p' | grep -q 'recovered at step [0-9]*: .*lost: rank [0-9]* (slot 2, hung)'; }
check "the others are released: they recover without the stopped rank (hung)" eventually 60 released
hang() { [ "$(tj '{.status.incidents[1].kind}')" = Hang ]; }
check "a Hang incident appears in status" eventually 60 hang
check_out "... naming the stopped pod" '^pt-2-0$' tj '{.status.incidents[1].culprit}'
dump_path=$(tj '{.status.incidents[1].dumpPath}')
echo "# dumpPath $dump_path"
check_out "... with its dumps in the volume as <ns>/<job>/<incident>/" "^$vol/$ns/pt/hang-" echo "$dump_path"
check "the other ranks' dumps are there" bash -c "[ \$(ls '$dump_path'/rank-*.json 2>/dev/null | wc -l) -ge 2 ]"
check_out "ftcomm-trace on the folder names the stopped rank $rank2" "ranks? ([0-9]+(, | and ))*$rank2([^0-9]|\$)" \
  bash -c "'$trace' '$dump_path' | head -1"
check_out "... and its dumps carry torch's names for the ops" 'ftcomm:all_reduce' cat "$dump_path"/rank-*.json
check_out "an Event HangDetected" 'HangDetected' kc get events -n $ns --field-selector reason=HangDetected -o jsonpath='{.items[*].reason}'
check "onHang replace: pt-2-1 replaces the hung pod" eventually 30 bash -c "[ \"\$($FTC_KUBECTL get pod pt-2-1 -n $ns -o jsonpath='{.status.phase}' 2>/dev/null)\" = Running ]"
gone() { ! kill -0 "$pid2" 2>/dev/null; }
check "... and the stopped process is gone" eventually 30 gone
joined2() { log pt-2-1 | grep -q 'ftcomm.Manager: joined at epoch'; }
check "... pt-2-1 joins" eventually 120 joined2

# --- the end: Succeeded, every rank holds the same parameters ---------------------------------
succeeded() { [ "$(tj '{.status.phase}')" = Succeeded ]; }
check "the job finishes: Succeeded" eventually 300 succeeded
finals=$(cat "$state"/logs/pt-0-0.log "$state"/logs/pt-1-1.log "$state"/logs/pt-2-1.log | grep '^final: ')
echo "$finals" | sed 's/^/# /'
check_out "the 3 final ranks are at step $steps" '^3$' bash -c "echo '$finals' | grep -c ' step $steps '"
check_out "... and hold the same parameters (one params_hash)" '^1$' bash -c \
  "echo '$finals' | sed -n 's/.*params_hash \([0-9a-f]*\).*/\1/p' | sort -u | grep -c ."
check_out "... the 2 replacements received them: recoveries counted on the survivor" 'recoveries [1-9]' \
  bash -c "echo '$finals' | grep '^final: rank 0/'"
quiet() {  # quiet POD: its log has nothing after the final line (no shutdown noise)
  local out
  out=$(sed -n '/^final: /,$p' "$state/logs/$1.log")
  [ "$(wc -l <<<"$out")" = 1 ] || { echo "$out"; return 1; }
}
for p in pt-0-0 pt-1-1 pt-2-1; do check "$p ends quietly: nothing after its final line" quiet $p; done

# --- no orphans ---------------------------------------------------------------------------------
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=
check_out "the agent left no process behind" '^0$' bash -c "ls '$state/pids' | wc -l"
if kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "the controller exits 0 on SIGTERM"; else bad "the controller exits 0 on SIGTERM"; fi
ctrl_pid=
[ "$fail" -eq 0 ] || { echo "# controller log:"; tail -40 "$ctrl_log"; for f in "$state"/logs/*.log; do echo "# $f:"; tail -15 "$f"; done; }
finish
