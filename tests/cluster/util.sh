# util.sh - small helpers for scripts that talk to the test cluster; sourced by
# tests/cluster/lib.sh (the suites' harness) and by scripts with a harness of their own
# (tests/bench/controller/run.sh). Needs FTC_APISERVER_URL and FTC_CA_FILE from the
# cluster's env file for write_sa_kubeconfig.

free_port() {  # a TCP port free on 127.0.0.1 now
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

write_sa_kubeconfig() {  # write_sa_kubeconfig FILE TOKEN: the controller's ServiceAccount token as a kubeconfig
  cat >"$1" <<KC
apiVersion: v1
kind: Config
current-context: ftcomm
contexts:
- name: ftcomm
  context: {cluster: local, user: ftcomm-controller, namespace: ftcomm-system}
clusters:
- name: local
  cluster: {server: "$FTC_APISERVER_URL", certificate-authority: "$FTC_CA_FILE"}
users:
- name: ftcomm-controller
  user: {token: "$2"}
KC
}
