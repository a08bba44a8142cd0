package main

import (
	"errors"
	"flag"
)

func demoCommand() command {
	return command{
		name:    "demo",
		usage:   "",
		summary: "Run a whole mesh on loopback in a temporary directory and narrate each step.",
		setup: func(fs *flag.FlagSet, cio *cliIO) func([]string) error {
			return func([]string) error { return errors.New("the demo is not written yet") }
		},
	}
}
