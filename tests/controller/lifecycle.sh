#!/usr/bin/env bash
# lifecycle.sh - a running TrainingJob over its life, with real ranks and a real garbage
# collector: the node agent (tests/e2e/agent) runs the controller's pods as
# ftcomm-trainer processes that join the embedded coordinator, and kube-controller-manager
# runs its garbage collector (cluster.sh start --gc).
#   - spec.replicas raised 2 -> 4 in one step while the job runs: the new slots' pods
#     start as joiners and join the running job, status.worldSize grows, an Event says so;
#     lowered 4 -> 2: the surplus pods (and their processes) go, the survivors shrink to a
#     new epoch, an Event
#   - a rank that stays in its own code longer than collectiveTimeoutSeconds (heartbeats
#     going on): its peers' collective times out -> a CollectiveTimeout incident with
#     every rank's dump, the analysis naming that rank, an Event, and onHang replace
#   - deleting a TrainingJob: the garbage collector deletes its pods and its token Secret
#     (owner references), the controller stops the job's coordinator and makes nothing
#     again; with --cascade=foreground the job waits for its pods, and the controller does
#     not replace the pods the garbage collector deletes meanwhile; a job deleted while a
#     missing pod of it waits for its backoff leaves no record in the controller's memory;
#     the job's dump folder (the incident's dumps, stamped with the job's uid) goes
#     --dump-ttl-after-deletion (3 s here) after the job is gone
# About 2 minutes. FTC_BUILD_DIR selects the binaries (e.g. a sanitized controller).
. "$(dirname "$0")/../cluster/lib.sh"
agent_suite lc --gc
if run_controller lc-1 --dump-ttl-after-deletion 3s; then ok "the controller leads and opens its coordinator port"; else bad "controller start"; fi
start_agent node-a,node-b,node-c,node-d,node-e

# job NAME REPLICAS MIN TIMEOUT HANG COMMAND-JSON ARGS-JSON: a TrainingJob manifest
job() {
  cat <<YAML
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1, namespace: $ns}
spec:
  replicas: $2
  minReplicas: $3
  backend: tcp
  timeouts: {collectiveTimeoutSeconds: $4, hangTimeoutSeconds: $5}
  failurePolicy: {maxReplacements: 3, backoffSeconds: 0, onHang: replace}
  template:
    spec:
      containers:
        - name: trainer
          image: local/ftcomm-trainer
          command: $6
          args: $7
YAML
}
tj() { kc get tj "$1" -n $ns -o jsonpath="$2"; }
pods_of() { kc get pods -n $ns -l "ftcomm.dev/job=$1" -o jsonpath='{range .items[*]}{.metadata.name}={.status.phase} {end}'; }
is() { [ "$("${@:2}")" = "$1" ]; }  # is WANT CMD...: CMD prints exactly WANT
proc_alive() { [ -f "$state/pids/$1" ] && kill -0 "$(cat "$state/pids/$1")" 2>/dev/null; }
events() { kc get events.events.k8s.io -n $ns --field-selector "regarding.name=$1" -o jsonpath='{range .items[*]}{.reason}: {.note}{"\n"}{end}'; }

# --- scale a running job up and down --------------------------------------------------------
job grow 2 1 60 4 "[\"$trainer\"]" '["--steps", "1000000", "--step-ms", "20", "--log-every", "1000"]' >"$work/grow.yaml"
check "a 2-rank job applies" kc apply -f "$work/grow.yaml"
formed() { [ "$(tj grow '{.status.phase} {.status.worldSize}')" = "Running 2" ] && [ "$(tj grow '{.status.epoch}')" -ge 1 ]; }
check "it runs: 2 ranks form an epoch with the coordinator" eventually 60 formed
epoch0=$(tj grow '{.status.epoch}')
# Two slots at once: their joiners are admitted in back-to-back epochs; the first one
# drops the older epoch as soon as the newer is announced (docs/recovery.md, "Joiners").
check "scale up: spec.replicas 2 -> 4" kc patch tj grow -n $ns --type=merge -p '{"spec":{"replicas":4}}'
check "the new slots' pods run: grow-2-0, grow-3-0" eventually 30 is "grow-0-0=Running grow-1-0=Running grow-2-0=Running grow-3-0=Running " pods_of grow
check_out "... started as joiners of the running job (FTCOMM_JOINER=1, FTCOMM_WORLD_SIZE=4)" '^1 4$' \
  kc get pod grow-3-0 -n $ns -o jsonpath='{.spec.containers[0].env[?(@.name=="FTCOMM_JOINER")].value} {.spec.containers[0].env[?(@.name=="FTCOMM_WORLD_SIZE")].value}'
