package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"mesh/host/token"
)

// durationValue is a duration flag whose refusal says what a duration looks like:
// the flag package's own says only "parse error", and of "15" nothing about the
// missing unit.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration: give a number and its unit, such as 30s, 5m or 1h")
	}
	*d = durationValue(v)
	return nil
}

// durationFlag defines a duration flag that refuses a malformed value clearly.
func durationFlag(fs *flag.FlagSet, name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	*p = value
	fs.Var((*durationValue)(p), name, usage)
	return p
}

// checkBetween refuses a duration outside [lo, hi] as a usage error that names the
// flag, the bounds and the default.
func checkBetween(name string, d, lo, hi, def time.Duration) error {
	if d < lo || d > hi {
		return usageError{fmt.Sprintf("--%s %s: must be between %s and %s (the default is %s)", name, d, lo, hi, def)}
	}
	return nil
}

// flagHelp prints a flag set's flags as the command line takes them, with two
// dashes, each with its default when it has one.
func flagHelp(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		typ, usage := flag.UnquoteUsage(f)
		if _, ok := f.Value.(*durationValue); ok {
			typ = "duration"
		}
		line := "  --" + f.Name
		if typ != "" {
			line += " " + typ
		}
		usage = strings.ReplaceAll(usage, "\n", "\n    \t")
		switch {
		case f.DefValue == "" || f.DefValue == "false":
		case typ == "string":
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, usage)
	})
}

// flagError is the flag package's refusal as the command line was typed: flags with
// two dashes, as every document spells them.
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if len(name) == 1 {
			// A one-letter flag is typed with one dash ("-i"); meshhost has none.
			return usageError{"unknown flag -" + name + " (meshhost's flags are words: --state, --json, ...)"}
		}
		return usageError{"unknown flag --" + name}
	}
	msg = strings.Replace(msg, " for flag -", " for flag --", 1)
	msg = strings.Replace(msg, "flag needs an argument: -", "flag needs an argument: --", 1)
	return usageError{msg}
}

// helpFor answers `meshhost help [COMMAND...]`: the overview, or a command's help
// as `meshhost COMMAND --help` prints it. An unknown command is a usage error.
func helpFor(args []string, cio *cliIO) int {
	if len(args) == 0 {
		usage(cio.stdout)
		return exitOK
	}
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			fmt.Fprintf(cio.stderr, "meshhost help: say a command, as in `meshhost help run`\n")
			return exitUsage
		}
	}
	return run(append(args[:len(args):len(args)], "--help"), cio)
}

// brokerList is --broker, repeatable: each an address by the token's rules (an
// address a token refuses, a zone, 0.0.0.0 or port 0, was taken and then failed at
// every dial, for as long as the agent ran).
type brokerList []string

func (b *brokerList) String() string { return strings.Join(*b, ",") }

func (b *brokerList) Set(v string) error {
	ap, err := token.ParseBroker(v)
	if err != nil {
		return err
	}
	if ap.Addr().Is6() && ap.Addr().IsLinkLocalUnicast() {
		// Read in a token or an identity from before, as its other brokers
		// work; as a flag, every dial of it failed (connect: invalid argument).
		return errors.New("the broker address is an IPv6 link-local address (fe80::/10), which is not dialled without the zone of its interface: give a global or unique local address")
	}
	*b = append(*b, ap.String())
	return nil
}

// repeatable marks a flag value that may be given more than once.
type repeatable interface{ repeatable() }

func (*brokerList) repeatable() {}

// onceValue refuses a second value for a flag that takes one: the last one used to
// win silently (`run --root A --root B` managed B).
type onceValue struct {
	flag.Value
	name  string
	given bool
	first string
}

func (o *onceValue) Set(v string) error {
	// The same value again means the same (and shell completion parses a command
	// line twice).
	if o.given && v != o.first {
		return fmt.Errorf("given twice (%q, then %q): it takes one value; give it once", o.first, v)
	}
	o.given, o.first = true, v
	return o.Value.Set(v)
}

// onceOnly makes every flag of fs that takes one value refuse a second one; lists
// and switches (--json twice means the same) are left as they are.
func onceOnly(fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(repeatable); ok {
			return
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			return
		}
		f.Value = &onceValue{Value: f.Value, name: f.Name}
	})
}
