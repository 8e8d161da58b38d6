#!/usr/bin/env bash
# crd.sh - the TrainingJob CRD on a real kube-apiserver: it installs, a valid job
# gets its defaults, each invalid spec below is rejected with a message that says
# what to fix, kubectl explain documents the fields, kubectl get shows the printer
# columns, the status subresource is separate, and the short name and category work;
# the pod template is checked as a pod (typos refused, explain covers it) and the CRD
# is what scripts/gen-crd.sh makes from this API server's OpenAPI; a name over 63
# characters is refused; the fields fixed while a job is not suspended are refused
# with a message, the others change.
. "$(dirname "$0")/../cluster/lib.sh"
start_cluster

check "CRD applies" kc apply -f "$root/crds/ftcomm.dev_trainingjobs.yaml"
check "CRD is Established" crd_ready
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
check_out "kubectl get shows Replicas, Alive, Epoch, Phase, Replacements, Age" \
  'NAME +REPLICAS +ALIVE +EPOCH +PHASE +REPLACEMENTS +AGE'$'\n''ok +4 ' kc get tj -n t
check_out "category ftcomm lists TrainingJobs" 'trainingjob.ftcomm.dev/ok' kc get ftcomm -n t -o name
kc patch tj ok -n t --type=merge -p '{"status":{"phase":"Running"}}' >/dev/null 2>&1
check_out "status is not written through the main resource" '^$' kc get tj ok -n t -o jsonpath='{.status.phase}'
check "status is written through the status subresource" kc patch tj ok -n t --subresource=status --type=merge -p '{"status":{"phase":"Running","alive":4}}'
check_out "printer columns read status" 'ok +4 +4 +Running' kc get tj -n t
reject-status() { kc patch tj ok -n t --subresource=status --type=merge -p '{"status":{"phase":"Sleeping"}}'; }
check_fails "status.phase is an enum too" 'Unsupported value: "Sleeping"' reject-status
check "status.phase Blocked (pods refused) is a phase" kc patch tj ok -n t --subresource=status --type=merge -p \
  '{"status":{"phase":"Blocked","replacements":2,"incidents":[{"kind":"PodFailed","culprit":"ok-0-0"},{"kind":"Hang","culprit":"ok-3-1"}]}}'
check_out "kubectl get -o wide adds Backend, Last-Incident and Culprit (the newest incident)" \
  'PHASE +REPLACEMENTS +AGE +BACKEND +LAST-INCIDENT +CULPRIT'$'\n''ok +4 +4 +Blocked +2 +[0-9a-z]+ +auto +Hang +ok-3-1' kc get tj -n t -o wide

# --- the pod template is a checked core/v1 PodTemplateSpec ------------------------------------
check "the committed CRD is what scripts/gen-crd.sh makes from crds/trainingjobs.in.yaml and this API server's OpenAPI" \
  "$root/scripts/gen-crd.sh" --check
crd_bytes=$(kc get crd trainingjobs.ftcomm.dev -o json | wc -c)
echo "# the stored CRD is $crd_bytes bytes of JSON"
check "... and stays far below the API server's 3 MiB request limit and kubectl apply's 256 KiB annotation" \
  test "$(python3 -c 'import yaml,json,sys; print(len(json.dumps(yaml.safe_load(open(sys.argv[1])),separators=(",",":"))))' "$root/crds/ftcomm.dev_trainingjobs.yaml")" -lt 200000
reject typo-in-container "  template: {spec: {containers: [{name: a, image: b, comand: [sleep]}]}}" \
  'strict decoding error: unknown field "spec.template.spec.containers\[0\].comand"'
reject typo-in-pod-spec "  template: {spec: {nodeSelecter: {gpu: a100}, containers: [{name: a, image: b}]}}" \
  'unknown field "spec.template.spec.nodeSelecter"'
reject port-not-a-number "  template: {spec: {containers: [{name: a, image: b, ports: [{containerPort: http}]}]}}" \
  'spec.template.spec.containers\[0\].ports\[0\].containerPort: Invalid value: "string": .* must be of type integer'
reject bad-pull-policy "  template: {spec: {containers: [{name: a, image: b, imagePullPolicy: Sometimes}]}}" \
  'imagePullPolicy: Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"'
