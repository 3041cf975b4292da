// Command etcd is a thin wrapper around the upstream etcd server entry point.
//
// go.etcd.io/etcd/server/v3 cannot be built with `go install ...@version`
// because its go.mod carries replace directives; making it a dependency of
// this module sidesteps that while running exactly the upstream main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
