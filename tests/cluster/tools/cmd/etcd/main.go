// Command etcd is etcd's own server entry point, built from go.etcd.io/etcd/server/v3
// at the version that tests/cluster/tools/go.mod pins (the one k8s.io/kubernetes
// itself requires), for the integration tests' local control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
