// Command package builds the mesh's .deb packages from built binaries:
//
//	go run ./dist/cmd/package --meshctl bin/meshctl --meshhost bin/meshhost --out dist
//
// `task package` builds the binaries and runs it. See dist/pack.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"mesh/dist/pack"
)

func main() {
	var o pack.Options
	flag.StringVar(&o.Meshctl, "meshctl", "bin/meshctl", "the built meshctl")
	flag.StringVar(&o.Meshhost, "meshhost", "bin/meshhost", "the built meshhost")
	flag.StringVar(&o.Out, "out", "dist", "where to write the .deb files")
	flag.StringVar(&o.Version, "version", "", "package version (default: the one meshctl reports)")
	flag.StringVar(&o.Arch, "arch", "", "Go architecture of the binaries (default: this machine's)")
	flag.StringVar(&o.Root, "root", ".", "the module root")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "package: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o.Log = os.Stderr
	debs, err := pack.Build(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "package:", err)
		os.Exit(1)
	}
	for _, d := range debs {
		fmt.Println(d)
	}
}
