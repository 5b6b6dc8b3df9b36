// etcd for Weft's integration tests: the upstream etcd command (etcdmain), built as its own module
// so its dependency versions never mix with kube-apiserver's.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
