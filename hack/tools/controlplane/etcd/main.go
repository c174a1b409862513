// Command etcd is the etcd server of the test control plane, built from Go modules so that no
// prebuilt binary has to be downloaded.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
