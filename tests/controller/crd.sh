#!/usr/bin/env bash
# crd.sh - the TrainingJob CRD on a real kube-apiserver: it installs, a valid job
# gets its defaults, each invalid spec below is rejected with a message that says
# what to fix, kubectl explain documents the fields, kubectl get shows the printer
# columns, the status subresource is separate, and the short name and category work.
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster

check "CRD applies" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml"
check "CRD is Established" kc wait --for=condition=Established crd/trainingjobs.ftcomm.dev --timeout=20s
kc create namespace t >/dev/null

job() {  # job NAME SPEC-YAML (indented 2): a TrainingJob manifest on stdout
  printf 'apiVersion: ftcomm.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: %s, namespace: t}\nspec:\n%s\n' "$1" "$2"
}
tmpl='  template:
    spec:
      containers: [{name: trainer, image: example.com/trainer:1}]'

apply_job() { job "$1" "$2" | kc apply -f - ; }
eventually 20 apply_job ok "  replicas: 4
$tmpl" || true
check_out "a valid job is accepted" "ok" kc get tj ok -n t -o name
check_out "defaults: backend auto, failurePolicy, timeouts, recorder, suspend" \
  '^auto 10 10 true replace replace 600 300 true 2000 false$' \
  kc get tj ok -n t -o jsonpath='{.spec.backend} {.spec.failurePolicy.maxReplacements} {.spec.failurePolicy.backoffSeconds} {.spec.failurePolicy.avoidFailedNodes} {.spec.failurePolicy.onHang} {.spec.failurePolicy.mode} {.spec.timeouts.collectiveTimeoutSeconds} {.spec.timeouts.hangTimeoutSeconds} {.spec.recorder.enabled} {.spec.recorder.entries} {.spec.suspend}'

# Invalid specs: NAME | SPEC | what the message must say.
reject() { check_fails "rejected: $1" "$3" apply_job "$1" "$2"; }
reject min-above-replicas "  replicas: 2
  minReplicas: 3
$tmpl" 'spec.minReplicas must not exceed spec.replicas: lower minReplicas or raise replicas'
reject zero-replicas "  replicas: 0
$tmpl" 'spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1'
reject replicas-not-a-number "  replicas: three
$tmpl" 'spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer'
reject unknown-backend "  backend: mpi
$tmpl" 'spec.backend: Unsupported value: "mpi": supported values: "auto", "nccl", "tcp"'
reject unknown-on-hang "  failurePolicy: {onHang: ignore}
$tmpl" 'spec.failurePolicy.onHang: Unsupported value: "ignore": supported values: "replace", "dumpOnly", "restartAll"'
reject unknown-mode "  failurePolicy: {mode: sometimes}
$tmpl" 'spec.failurePolicy.mode: Unsupported value: "sometimes": supported values: "replace", "restartAll"'
reject negative-budget "  failurePolicy: {maxReplacements: -1}
$tmpl" 'spec.failurePolicy.maxReplacements: Invalid value: -1: .* should be greater than or equal to 0'
reject backoff-too-long "  failurePolicy: {backoffSeconds: 7200}
$tmpl" 'spec.failurePolicy.backoffSeconds: Invalid value: 7200: .* should be less than or equal to 3600'
reject zero-collective-timeout "  timeouts: {collectiveTimeoutSeconds: 0}
$tmpl" 'spec.timeouts.collectiveTimeoutSeconds: Invalid value: 0: .* should be greater than or equal to 1'
reject hang-after-timeout "  timeouts: {collectiveTimeoutSeconds: 60, hangTimeoutSeconds: 120}
$tmpl" 'hangTimeoutSeconds must not exceed spec.timeouts.collectiveTimeoutSeconds'
reject zero-recorder-entries "  recorder: {entries: 0}
$tmpl" 'spec.recorder.entries: Invalid value: 0: .* should be greater than or equal to 1'
reject no-template "  replicas: 2" 'spec.template: Required value'
reject no-containers "  template: {spec: {}}" 'spec.template.spec.containers: Required value'
reject empty-containers "  template: {spec: {containers: []}}" 'spec.template.spec.containers: Invalid value: 0: .* should have at least 1 items'
reject container-without-image "  template: {spec: {containers: [{name: a}]}}" 'spec.template.spec.containers\[0\].image: Required value'

explain() { kc explain "$@"; }
eventually 20 explain tj.spec.failurePolicy || true
check_out "kubectl explain tj.spec.failurePolicy documents the fields" \
  'maxReplacements.*Budget of replacement pods' explain tj.spec.failurePolicy
check_out "kubectl explain shows the onHang enum" 'ENUM:'$'\n'' +replace'$'\n'' +dumpOnly'$'\n'' +restartAll' explain tj.spec.failurePolicy.onHang
check_out "kubectl explain tj.status.conditions" 'lastTransitionTime' explain tj.status.conditions
check_out "kubectl get shows Replicas, Alive, Epoch, Phase, Age" \
  'NAME +REPLICAS +ALIVE +EPOCH +PHASE +AGE'$'\n''ok +4 ' kc get tj -n t
check_out "category ftcomm lists TrainingJobs" 'trainingjob.ftcomm.dev/ok' kc get ftcomm -n t -o name
kc patch tj ok -n t --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null 2>&1
check_out "status is not written through the main resource" '^$' kc get tj ok -n t -o jsonpath='{.status.phase}'
check "status is written through the status subresource" kc patch tj ok -n t --subresource=status --type=merge -p '{"status":{"phase":"Running","alive":4}}'
check_out "printer columns read status" 'ok +4 +4 +Running' kc get tj -n t
reject-status() { kc patch tj ok -n t --subresource=status --type=merge -p '{"status":{"phase":"Sleeping"}}'; }
check_fails "status.phase is an enum too" 'Unsupported value: "Sleeping"' reject-status
finish
