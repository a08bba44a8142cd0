package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpCommand is `meshctl help [COMMAND]`: the overview, or a command's help as
// `meshctl COMMAND --help` prints it. Cobra's own prints the overview for a command
// that does not exist and exits 0, so that a script asking about a misspelt
// command is told nothing went wrong.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:         "help [command]",
		Short:       "Help about any command",
		Long:        "Print a command's help, as `meshctl COMMAND --help` does; without one, the list of commands.",
		Annotations: map[string]string{"usage": "[COMMAND]"},
		Args:        cobra.ArbitraryArgs,
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, c := range root.Commands() {
				if !c.Hidden && c.Name() != "help" {
					names = append(names, c.Name()+"\t"+c.Short)
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			target, _, err := root.Find(args)
			if err != nil || target == nil {
				return commandError{usagef("no command %q: `meshctl --help` lists them", strings.Join(args, " "))}
			}
			target.InitDefaultHelpFlag()
			return target.Help()
		},
	}
}

// flagError is a flag value cobra refused, said as a usage error. A duration that
// does not parse says what one looks like: Go's own text ("missing unit in
// duration") names neither the flag's form nor an example.
func flagError(err error) error {
	var twice givenTwiceError
	if errors.As(err, &twice) {
		return usageError{twice.Error()}
	}
	var empty emptyLabelError
	if errors.As(err, &empty) {
		// Its own text names the flag and the value.
		return usageError{empty.Error()}
	}
	var ive *pflag.InvalidValueError
	if errors.As(err, &ive) && ive.GetFlag() != nil && ive.GetFlag().Value.Type() == "duration" {
		if o, ok := ive.GetFlag().Value.(*onceValue); ok && isDays(o.Value) {
			// It takes days too, and says so.
			return usagef("--%s %v", ive.GetFlag().Name, errors.Unwrap(ive))
		}
		if _, own := ive.GetFlag().Value.(optionalValue); !own {
			return usagef("--%s %q: not a duration: give a number and its unit, such as 30s, 5m or 1h", ive.GetFlag().Name, ive.GetValue())
		}
		// --wait's own refusal names the flag and what it takes.
		return usageError{errors.Unwrap(ive).Error()}
	}
	if errors.As(err, &ive) && ive.GetFlag() != nil {
		// Go's own text is strconv's ("parsing "1e9": invalid syntax").
		switch ive.GetFlag().Value.Type() {
		case "int", "int64":
			return usagef("--%s %q: not a whole number (such as %s; --help names the range it takes)", ive.GetFlag().Name, ive.GetValue(), exampleNumber)
		case "uint", "uint64":
			// A negative one is refused here, before the flag's range is
			// checked: the range is named too (0 is not in every one).
			return usagef("--%s %q: not a whole number of 0 or more (such as %s; --help names the range it takes)", ive.GetFlag().Name, ive.GetValue(), exampleNumber)
		}
	}
	return usageError{err.Error()}
}

// exampleNumber is the number a refusal of a malformed one gives as an example.
const exampleNumber = "5000"

// Bounds of the durations every command that calls the control plane takes: past
// them a value is a typo (1000h for 10s), not a choice.
const (
	minTimeout = time.Second
	// maxTimeout: a call that has not been answered in ten minutes will not be.
	maxTimeout = 10 * time.Minute
	// maxLeaderWait: an election takes seconds; a control plane without a leader
	// for ten minutes has lost its quorum, which waiting does not mend.
	maxLeaderWait = 10 * time.Minute
)

// checkDuration refuses d outside [lo, hi] as a usage error naming the flag, its
// bounds and its default.
func checkDuration(name string, d, lo, hi, def time.Duration) error {
	if d < lo || d > hi {
		return usagef("--%s %s: must be between %s and %s (the default is %s)", name, d, lo, hi, def)
	}
	return nil
}

// rootUsageError is a command line naming no command: the overview goes where
// errors go, so that stdout stays empty for whatever reads it.
func rootUsageError(root *cobra.Command, cio *cliIO) int {
	fmt.Fprint(cio.stderr, "meshctl: say which command\n\n")
	printUsage(cio.stderr, root)
	return exitUsage
}
