#!/usr/bin/env bash
# trainingjob.sh - the whole flow on one machine, against a real kube-apiserver:
# kubectl apply a TrainingJob of 4 ftcomm-trainer ranks -> the controller makes the pods
# -> the node agent (tests/e2e/agent) binds them to its Nodes and runs them as local
# processes -> they join the controller's embedded coordinator (through its coordinator
# port) and train -> a worker is killed -> its pod turns Failed -> the controller
# declares the slot lost, the survivors shrink, a replacement pod starts as a joiner and
# rejoins -> the controller restarts: the ranks keep training, reconnect, and the new
# coordinator adopts their epoch (status rebuilt, no pod made) -> a worker is stopped (SIGSTOP) -> the coordinator reports the hang -> dumps of
# every rank land in the dump volume, ftcomm-trace's analysis next to them names the
# stopped rank, status has the incident and there is an Event -> onHang replace: the
# hung pod is replaced and its replacement rejoins -> the job Succeeds, every final
# rank with the same params_hash. Then a 2-rank job with onHang restartAll: a stopped
# rank restarts both pods with a fresh coordinator, and that job Succeeds too. And
# onHang dumpOnly: an incident with dumps and analysis, no replacement.
# Bounded in time; every process is stopped on exit.
. "$(dirname "$0")/../cluster/lib.sh"
agent_suite e2e
start_controller() { run_controller "e2e-$1" --dump-retention 5; }  # start_controller N
if start_controller 1; then ok "the controller leads and opens its coordinator port $coord_port"; else bad "controller start"; fi
start_agent node-a,node-b,node-c,node-d,node-e

cat >"$work/job.yaml" <<YAML
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: llm, namespace: $ns}
spec:
  replicas: 4
  minReplicas: 2
  backend: tcp
  timeouts: {collectiveTimeoutSeconds: 120, hangTimeoutSeconds: 4}
  failurePolicy: {maxReplacements: 4, backoffSeconds: 1, onHang: replace}
  template:
    spec:
      # The node agent stops a deleted pod as a kubelet does: SIGTERM, SIGKILL at the end
      # of this grace period (a stopped rank waits it out); 8 s covers the ranks' 3 s dump
      # drain (the controller's floor: FTCOMM_DUMP_DRAIN_MS + 5 s).
      terminationGracePeriodSeconds: 8
      containers:
        - name: trainer
          image: local/ftcomm-trainer
          command: ["$trainer"]
          args: ["--steps", "5000", "--step-ms", "15", "--log-every", "500"]
          env: [{name: FTCOMM_DUMP_DRAIN_MS, value: "3000"}]
YAML
check "the TrainingJob applies" kc apply -f "$work/job.yaml"

tj() { kc get tj llm -n $ns -o jsonpath="$1"; }
pods_now() { kc get pods -n $ns -l ftcomm.dev/job=llm -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}'; }
running() { [ "$(tj '{.status.phase} {.status.worldSize}')" = "Running 4" ] && [ "$(tj '{.status.epoch}')" -ge 1 ]; }
check "4 pods run as local processes and form epoch 1 with the embedded coordinator" eventually 60 running
check_out "status has every member's rank" '^0 1 2 3 $' bash -c \
  "$FTC_KUBECTL get tj llm -n $ns -o jsonpath='{range .status.members[*]}{.rank}{\" \"}{end}' | tr ' ' '\n' | sort -n | tr '\n' ' '"