check "... and both join it" eventually 60 bash -c "grep -q 'joined at epoch' '$state/logs/grow-2-0.log' && grep -q 'joined at epoch' '$state/logs/grow-3-0.log'"
grown() { [ "$(tj grow '{.status.phase} {.status.worldSize} {.status.alive}')" = "Running 4 4" ]; }
check "status: Running, worldSize 4, alive 4" eventually 30 grown
check_out "... every member has a rank" '^0 1 2 3 $' bash -c \
  "$FTC_KUBECTL get tj grow -n $ns -o jsonpath='{range .status.members[*]}{.rank}{\" \"}{end}' | tr ' ' '\n' | sort -n | tr '\n' ' '"
check_out "... at a later epoch" '^ok$' bash -c "[ \"\$($FTC_KUBECTL get tj grow -n $ns -o jsonpath='{.status.epoch}')\" -gt $epoch0 ] && echo ok"
check_out "an Event says the job was scaled up" '(^|'$'\n'')Scaled: spec.replicas 2 -> 4: slots 2..3 added \(joining the running job\)' events grow
check_out "scaling is not a replacement (no joiner waited out its connect timeout)" '^0$' tj grow '{.status.replacements}'
check "the first ranks trained on" bash -c "kill -0 \$(cat '$state/pids/grow-0-0') && kill -0 \$(cat '$state/pids/grow-1-0')"

epoch1=$(tj grow '{.status.epoch}')
pid2=$(cat "$state/pids/grow-2-0") pid3=$(cat "$state/pids/grow-3-0")
check "scale down: spec.replicas 4 -> 2" kc patch tj grow -n $ns --type=merge -p '{"spec":{"replicas":2}}'
check "the surplus pods go: grow-2-0, grow-3-0" eventually 30 is "grow-0-0=Running grow-1-0=Running " pods_of grow
check "... and so do their processes" eventually 20 bash -c "! kill -0 $pid2 2>/dev/null && ! kill -0 $pid3 2>/dev/null"
shrunk() { [ "$(tj grow '{.status.phase} {.status.worldSize} {.status.alive}')" = "Running 2 2" ] &&
           [ "$(tj grow '{.status.epoch}')" -gt "$epoch1" ]; }
check "status: Running, worldSize 2, alive 2, at a new epoch" eventually 30 shrunk
check_out "... two members" '^0 1 $' tj grow '{range .status.members[*]}{.slot}{" "}{end}'
check_out "an Event says the job was scaled down" '(^|'$'\n'')Scaled: spec.replicas 4 -> 2: slots 2..3 removed \(their pods deleted\)' events grow
check_out "scaling down is not a replacement either" '^0 $' tj grow '{.status.replacements} {.status.incidents}'
sleep 2
check "the two ranks train on" bash -c "kill -0 \$(cat '$state/pids/grow-0-0') && kill -0 \$(cat '$state/pids/grow-1-0')"

