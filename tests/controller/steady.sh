#!/usr/bin/env bash
# steady.sh - ftcomm-controller's steady state against a real kube-apiserver, with
# exactly the RBAC in deploy/ (its ServiceAccount token) and leader election on:
#   - once the jobs' pods and token Secrets exist, an idle window sees no request
#     to the API server but the watches and one PUT of the Lease per retry period
#     (2 s): no GET of it (the controller's own request counters)
#   - when someone else writes the Lease, the leader's next PUT gets a 409; it reads
#     the Lease once (GET), renews it and goes on leading
#   - the connections are reused while three watches hold theirs
#   - a deleted token Secret is not asked for while no pod needs it; a pod that waits
#     for it (the kubelet's CreateContainerConfigError) gets it made again at once, with
#     the same token (it derives from the job's uid), and an Event says so
#   - a restarted controller whose jobs run sends no POST at all (no Secret made
#     again, no 409) and creates no pod; a Secret deleted while no controller ran is
#     made, with one POST (and one for its Event), once a pod waits for it
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster
ctl=$build/bin/ftcomm-controller
[ -x "$ctl" ] || { echo "FAIL - build first: make test-bins"; exit 1; }
# The first idle window is longer than the 30 s period at which older controllers read
# every token Secret again.
idle=${FTC_STEADY_IDLE:-31}

check "CRD, namespace and RBAC apply" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml" -f "$root/deploy/namespace.yaml" -f "$root/deploy/rbac.yaml"
crd_ready
token=$(kc -n ftcomm-system create token ftcomm-controller --duration=1h)
write_sa_kubeconfig "$work/sa.kubeconfig" "$token"

ctrl_log=$work/controller.log
port=
start_controller() {  # start_controller ID
  echo "=== controller $1" >>"$ctrl_log"
  FTCOMM_LOG_LEVEL=${FTC_STEADY_LOG:-info} "$ctl" --kubeconfig "$work/sa.kubeconfig" --listen-address 127.0.0.1:0 --identity "steady-$1" \
    --leader-label=false --coordinator-address coord.test:7470 --dump-dir /dumps \
    --coordinator-bind 127.0.0.1:0 --dump-volume "$work/dumps" >>"$ctrl_log" 2>&1 &
  ctrl_pid=$!
  eventually 10 grep -q "identity steady-$1\$" "$ctrl_log" || return 1
  port=$(ctrl_port)
  eventually 20 curl -sf "http://127.0.0.1:$port/readyz"
}
stop_controller() {
  kill -TERM "$ctrl_pid"
  wait "$ctrl_pid"
  local rc=$?
  ctrl_pid=
  return $rc
}
metrics() { curl -sf --max-time 10 "http://127.0.0.1:$port/metrics"; }
metric() { metrics | awk -v m="$1" '$1 == m { print $2 }'; }
# Requests other than watches (a watch is counted when it ends), as "VERB CODE N"
# lines, and their sum; those for the Lease ("VERB N"); and the sum of the others.
# Each reads the metrics given (one snapshot, so that a Lease renewal landing between
# two scrapes cannot make the counts disagree), else scrapes them.
requests() { awk -F'[{}" ]+' '/^ftcomm_controller_api_requests_total/ && $3 != "WATCH" { print $3, $5, $NF }' <<<"${1:-$(metrics)}" | sort; }
lease_requests() { awk -F'[{}" ]+' '/^ftcomm_controller_lease_requests_total/ { print $3, $NF }' <<<"${1:-$(metrics)}" | sort; }
lease_req() { lease_requests "${2:-}" | awk -v v="$1" '$1 == v { print $2 }'; }
nonwatch() { local m; m=$(metrics); { requests "$m"; lease_requests "$m" | awk '{ print $1, "lease", -$2 }'; } | awk '{ n += $3 } END { print n + 0 }'; }
# idle_window SECONDS: nothing but the Lease's PUTs (one per 2 s retry period) goes out.
idle_window() {
  local before after lget0 lput0 lget1 lput1 d lo hi snap
  snap=$(metrics); before=$(requests "$snap"); lget0=$(lease_req GET "$snap"); lput0=$(lease_req PUT "$snap")
  sleep "$1"
  snap=$(metrics); after=$(requests "$snap"); lget1=$(lease_req GET "$snap"); lput1=$(lease_req PUT "$snap")
  d=$((lput1 - lput0)) lo=$(($1 / 2 - 1)) hi=$(($1 / 2 + 1))
  # The only line that may change is PUT 200, by exactly the Lease's PUTs.
  local want
  want=$(echo "$before" | awk -v d="$d" '$1 == "PUT" && $2 == 200 { $3 += d } { print }')
  if [ "$after" = "$want" ] && [ "$lget1" = "$lget0" ] && [ "$d" -ge "$lo" ] && [ "$d" -le "$hi" ]; then
    ok "idle for $1 s: no request but the watches and $d PUTs of the Lease (no GET)"
  else
    bad "idle for $1 s: expected only $lo..$hi PUTs of the Lease and no other request; Lease PUTs $d, GETs $((lget1 - lget0))"
    diff <(echo "$before") <(echo "$after") | sed 's/^/       /'
    metrics | grep -E '^ftcomm_controller_(reconciles_total|workqueue)' | sed 's/^/       /'
  fi
}
# Nothing queued or waiting for a delay in the work queue.
queue_idle() { metrics | awk '$1 == "ftcomm_controller_workqueue_depth" || $1 == "ftcomm_controller_workqueue_waiting" { n += $2 } END { exit n != 0 }'; }
# Wait until the work queue is idle and no request but watches has gone out for 3 s
# in a row (at most 60 s), as the scale bench does.
settle() {
  local last now still=0 end=$(( $(date +%s) + 60 ))
  last=$(nonwatch)
  while [ "$(date +%s)" -lt "$end" ]; do
    sleep 1
    now=$(nonwatch)
    if [ "$now" = "$last" ] && queue_idle; then still=$((still + 1)); [ $still -ge 3 ] && return 0; else still=0; fi
    last=$now
  done
  return 1
}

