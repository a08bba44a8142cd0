package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"mesh/host/token"
)

// commandNames are the commands a misspelt one is matched against, in the order
// the overview lists them (enroll, enrol's alias, is not offered beside it).
func commandNames() []string {
	return []string{"enrol", "run", "status", "hooks", "version", "help"}
}

// maxSuggestDistance is how many single-letter edits a misspelt command may be from
// the one suggested: meshctl's (cobra's) rule, so that the two tools suggest alike.
const maxSuggestDistance = 2

// suggest returns the names a mistyped command most likely meant: those within
// maxSuggestDistance edits of it, and those it begins, ignoring case.
func suggest(typed string, names []string) []string {
	typed = strings.ToLower(typed)
	if typed == "" {
		return nil
	}
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, typed) || levenshtein(typed, n) <= maxSuggestDistance {
			out = append(out, n)
		}
	}
	return out
}

// levenshtein is the number of single-rune insertions, deletions and substitutions
// that turn a into b.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// unknownCommand says, in a few lines on w, that cmd is no command of meshhost, with
// the commands it most likely meant, as meshctl says it: the whole overview, printed
// before, buried the mistake under thirty lines.
func unknownCommand(w io.Writer, cmd string) {
	fmt.Fprintf(w, "meshhost: unknown command %s\n", token.HideTokens(strconv.Quote(cmd)))
	if s := suggest(cmd, commandNames()); len(s) > 0 {
		fmt.Fprintf(w, "\nDid you mean this?\n\t%s\n\n", strings.Join(s, "\n\t"))
	}
	fmt.Fprint(w, "run `meshhost --help` for usage\n")
}
