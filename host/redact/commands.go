package redact

import "strings"

// A password given to a command as the argument of a flag that names none, as
// `set -x` prints the command a hook runs: `mysql -pSECRET`, `curl -u app:SECRET`,
// `sshpass -p SECRET`, `redis-cli -a SECRET`, `docker login -p SECRET`. The
// value given to a flag that names one (--password) is hidden with the other
// names (named.go); these flags are a letter, and mean a password only after
// their command, so they are read only on a line that runs it.

// passwordFlag is a command's flag whose argument holds a password: all of it,
// or (afterColon) what follows its first ':' (curl's user:password).
type passwordFlag struct {
	flag       string // "-p"; a long one ("--user") takes its value after a blank or '='
	attached   bool   // the value is written right after the flag (mysql's -pSECRET) too
	separate   bool   // the value is the next argument (sshpass -p SECRET)
	afterColon bool
}

// commandFlags are the commands, by their program's name, whose flags hold a
// password, and those flags.
var commandFlags = map[string][]passwordFlag{
	"mysql":        {{flag: "-p", attached: true}},
	"mysqldump":    {{flag: "-p", attached: true}},
	"mysqladmin":   {{flag: "-p", attached: true}},
	"mysqlimport":  {{flag: "-p", attached: true}},
	"mysqlcheck":   {{flag: "-p", attached: true}},
	"mariadb":      {{flag: "-p", attached: true}},
	"mariadb-dump": {{flag: "-p", attached: true}},
	"curl":         {{flag: "-u", attached: true, separate: true, afterColon: true}, {flag: "--user", separate: true, afterColon: true}, {flag: "--proxy-user", separate: true, afterColon: true}},
	"sshpass":      {{flag: "-p", attached: true, separate: true}},
	"redis-cli":    {{flag: "-a", attached: true, separate: true}},
	// docker login, podman login, helm registry login, skopeo login.
	"login": {{flag: "-p", separate: true}},
}

// mayRunCommand reports whether s may hold a line that runs one of commandFlags:
// a text with none of their names is not scanned.
func mayRunCommand(s string) bool {
	for _, w := range []string{"mysql", "mariadb", "curl", "sshpass", "redis-cli", "login"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// hideCommandPasswords returns s with the passwords given to commandFlags'
// flags hidden, on each line from the command's name to the line's end, and in
// a quoted argument that runs one (sh -c 'mysql -pSECRET').
func hideCommandPasswords(s string) string { return hideCommandPasswordsIn(s, 0) }

// maxQuoteDepth bounds how deep in quotes a command is looked for: each level
// reads its text again.
const maxQuoteDepth = 2

func hideCommandPasswordsIn(s string, depth int) string {
	if !mayRunCommand(s) {
		return s
	}
	var b strings.Builder
	last := 0 // s[last:] is not written yet
	hide := func(start, end int) {
		if start >= end || hiddenAt(s, start) {
			return
		}
		b.WriteString(s[last:start])
		b.WriteString(Hidden)
		last = end
	}
	var flags []passwordFlag // the flags of the command the line runs, once named
	pending := -1            // the index in flags of a flag whose value is the next argument
	for i := 0; i < len(s); {
		switch s[i] {
		case '\n', '\r':
			flags, pending = nil, -1
			i++
			continue
		case ' ', '\t':
			i++
			continue
		}
		// An argument: to a blank outside quotes, or the line's end.
		start := i
		rawStart := i
		for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
			if n := hiddenLen(s, i); n > 0 {
				i += n // one argument, though it holds a blank: read so again
				continue
			}
			if isQuote(s[i]) {
				i = quotedEnd(s, i)
				continue
			}
			i++
		}
		arg, end, rawEnd := s[start:i], i, i
		// value hides the password at s[vs:ve] in this argument: the argument
		// whole when a quote is in it, which hidden would pair the quotes
		// after it otherwise when read again (FuzzSecrets).
		value := func(vs, ve int) {
			if strings.ContainsAny(s[vs:ve], "\"'`") {
				vs, ve = rawStart, rawEnd
			}
			hide(vs, ve)
		}
		if len(arg) >= 2 && isQuote(arg[0]) && arg[len(arg)-1] == arg[0] && quotedEnd(s, start) == end {
			// '-pSECRET', "--user=app:SECRET": read inside the quotes, which
			// stay; only an argument quoted whole, whose quotes close each
			// other (FuzzSecrets: "sh -p"0, its inside hidden, lost its close).
			end--
			arg, start = s[start+1:end], start+1
			if pending < 0 && depth < maxQuoteDepth && strings.ContainsAny(arg, " \t") {
				if inner := hideCommandPasswordsIn(arg, depth+1); inner != arg {
					b.WriteString(s[last:start])
					b.WriteString(inner)
					last = end
					continue
				}
			}
		}
		if pending >= 0 {
			f := flags[pending]
			pending = -1
			value(valueStart(s, start, end, f.afterColon), end)
			continue
		}
		if fs, ok := commandFlags[arg[strings.LastIndexByte(arg, '/')+1:]]; ok {
			flags = fs
			continue
		}
		for k, f := range flags {
			switch {
			case arg == f.flag && f.separate:
				pending = k
			case strings.HasPrefix(f.flag, "--") && strings.HasPrefix(arg, f.flag+"="):
				value(valueStart(s, start+len(f.flag)+1, end, f.afterColon), end)
			case f.attached && len(arg) > len(f.flag) && strings.HasPrefix(arg, f.flag) && !strings.HasPrefix(arg, "--"):
				value(valueStart(s, start+len(f.flag), end, f.afterColon), end)
			default:
				continue
			}
			break
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// valueStart is where the password in the argument s[start:end] starts: all of
// it, or after its first ':' (end when it has none: a user alone, no password).
func valueStart(s string, start, end int, afterColon bool) int {
	if !afterColon {
		return start
	}
	if c := strings.IndexByte(s[start:end], ':'); c >= 0 {
		return start + c + 1
	}
	return end
}