if start_controller 1; then ok "controller starts with the ServiceAccount token, takes the Lease and becomes ready"; else bad "controller start"; cat "$ctrl_log"; fi
kc create namespace steady >/dev/null
for j in a b c; do
  cat <<YAML
---
apiVersion: ftcomm.dev/v1alpha1
kind: TrainingJob
metadata: {name: job-$j, namespace: steady}
spec:
  replicas: 2
  backend: tcp
  failurePolicy: {backoffSeconds: 0}
  template:
    spec:
      containers: [{name: trainer, image: example.com/trainer:1}]
YAML
done >"$work/jobs.yaml"
check "three TrainingJobs apply" kc apply -f "$work/jobs.yaml"
count_pods() { [ "$(kc get pods -n steady -l app.kubernetes.io/managed-by=ftcomm-controller -o name | wc -l)" -eq 6 ]; }
count_secrets() { [ "$(kc get secrets -n steady -l app.kubernetes.io/managed-by=ftcomm-controller -o name | wc -l)" -eq 3 ]; }
check "six pods exist" eventually 30 count_pods
check "three token Secrets exist" eventually 10 count_secrets
# A Secret of someone else's in the same namespace: the controller neither needs nor sees it.
check "an unrelated Secret is created" kc create secret generic unrelated -n steady --from-literal=token=abc

# --- idle: the watches only ---------------------------------------------------------
check "the controller settles (no request but the Lease's for 3 s)" settle
idle_window "$idle"

# --- someone else writes the Lease: one 409, one GET, and the controller still leads ----
lget0=$(lease_req GET) c409=$(requests | awk '$1 == "PUT" && $2 == 409 { print $3 }')
check "someone annotates the Lease" kc -n ftcomm-system annotate lease ftcomm-controller test.ftcomm.dev/touched=1
reread() { [ "$(lease_req GET)" -gt "$lget0" ]; }
check "the leader's next renewal gets a 409 and reads the Lease again" eventually 10 reread
check_out "... once (one GET, one 409)" "^1 1\$" echo "$(( $(lease_req GET) - lget0 )) $(( $(requests | awk '$1 == "PUT" && $2 == 409 { print $3 }') - ${c409:-0} ))"
check_out "... saying so" 'renewing Lease ftcomm-system/ftcomm-controller without reading it failed' grep 'without reading it' "$ctrl_log"
check_out "... and it still leads" '^1$' metric ftcomm_controller_leader
holder() { kc -n ftcomm-system get lease ftcomm-controller -o jsonpath='{.spec.holderIdentity} {.metadata.annotations.test\.ftcomm\.dev/touched}'; }
check_out "... holding the Lease it renewed (the annotation kept)" '^steady-1 1$' holder
check "the controller settles again" settle
idle_window 10

# The pool keeps the connections: three watches, two workers and the status writes
# share a handful (a pool that is too small opens one per request).
reqs=$(nonwatch)
conns=$(metric ftcomm_controller_api_connections_total)
if [ "$reqs" -ge 20 ] && [ "${conns:-999}" -le 12 ]; then ok "$reqs requests and 3 watches over $conns connections"; else
  bad "$reqs requests and 3 watches over ${conns:-?} connections (at most 12 expected: the pool reuses them)"; fi