check "a full pod template applies (resources as numbers and strings, probes, volumes, tolerations, labels)" apply_job full "  template:
    metadata: {labels: {team: a}, annotations: {note: b}}
    spec:
      nodeSelector: {gpu: a100}
      tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
      volumes: [{name: data, emptyDir: {sizeLimit: 1Gi}}]
      containers:
      - name: trainer
        image: example.com/trainer:1
        command: [python, train.py]
        resources: {limits: {cpu: 2, memory: 4Gi, nvidia.com/gpu: 1}}
        ports: [{containerPort: 29500, name: rdzv}]
        readinessProbe: {tcpSocket: {port: rdzv}, periodSeconds: 5}
        volumeMounts: [{name: data, mountPath: /data}]"
check_out "... and keeps every field" '^python 4Gi rdzv /data a100$' kc get tj full -n t -o \
  jsonpath='{.spec.template.spec.containers[0].command[0]} {.spec.template.spec.containers[0].resources.limits.memory} {.spec.template.spec.containers[0].readinessProbe.tcpSocket.port} {.spec.template.spec.containers[0].volumeMounts[0].mountPath} {.spec.template.spec.nodeSelector.gpu}'
check_out "kubectl explain covers the whole pod (tj.spec.template.spec.containers.livenessProbe.httpGet)" \
  'FIELDS:.*path.*port.*scheme' explain tj.spec.template.spec.containers.livenessProbe.httpGet
check_out "kubectl explain says what the controller sets (restartPolicy)" 'Set to Never by the controller' \
  explain tj.spec.template.spec.restartPolicy

# --- names: the pods carry the job's name in a label (63 characters) --------------------------
long=$(printf 'a%.0s' $(seq 64))
reject "$long" "$tmpl" 'metadata.name must be at most 63 characters: the job.s pods carry it in the label ftcomm.dev/job'
check "a 63-character name is accepted" apply_job "${long:1}" "$tmpl"

# --- what may change on an existing job --------------------------------------------------------
patch_ok() { kc patch tj ok -n t --type=merge -p "$1"; }
check "replicas may change" patch_ok '{"spec":{"replicas":5}}'
check "minReplicas may change" patch_ok '{"spec":{"minReplicas":3}}'
check "failurePolicy may change" patch_ok '{"spec":{"failurePolicy":{"maxReplacements":20,"onHang":"dumpOnly"}}}'
check "timeouts.hangTimeoutSeconds may change" patch_ok '{"spec":{"timeouts":{"hangTimeoutSeconds":200}}}'
check_fails "backend is fixed while the job is not suspended" \
  'spec.backend: Invalid value: .*spec.backend is fixed while the job is not suspended .*set spec.suspend: true first' \
  patch_ok '{"spec":{"backend":"nccl"}}'
check_fails "template is fixed while the job is not suspended" \
  'spec.template: Invalid value: .*spec.template is fixed while the job is not suspended \(running pods would keep the old template' \
  patch_ok '{"spec":{"template":{"spec":{"containers":[{"name":"trainer","image":"example.com/trainer:2"}]}}}}'
check_fails "timeouts.collectiveTimeoutSeconds is fixed while the job is not suspended" \
  'spec.timeouts.collectiveTimeoutSeconds is fixed while the job is not suspended' patch_ok '{"spec":{"timeouts":{"collectiveTimeoutSeconds":500}}}'
check_fails "recorder is fixed while the job is not suspended" \
  'spec.recorder is fixed while the job is not suspended' patch_ok '{"spec":{"recorder":{"entries":100}}}'
check_fails "suspending and changing the backend at once is refused too (the pods still run)" \
  'spec.backend is fixed' patch_ok '{"spec":{"suspend":true,"backend":"nccl"}}'
check "suspend" patch_ok '{"spec":{"suspend":true}}'
check "a suspended job's backend, template, collective timeout and recorder may change" \
  patch_ok '{"spec":{"backend":"tcp","timeouts":{"collectiveTimeoutSeconds":500},"recorder":{"entries":100},"template":{"spec":{"containers":[{"name":"trainer","image":"example.com/trainer:2"}]}}}}'
check "resume" patch_ok '{"spec":{"suspend":false}}'
check_out "the job runs with the new spec" '^tcp 500 100 example.com/trainer:2 false$' kc get tj ok -n t -o \
  jsonpath='{.spec.backend} {.spec.timeouts.collectiveTimeoutSeconds} {.spec.recorder.entries} {.spec.template.spec.containers[0].image} {.spec.suspend}'
finish