# --- a collective timeout ---------------------------------------------------------------------
# Slot 1's first pod sleeps 6 s before each allreduce (--step-ms); its heartbeats go on
# (the runtime's session thread), so this is no hang: its peers wait in the allreduce
# and time out after collectiveTimeoutSeconds (2 s). Its replacement (a joiner) is quick.
cat >"$work/slow-trainer.sh" <<'SH'
if [ "$FTCOMM_SLOT" = 1 ] && [ "$FTCOMM_JOINER" = 0 ]; then ms=6000; else ms=20; fi
exec "$1" --steps 1000000 --step-ms "$ms" --log-every 1000
SH
job slow 3 2 2 2 "[\"/bin/sh\", \"$work/slow-trainer.sh\", \"$trainer\"]" '[]' >"$work/slow.yaml"
check "a 3-rank job whose slot 1 is slow applies (collectiveTimeoutSeconds 2)" kc apply -f "$work/slow.yaml"
timed_out() { [ "$(tj slow '{.status.incidents[0].kind}')" = CollectiveTimeout ]; }
check "a CollectiveTimeout incident appears in status" eventually 60 timed_out
check_out "... naming slot 1's pod as culprit" '^slow-1-0$' tj slow '{.status.incidents[0].culprit}'
dump_path=$(tj slow '{.status.incidents[0].dumpPath}')
echo "# dumpPath $dump_path; analysis: $(head -1 "$dump_path/analysis.txt" 2>/dev/null)"
check_out "... with its dumps in the volume as <ns>/<job>/<incident>/" "^$vol/$ns/slow/" echo "$dump_path"
check "every rank's dump is there (the slow one answered too)" bash -c "[ \$(ls '$dump_path'/rank-*.json | wc -l) = 3 ]"
check "the analysis is next to them" test -s "$dump_path/analysis.json" -a -s "$dump_path/analysis.txt"
check_out "... and the job's uid (.job-uid), for a job re-created under its name later" "^$(tj slow '{.metadata.uid}')\$" cat "$dump_path/.job-uid"
msg=$(tj slow '{.status.incidents[0].message}')
check_out "the incident's message is the analyzer's first line" "^$(head -1 "$dump_path/analysis.txt" | sed 's/[][\.*^$()+?{}|]/\\&/g')\$" echo "$msg"
check_out "a Warning Event CollectiveTimeout names the culprit" 'CollectiveTimeout: .*slow-1-0' events slow
check "onHang replace: slow-1-1 replaces the slow pod" eventually 30 is Running kc get pod slow-1-1 -n $ns -o jsonpath='{.status.phase}'
check "... it joins the job" eventually 60 grep -q "joined at epoch" "$state/logs/slow-1-1.log"
slow_ok() { [ "$(tj slow '{.status.phase} {.status.worldSize}')" = "Running 3" ]; }
check "status: Running with 3 ranks again" eventually 30 slow_ok
check_out "... 1 replacement" '^1$' tj slow '{.status.replacements}'

# --- deletion: the garbage collector and the controller's own cleanup --------------------------
grow_pids="$(cat "$state/pids/grow-0-0") $(cat "$state/pids/grow-1-0")"
created=$(metric ftcomm_controller_pods_created_total)
check_out "the pods and the token Secret are owned by the TrainingJob (blockOwnerDeletion)" \
  '^TrainingJob grow true true TrainingJob grow true$' bash -c "$FTC_KUBECTL get pod grow-0-0 -n $ns -o jsonpath='{.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].name} {.metadata.ownerReferences[0].controller} {.metadata.ownerReferences[0].blockOwnerDeletion} ' &&
  $FTC_KUBECTL get secret grow-ftcomm-token -n $ns -o jsonpath='{.metadata.ownerReferences[0].kind} {.metadata.ownerReferences[0].name} {.metadata.ownerReferences[0].controller}'"
check "kubectl delete tj grow (background cascade)" kc delete tj grow -n $ns --wait=false
no_pods() { [ -z "$(kc get pods -n $ns -l "ftcomm.dev/job=$1" -o name)" ]; }
check "the garbage collector deletes its pods" eventually 60 no_pods grow
check "... and its token Secret" eventually 30 bash -c "! $FTC_KUBECTL get secret grow-ftcomm-token -n $ns 2>/dev/null"
check "... the ranks' processes are gone" eventually 20 bash -c "! kill -0 $grow_pids 2>/dev/null"
check "the controller stops the job's coordinator" eventually 20 grep -q "$ns/grow: stopped its coordinator" "$ctrl_log"
sleep 2
check_out "... and makes no pod for it" "^$created\$" metric ftcomm_controller_pods_created_total
check_out "kube-controller-manager's log shows the collector at work" 'garbagecollector|garbage collector' \
  grep -m1 -iE 'garbagecollector|garbage collector' "$dir/logs/kube-controller-manager.log"