sleep 3  # a few hundred steps (stdout goes to a file: block-buffered, so no step lines yet)
alive() { for p in "$state"/pids/llm-?-0; do kill -0 "$(cat "$p")" || return 1; done; [ "$(ls "$state/pids" | wc -l)" = 4 ]; }
check "the 4 ranks are still training" alive
alive_now() { for p in "$state"/pids/*; do kill -0 "$(cat "$p")" || return 1; done; [ "$(ls "$state/pids" | wc -l)" = 4 ]; }
epoch1=$(tj '{.status.epoch}')

# --- a killed worker: shrink at once, a joiner replaces it -------------------------------
pid2=$(cat "$state/pids/llm-2-0")
kill -9 "$pid2"
t0=$(date +%s%N)
failed() { [ "$(kc get pod llm-2-0 -n $ns -o jsonpath='{.status.phase}' 2>/dev/null)" = Failed ] || ! kc get pod llm-2-0 -n $ns >/dev/null 2>&1; }
check "the killed worker's pod turns Failed" eventually 20 failed
check "the controller declares slot 2 lost to the coordinator" eventually 10 grep -q "slot 2: pod llm-2-0 failed; told the coordinator" "$ctrl_log"
shrunk() { [ "$(tj '{.status.epoch}')" -gt "$epoch1" ]; }
check "the survivors form a new epoch without it" eventually 20 shrunk
echo "# shrink seen after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
check "a replacement pod llm-2-1 runs" eventually 30 bash -c "[ \"\$($FTC_KUBECTL get pod llm-2-1 -n $ns -o jsonpath='{.status.phase}' 2>/dev/null)\" = Running ]"
check_out "... started as a joiner (FTCOMM_JOINER=1)" '^1$' \
  kc get pod llm-2-1 -n $ns -o jsonpath='{.spec.containers[0].env[?(@.name=="FTCOMM_JOINER")].value}'
check "... it rejoins the running job" eventually 60 grep -q "joined at epoch" "$state/logs/llm-2-1.log"
regrown() { [ "$(tj '{.status.phase} {.status.worldSize}')" = "Running 4" ]; }
check "status: 4 members again" eventually 30 regrown
check_out "status counts the replacement with an incident" '^1 PodFailed llm-2-0$' \
  tj '{.status.replacements} {.status.incidents[0].kind} {.status.incidents[0].culprit}'
check "metrics: slots declared lost" bash -c "[ \"\$(curl -s http://127.0.0.1:$port/metrics | awk '\$1 == \"ftcomm_controller_slots_declared_lost_total\" { print \$2 }')\" -ge 1 ]"

# --- the controller restarts: the ranks keep training, the new coordinator adopts them ----
epoch_before=$(tj '{.status.epoch}')
created_before=$(kc get pods -n $ns -l ftcomm.dev/job=llm -o name | sort | tr '\n' ' ')
if kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "the controller stops (SIGTERM)"; else bad "the controller stops (SIGTERM)"; fi
ctrl_pid=
check "the ranks keep training without it" alive_now
if start_controller 2; then ok "a new controller leads and opens the coordinator port again"; else bad "controller restart"; fi
check "its coordinator adopts the running epoch from the ranks" eventually 30 grep -q "adopted running epoch" "$ctrl_log"
readopted() { [ "$(tj '{.status.phase} {.status.worldSize}')" = "Running 4" ] && [ "$(tj '{.status.epoch}')" -ge "$epoch_before" ] &&
  [ "$(kc get tj llm -n $ns -o jsonpath='{range .status.members[*]}{.rank}{" "}{end}' | wc -w)" = 4 ]; }
check "status is rebuilt: 4 ranks, epoch $epoch_before or later" eventually 30 readopted
check_out "no pod was made or replaced" "^$created_before\$" bash -c "$FTC_KUBECTL get pods -n $ns -l ftcomm.dev/job=llm -o name | sort | tr '\n' ' '"

# --- a hung worker: dumps, analysis, incident, Event, replacement -------------------------
rank1=$(kc get tj llm -n $ns -o jsonpath='{.status.members[1].rank}')
pid1=$(cat "$state/pids/llm-1-0")
kill -STOP "$pid1"
echo "# stopped llm-1-0 (pid $pid1, rank $rank1)"
hang() { [ "$(tj '{.status.incidents[1].kind}')" = Hang ]; }
check "a Hang incident appears in status" eventually 60 hang
check_out "... naming the stopped pod as culprit" '^llm-1-0$' tj '{.status.incidents[1].culprit}'
dump_path=$(tj '{.status.incidents[1].dumpPath}')
echo "# dumpPath $dump_path"
check_out "... with its dumps in the volume as <ns>/<job>/<incident>/" "^$vol/$ns/llm/hang-" echo "$dump_path"
check "the other ranks' dumps are there" bash -c "[ \$(ls '$dump_path'/rank-*.json | wc -l) -ge 3 ]"
check "analysis.json and analysis.txt are next to them" test -s "$dump_path/analysis.json" -a -s "$dump_path/analysis.txt"
check_out "the analysis names the stopped rank $rank1" "ranks? ([0-9]+(, | and ))*$rank1([^0-9]|\$)" head -1 "$dump_path/analysis.txt"
msg=$(tj '{.status.incidents[1].message}')
check_out "the incident's message is the analyzer's first line" "^$(head -1 "$dump_path/analysis.txt" | sed 's/[][\.*^$()+?{}|]/\\&/g')\$" echo "$msg"
check_out "an Event says so" 'HangDetected' kc get events -n $ns --field-selector reason=HangDetected -o jsonpath='{.items[*].reason}'
check "onHang replace: llm-1-1 replaces the hung pod" eventually 30 bash -c "[ \"\$($FTC_KUBECTL get pod llm-1-1 -n $ns -o jsonpath='{.status.phase}' 2>/dev/null)\" = Running ]"
gone() { ! kill -0 "$pid1" 2>/dev/null; }
check "... and the stopped process is gone" eventually 20 gone
check "... llm-1-1 rejoins" eventually 60 grep -q "joined at epoch" "$state/logs/llm-1-1.log"

# --- the end: Succeeded, every rank agrees -------------------------------------------------
succeeded() { [ "$(tj '{.status.phase}')" = Succeeded ]; }
check "the job finishes: Succeeded" eventually 240 succeeded
check "kubectl wait --for=condition=Succeeded returns" kc wait --for=condition=Succeeded tj/llm -n $ns --timeout=10s
check_out "... and Ready says the job succeeded (not a count of running members)" '^False JobSucceeded$' \
  tj '{.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}'
echo "# pods: $(pods_now)"
hashes=$(cat "$state"/logs/llm-0-0.log "$state"/logs/llm-1-1.log "$state"/logs/llm-2-1.log "$state"/logs/llm-3-0.log |
  sed -n 's/^final: .*params_hash \([0-9a-f]*\).*/\1/p')
echo "# final hashes: $(echo $hashes)"
check_out "all 4 final ranks report a params_hash" '^4$' bash -c "echo '$hashes' | grep -c ."
check_out "... and it is the same on every rank" '^1$' bash -c "echo '$hashes' | sort -u | grep -c ."
check_out "the job's coordinator is stopped once it Succeeded" 'llm: stopped its coordinator' grep 'stopped its coordinator' "$ctrl_log"

# --- 2-rank variants of job llm, each with a stopped rank -------------------------------------
tjn() { kc get tj "$1" -n $ns -o jsonpath="$2"; }  # tjn JOB JSONPATH
runs_two() { [ "$(tjn "$1" '{.status.phase} {.status.worldSize}')" = "Running 2" ]; }
has_hang() { [ "$(tjn "$1" '{.status.incidents[0].kind}')" = Hang ]; }
two_rank_job() {  # two_rank_job NAME ONHANG STEPS: applied, and running for 2 s
  sed -e "s/name: llm,/name: $1,/" -e 's/replicas: 4/replicas: 2/' -e 's/minReplicas: 2/minReplicas: 1/' \
      -e "s/onHang: replace/onHang: $2/" -e "s/\"5000\"/\"$3\"/" "$work/job.yaml" >"$work/$1.yaml"
  check "a 2-rank job with onHang $2 applies" kc apply -f "$work/$1.yaml"
  check "it runs" eventually 60 runs_two "$1"
  sleep 2
}

# --- onHang restartAll: every pod starts again, with a fresh coordinator -------------------
two_rank_job small restartAll 1500
spid=$(cat "$state/pids/small-0-0")
kill -STOP "$spid"
check "stopping one rank makes a Hang incident" eventually 60 has_hang small
restarted() { [ "$(kc get pods -n $ns -l ftcomm.dev/job=small -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}')" = "small-0-1=Running small-1-1=Running " ]; }
check "restartAll: both pods start again at incarnation 1 (the old ones are gone)" eventually 60 restarted
check_out "... as a fresh start (FTCOMM_JOINER=0)" '^0$' \
  kc get pod small-1-1 -n $ns -o jsonpath='{.spec.containers[0].env[?(@.name=="FTCOMM_JOINER")].value}'
check_out "... with an Event JobRestarted" 'JobRestarted' kc get events -n $ns --field-selector reason=JobRestarted -o jsonpath='{.items[*].reason}'
check_out "... and a fresh coordinator" 'e2e/small: stopped its coordinator' grep 'e2e/small: stopped its coordinator' "$ctrl_log"
check "the stopped process is gone" bash -c "! kill -0 $spid 2>/dev/null"
small_done() { [ "$(tjn small '{.status.phase}')" = Succeeded ]; }
check "the restarted job Succeeds" eventually 120 small_done
shashes=$(cat "$state"/logs/small-0-1.log "$state"/logs/small-1-1.log | sed -n 's/^final: .*params_hash \([0-9a-f]*\).*/\1/p')
check_out "... both ranks with one params_hash" '^1 2$' bash -c "echo \$(echo '$shashes' | sort -u | grep -c .) \$(echo '$shashes' | grep -c .)"

# --- onHang dumpOnly: an incident and its dumps, nothing replaced --------------------------
two_rank_job dmp dumpOnly 100000
rank_d1=$(tjn dmp '{.status.members[1].rank}')
dpid=$(cat "$state/pids/dmp-1-0")
kill -STOP "$dpid"
check "stopping a rank makes a Hang incident" eventually 60 has_hang dmp
check_out "... naming its pod and, in the analysis, rank $rank_d1" "^dmp-1-0 .*rank $rank_d1([^0-9]|\$)" \
  tjn dmp '{.status.incidents[0].culprit} {.status.incidents[0].message}'
check "... with the survivor's dump and the analysis in the volume" \
  bash -c "d=\$($FTC_KUBECTL get tj dmp -n $ns -o jsonpath='{.status.incidents[0].dumpPath}'); test -s \$d/rank-0.json -o -s \$d/rank-1.json && test -s \$d/analysis.json"
sleep 3
check_out "dumpOnly: no pod is replaced" '^dmp-0-0 dmp-1-0 $' \
  kc get pods -n $ns -l ftcomm.dev/job=dmp -o jsonpath='{range .items[*]}{.metadata.name}{" "}{end}'
check "... and the stopped process is left alone" kill -0 "$dpid"
kc delete tj dmp -n $ns >/dev/null
kc delete pods -n $ns -l ftcomm.dev/job=dmp --wait=false >/dev/null  # no garbage collector here
dmp_gone() { [ -z "$(kc get pods -n $ns -l ftcomm.dev/job=dmp -o name)" ] && ! kill -0 "$dpid" 2>/dev/null; }
check "deleting its pods stops them (the stopped one too)" eventually 30 dmp_gone

# --- no orphans ----------------------------------------------------------------------------
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=
left=$(ls "$state/pids" | wc -l)
check_out "the agent left no process behind" '^0$' echo "$left"
if kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "the controller exits 0 on SIGTERM"; else bad "the controller exits 0 on SIGTERM"; fi
ctrl_pid=
if grep -q Sanitizer "$ctrl_log"; then bad "sanitizer report"; grep -A20 Sanitizer "$ctrl_log" | head -30; else ok "no sanitizer report"; fi
[ "$fail" -eq 0 ] || { echo "# controller log:"; tail -40 "$ctrl_log"; echo "# agent log:"; tail -20 "$work/agent.log"; }
finish
