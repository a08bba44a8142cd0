package main

import (
	"errors"
	"flag"
	"strconv"
	"strings"

	"mesh/host/token"
)

// errTokenArgument: an argument on the command line holds a join token, or the end
// of one with its secret (see tokenArgError).
var errTokenArgument = errors.New("a join token on the command line")

// tokenArgError is an argument that holds a token. It says which argument, never
// what it holds: the flag package's errors quote a value, and a parser's quote the
// part they choke on (net/netip quoted what followed a token's first ':', which no
// longer starts as a token does), so a message built from the value could carry the
// secret to the terminal and the journal whatever hid tokens after it. It matches
// errTokenArgument; meshhost exits 2.
type tokenArgError struct {
	what  string // "the value of --broker", "argument 3"
	enrol bool   // the command is enrol, which takes a token, elsewhere
}

func (e tokenArgError) Error() string {
	msg := e.what + " holds a join token, or the end of one with its secret; it is not shown. " +
		"A token is never given on the command line, where other users and the shell's history see it"
	if e.enrol {
		return msg + ": meshhost enrol reads it from stdin, --token-file, MESH_TOKEN or the systemd credential mesh-token"
	}
	return msg + ": no flag of this command takes one (meshhost enrol reads it from stdin or --token-file)"
}

func (e tokenArgError) Is(target error) bool { return target == errTokenArgument }

// refuseTokens refuses the first of args that holds a token (token.InArgument), as
// the argument it is, before any of them is parsed: every later message about a
// value (a flag's error, a path that cannot be used, a log line) could quote it.
func refuseTokens(fs *flag.FlagSet, args []string) error {
	for i, a := range args {
		if !token.InArgument(a) {
			continue
		}
		return tokenArgError{what: describeArg(fs, args, i), enrol: fs.Name() == "meshhost enrol"}
	}
	if token.InArgument(strings.Join(args, "\n")) {
		// A wrapped token pasted unquoted: the shell made each line an argument,
		// none of which holds a whole field (a second review).
		return tokenArgError{what: "the arguments, read together (a token wrapped over several lines),", enrol: fs.Name() == "meshhost enrol"}
	}
	return nil
}

// describeArg names args[i] as the command line gives it: a flag's value, a flag,
// or an argument by its place.
func describeArg(fs *flag.FlagSet, args []string, i int) string {
	place := "argument " + strconv.Itoa(i+1) + " after the command"
	for _, a := range args[:i] {
		if a == "--" {
			return place // after "--" every argument is an operand
		}
	}
	if name, ok := flagName(args[i]); ok {
		if n, _, hasValue := strings.Cut(name, "="); hasValue && fs.Lookup(n) != nil && !token.Contains(n) {
			return "the value of --" + n
		}
		return place + " (a flag's name)"
	}
	if i > 0 {
		if name, ok := flagName(args[i-1]); ok && !strings.Contains(name, "=") {
			if f := fs.Lookup(name); f != nil && !isBool(f) {
				return "the value of --" + name
			}
		}
	}
	return place
}

// flagName is a's text after its one or two dashes, if a is written as a flag.
func flagName(a string) (string, bool) {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return "", false
	}
	return strings.TrimPrefix(a[1:], "-"), true
}

// isBool reports whether f is a boolean flag, which takes no separate value.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