created=$(metric ftcomm_controller_pods_created_total)
slow_pids=$(cat "$state"/pids/slow-* | tr '\n' ' ')
# A third dependent that the test holds with a finalizer keeps the job in its
# foreground deletion until the test lets go, so what happens meanwhile can be seen.
cat >"$work/hold.yaml" <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: slow-hold
  namespace: $ns
  finalizers: [test.ftcomm.dev/hold]
  ownerReferences: [{apiVersion: ftcomm.dev/v1alpha1, kind: TrainingJob, name: slow, uid: "$(tj slow '{.metadata.uid}')", blockOwnerDeletion: true}]
YAML
check "a ConfigMap held by a finalizer also depends on job slow" kc apply -f "$work/hold.yaml"
check "kubectl delete tj slow --cascade=foreground" kc delete tj slow -n $ns --cascade=foreground --wait=false
check "the garbage collector deletes its pods while the job waits" eventually 60 no_pods slow
check "... and its Secret" eventually 30 bash -c "! $FTC_KUBECTL get secret slow-ftcomm-token -n $ns 2>/dev/null"
check "... the ranks' processes are gone" eventually 20 bash -c "! kill -0 $slow_pids 2>/dev/null"
check "the controller stops the job's coordinator" eventually 20 grep -q "$ns/slow: stopped its coordinator" "$ctrl_log"
sleep 2
check_out "the job still waits for its last dependent (deletionTimestamp, foregroundDeletion)" '^[0-9]{4}-.*foregroundDeletion' \
  tj slow '{.metadata.deletionTimestamp} {.metadata.finalizers}'
check_out "... and the controller has replaced none of the pods the collector deleted" "^$created\$" metric ftcomm_controller_pods_created_total
check_out "... nor made any" '^$' kc get pods -n $ns -l ftcomm.dev/job=slow -o name
check "the test lets go of its ConfigMap" kc patch configmap slow-hold -n $ns --type=merge -p '{"metadata":{"finalizers":null}}'
check "then the job is gone" eventually 60 bash -c "! $FTC_KUBECTL get tj slow -n $ns 2>/dev/null"
check "its dump folder stayed while it was being deleted" test -s "$dump_path/rank-0.json"
check "... and goes 3 s after it is gone (--dump-ttl-after-deletion 3s)" eventually 20 bash -c "! test -e '$vol/$ns/slow'"
check "so did the folder of job grow" bash -c "! test -e '$vol/$ns/grow'"

# --- a job deleted while a missing pod waits for its backoff: nothing is left remembered ----------
check_out "with jobs grow and slow gone, the reconciler keeps no record of them" '^0$' metric ftcomm_controller_reconciler_records
job wait 1 1 60 4 "[\"$trainer\"]" '["--steps", "1000000", "--step-ms", "20", "--log-every", "1000"]' |
  sed 's/backoffSeconds: 0/backoffSeconds: 600/' >"$work/wait.yaml"
check "a 1-rank job with a 600 s backoff applies" kc apply -f "$work/wait.yaml"
member() { [ "$(tj wait '{.status.members[0].pod}')" = wait-0-0 ]; }
check "its pod wait-0-0 is a member" eventually 60 member
check "wait-0-0 is deleted behind the controller's back (--force)" kc delete pod wait-0-0 -n $ns --grace-period=0 --force
remembered() { [ "$(metric ftcomm_controller_reconciler_records)" = "$1" ]; }
check "the reconciler remembers the job's token and the missing pod (2 records)" eventually 20 remembered 2
check_out "... whose replacement waits for the backoff" '^$' kc get pods -n $ns -l ftcomm.dev/job=wait -o name
check "kubectl delete tj wait during the backoff" kc delete tj wait -n $ns --wait=false
check "then the reconciler keeps no record of it (0)" eventually 30 remembered 0

# --- no orphans ---------------------------------------------------------------------------------
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=
check_out "the agent left no process behind" '^0$' bash -c "ls '$state/pids' | wc -l"
if kill -TERM "$ctrl_pid" && wait "$ctrl_pid"; then ok "the controller exits 0 on SIGTERM"; else bad "the controller exits 0 on SIGTERM"; fi
ctrl_pid=
if grep -q Sanitizer "$ctrl_log"; then bad "sanitizer report"; grep -A20 Sanitizer "$ctrl_log" | head -30; else ok "no sanitizer report"; fi
[ "$fail" -eq 0 ] || { echo "# controller log:"; tail -40 "$ctrl_log"; echo "# agent log:"; tail -20 "$work/agent.log"; }
finish
