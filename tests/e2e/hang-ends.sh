#!/usr/bin/env bash
# hang-ends.sh - on the local cluster, a hang leaves its dumps however the TrainingJob
# ends next (docs/recovery.md, "When a job ends after a failure"). Each case is a job of
# 3 ranks (minReplicas 2) whose rank 1 stops (SIGSTOP); once the controller's
# coordinator asks for the dumps:
#   restart-all   onHang restartAll: the controller deletes and restarts every pod
#   pod-deleted   kubectl delete pod of survivor rank 0 while its dumps are being written
#                 (every dump write takes 1.5 s: FTCOMM_FAULT=dumpwrite:1500): the node
#                 agent sends SIGTERM, as a kubelet does, and the rank ends once they are
#                 on disk, within the pod's grace period
#   job-deleted   kubectl delete tj (and its pods) while the dumps are being written
#                 (1.5 s writes as above)
#   ctrl-restart  the controller is stopped (SIGTERM) and started again
#   ctrl-restart-early  the same as rank 1 stops, before the hang is seen: the new
#                 coordinator adopts the epoch, finds rank 1 silent and asks for the dumps
# Each case checks, with tests/recovery/job_end_dumps.py: every survivor's own failure
# dump is in the pods' dump directory (on disk <= 1 s after capture, as its log says,
# except with the slow writes), the incident folder in the dump volume holds every
# survivor's dump and incident.json (or, when the controller stopped before an upload
# came, incident.json says why it is missing), and ftcomm-trace on the folder names rank 1
# and why its dump is missing. It prints the case table. About 3 minutes.
. "$(dirname "$0")/../cluster/lib.sh"
agent_suite he
start_controller() { run_controller "he-$1"; }
if start_controller 1; then ok "the controller leads and opens its coordinator port $coord_port"; else bad "controller start"; fi
start_agent node-a,node-b,node-c,node-d
pod_dumps=$work/pod-dumps
rows=()

# job NAME ONHANG [EXTRA-ENV-YAML]: a 3-rank TrainingJob; its pods log when each dump
# reached the disk, and get a grace period of 11 s (the controller's floor with a 6 s drain).
job() {
  cat >"$work/$1.yaml" <<YAML
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1, namespace: $ns}
spec:
  replicas: 3
  minReplicas: 2
  backend: tcp
  timeouts: {collectiveTimeoutSeconds: 120, hangTimeoutSeconds: 3}
  failurePolicy: {maxReplacements: 2, backoffSeconds: 1, onHang: $2}
  template:
    spec:
      terminationGracePeriodSeconds: 11
      containers:
        - name: trainer
          image: local/ftcomm-trainer
          command: ["$trainer"]
          args: ["--steps", "100000", "--step-ms", "15", "--log-every", "100000"]
          env:
            - {name: FTCOMM_LOG_LEVEL, value: info}
            - {name: FTCOMM_LOG_SUBSYS, value: recovery}
            - {name: FTCOMM_DUMP_DRAIN_MS, value: "6000"}
${3:-}
YAML
  check "job $1 (onHang $2) applies" kc apply -f "$work/$1.yaml"
  runs3() { [ "$(kc get tj "$1" -n $ns -o jsonpath='{.status.phase} {.status.worldSize}')" = "Running 3" ]; }
  check "... and runs with 3 ranks" eventually 60 runs3 "$1"
  sleep 1
}
# stop_rank1 JOB: SIGSTOP its slot 1; returns once the coordinator asked for the dumps.
stop_rank1() {
  kill -STOP "$(cat "$state/pids/$1-1-0")"
  check "$1: the coordinator asks every rank for a dump" eventually 30 \
    grep -q "job $1: rank 1 stopped heartbeating.*asking every rank" "$ctrl_log"
}
# verify CASE JOB [CHECKER-ARGS...]: survivors 0 and 2 of the hang of rank 1.
verify() {
  local name=$1 jobn=$2 out
  shift 2
  cat "$state"/logs/"$jobn"-*.log >"$work/$name.log" 2>/dev/null
  if grep -q Sanitizer "$work/$name.log"; then bad "$name: a sanitizer report"; return; fi
  if out=$(FTC_TRACE=$trace python3 "$root/tests/recovery/job_end_dumps.py" "$name" "$pod_dumps" "$work/$name.log" 1 0,2 \
             --job "$jobn" --incident-dir "$vol/$ns/$jobn" "$@" 2>&1); then
    ok "$name: the survivors' dumps, the incident folder and its incident.json; ftcomm-trace names rank 1"
    echo "$out" | sed 's/^/       /'
    rows+=("$(echo "$out" | head -1)")
  else
    bad "$name: $out"
    tail -20 "$work/$name.log" | sed 's/^/       | /'
  fi
}