# --- a deleted token Secret comes back when a pod needs it ---------------------------------
secret_token() { kc get secret "$1" -n steady -o jsonpath='{.data.token}' 2>/dev/null; }
# Play the kubelet: a container that cannot start without the Secret, and one that can.
waits_for() {  # waits_for POD SECRET
  kc patch pod "$1" -n steady --subresource=status --type=merge -p '{"status":{"containerStatuses":[{"name":"trainer","image":"example.com/trainer:1","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"CreateContainerConfigError","message":"secret \"'"$2"'\" not found"}}}]}}'
}
starts() { kc patch pod "$1" -n steady --subresource=status --type=merge -p '{"status":{"containerStatuses":[{"name":"trainer","image":"example.com/trainer:1","imageID":"","ready":false,"restartCount":0,"state":{"waiting":{"reason":"ContainerCreating"}}}]}}'; }
token_a=$(secret_token job-a-ftcomm-token)
check "the token Secret of job-a is deleted by someone" kc delete secret job-a-ftcomm-token -n steady
idle_window 5  # no pod needs it yet: nothing is sent for it
t0=$(date +%s%N)
check "pod job-a-0-0 waits for it (CreateContainerConfigError)" waits_for job-a-0-0 job-a-ftcomm-token
same_token() { [ -n "$token_a" ] && [ "$(secret_token job-a-ftcomm-token)" = "$token_a" ]; }
if eventually 5 same_token; then
  ok "... and it is made again with the same token within 5 s ($(( ($(date +%s%N) - t0) / 1000000 )) ms, with kubectl's own latency)"
else
  bad "... and it is made again with the same token within 5 s"
fi
check_out "... saying so in an Event" 'TokenSecretRecreated' \
  kc get events -n steady --field-selector reason=TokenSecretRecreated -o jsonpath='{.items[*].reason}'
check "the container starts" starts job-a-0-0
check "the controller settles again" settle

# --- restart: nothing created again -----------------------------------------------------
tokens_before=$(for j in a b c; do secret_token "job-$j-ftcomm-token"; echo; done)
if stop_controller; then ok "SIGTERM stops the controller with status 0"; else bad "SIGTERM stops the controller with status 0"; fi
if start_controller 2; then ok "a new controller becomes ready"; else bad "controller restart"; tail -20 "$ctrl_log"; fi
check "... and settles" settle
posts=$(requests | awk '$1 == "POST" { n += $3 } END { print n + 0 }')
if [ "$posts" = 0 ]; then
  ok "the restarted controller sent no POST (no token Secret made again, no 409)"
else
  bad "the restarted controller sent $posts POST(s)"
  requests | sed 's/^/       /'
fi
check_out "... and created no pod" '^0$' metric ftcomm_controller_pods_created_total
tokens_after=$(for j in a b c; do secret_token "job-$j-ftcomm-token"; echo; done)
check "the token Secrets are unchanged" test "$tokens_before" = "$tokens_after"
idle_window 10

# --- a Secret deleted while no controller runs: made once a pod waits for it ------------------
if stop_controller; then ok "SIGTERM stops the controller with status 0"; else bad "SIGTERM stops the controller with status 0"; fi
check "the token Secret of job-b is deleted while no controller runs" kc delete secret job-b-ftcomm-token -n steady
if start_controller 3; then ok "a new controller becomes ready"; else bad "controller restart"; tail -20 "$ctrl_log"; fi
check "... and settles" settle
posts_now() { requests | grep '^POST' || true; }
check_out "... and sends no POST while no pod needs the deleted Secret" '^$' posts_now
check "pod job-b-1-0 waits for it" waits_for job-b-1-0 job-b-ftcomm-token
check "the Secret of job-b exists again" eventually 5 secret_token job-b-ftcomm-token
posts=$(requests | grep '^POST')
check_out "... with two POSTs, both created (201): the Secret and its Event; no 409" '^POST 201 2$' echo "$posts"
check_out "... the Event TokenSecretRecreated on job-b" 'job-b' \
  kc get events.events.k8s.io -n steady --field-selector reason=TokenSecretRecreated -o jsonpath='{.items[*].regarding.name}'
if grep -q 'Forbidden' "$ctrl_log"; then bad "the controller was refused something by RBAC"; grep Forbidden "$ctrl_log" | head -5 | sed 's/^/       /'; else ok "no request of the controller was forbidden by RBAC"; fi
if stop_controller; then ok "SIGTERM stops the controller with status 0"; else bad "SIGTERM stops the controller with status 0"; fi
finish
