// SPDX-License-Identifier: LGPL-2.1-or-later
//
// cdi-validate — loads the CDI specs of a directory with the reference CDI library
// (container-device-interface, Debian's Go package, built offline in GOPATH mode by
// tests/integration/test_cdi_consumer.py) and applies the named devices to an empty OCI
// spec, as a container runtime does; prints the resulting OCI spec as JSON.
//
//	cdi-validate DIR vendor.com/class=name ...
//
// Exit status 1 with the library's words when a spec does not load or a device does
// not resolve.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	oci "github.com/opencontainers/runtime-spec/specs-go"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: cdi-validate DIR DEVICE...")
		os.Exit(2)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(os.Args[1]), cdi.WithAutoRefresh(false))
	if err != nil {
		fmt.Fprintln(os.Stderr, "loading the specs:", err)
		os.Exit(1)
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, e)
		}
		os.Exit(1)
	}
	spec := &oci.Spec{Version: oci.Version, Process: &oci.Process{Env: []string{"PATH=/bin"}},
		Root: &oci.Root{Path: "rootfs"}, Linux: &oci.Linux{}}
	unresolved, err := cache.InjectDevices(spec, os.Args[2:]...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "injecting", unresolved, ":", err)
		os.Exit(1)
	}
	out, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}