# --- onHang restartAll: every pod is deleted (SIGTERM) and started again ---------------------
job ra restartAll
stop_rank1 ra
restarted() { [ "$(kc get pods -n $ns -l ftcomm.dev/job=ra -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}')" = "ra-0-1=Running ra-1-1=Running ra-2-1=Running " ]; }
check "restart-all: the 3 pods start again at incarnation 1" eventually 60 restarted
verify restart-all ra
kc delete tj ra -n $ns >/dev/null; kc delete pods -n $ns -l ftcomm.dev/job=ra --wait=false >/dev/null

# --- a survivor's pod is deleted while its dumps are being written -------------------------
job pd dumpOnly "            - {name: FTCOMM_FAULT, value: \"dumpwrite:1500\"}"
stop_rank1 pd
check "pod-deleted: kubectl delete pod pd-0-0 (rank 0) while it writes" kc delete pod pd-0-0 -n $ns --wait=false
gone0() { [ ! -e "$state/pids/pd-0-0" ]; }
check "... its process ends within the grace period" eventually 15 gone0
check "... once its dumps were written (SIGTERM waited for them)" \
  grep -q "Terminated: the dumps are written and sent" "$state/logs/pd-0-0.log"
# The coordinator drops the member of a deleted pod at once (its session closes): the
# rank's upload cannot go; its own copy stays in its dump directory, and incident.json
# says why the volume has none.
verify pod-deleted pd --bound-ms 4500 --partial
kc delete tj pd -n $ns >/dev/null; kc delete pods -n $ns -l ftcomm.dev/job=pd --wait=false >/dev/null

# --- the job is deleted while the dumps are being written -----------------------------------
job jd dumpOnly "            - {name: FTCOMM_FAULT, value: \"dumpwrite:1500\"}"
stop_rank1 jd
check "job-deleted: kubectl delete tj jd (and its pods: no garbage collector here)" \
  bash -c "$FTC_KUBECTL delete tj jd -n $ns --wait=false && $FTC_KUBECTL delete pods -n $ns -l ftcomm.dev/job=jd --wait=false"
jd_gone() { [ -z "$(ls "$state/pids" | grep '^jd-')" ]; }
check "... its processes end (the stopped one at the end of its grace period)" eventually 30 jd_gone
# The controller stops a deleted job's coordinator at once: uploads still on their way
# cannot go; the ranks' own copies stay in their dump directory, incident.json says so.
verify job-deleted jd --bound-ms 4500 --partial

# --- the controller restarts during the hang ------------------------------------------------
# After the coordinator asked for the dumps (they are on their way as it stops).
job cr dumpOnly
stop_rank1 cr
if kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "ctrl-restart: the controller stops (SIGTERM)"; else bad "ctrl-restart: the controller stops"; fi
ctrl_pid=
if start_controller 2; then ok "... and a new one starts"; else bad "... a new controller start"; fi
verify ctrl-restart cr --partial
kc delete tj cr -n $ns >/dev/null; kc delete pods -n $ns -l ftcomm.dev/job=cr --wait=false >/dev/null

# --- the controller restarts as the rank hangs, before the hang is seen -------------------
# The new coordinator adopts the epoch from the ranks that reconnect; the stopped one never
# does, stays silent past the hang timeout, and the new coordinator asks for the dumps.
job ce dumpOnly
kill -STOP "$(cat "$state/pids/ce-1-0")"
if kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "ctrl-restart-early: the controller stops (SIGTERM) as rank 1 hangs"; else bad "ctrl-restart-early: the controller stops"; fi
ctrl_pid=
if start_controller 3; then ok "... and a new one starts"; else bad "... a new controller start"; fi
shrunk_ce() { [ "$(kc get tj ce -n $ns -o jsonpath='{.status.worldSize}')" = 2 ]; }
check "... the job goes on with ranks 0 and 2" eventually 60 shrunk_ce
verify ctrl-restart-early ce
kc delete tj ce -n $ns >/dev/null; kc delete pods -n $ns -l ftcomm.dev/job=ce --wait=false >/dev/null

echo
echo "| case | failure dumps (ranks, where) | incident dumps | slowest failure dump on disk after capture | slowest incident dump stored after capture | rank 1's entry in incident.json |"
echo "|---|---|---|---|---|---|"
for r in "${rows[@]}"; do echo "$r"; done
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=
if [ -n "$ctrl_pid" ] && kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "the controller exits 0 on SIGTERM"; fi
ctrl_pid=
if grep -q Sanitizer "$ctrl_log"; then bad "sanitizer report in the controller"; fi
[ "$fail" -eq 0 ] || { echo "# controller log:"; tail -40 "$ctrl_log"; echo "# agent log:"; tail -20 "$work/agent.log"; }
finish
