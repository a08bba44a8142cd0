package redact

import (
	"slices"
	"strings"
)

// A password given to a command as the argument of a flag that names none, as
// `set -x` prints the command a hook runs: `mysql -pSECRET`, `curl -u app:SECRET`,
// `sshpass -p SECRET`, `redis-cli -a SECRET`, `docker login -p SECRET`. The
// value given to a flag that names one (--password) is hidden with the other
// names (named.go); these flags are a letter, and mean a password only after
// their command, so they are read only from the command's name to the end of
// the command it runs (a line's end, or a shell's ';', '|' or '&').

// passwordFlag is a command's flag whose argument holds a password: all of it,
// or (afterColon) what follows its first ':' (curl's user:password).
type passwordFlag struct {
	flag       string // "-p"; a long one ("--user") takes its value after a blank or '='
	attached   bool   // the value is written right after the flag (mysql's -pSECRET) too
	separate   bool   // the value is the next argument (sshpass -p SECRET)
	afterColon bool
	// clustered are the command's short flags without a value that may come
	// before this one in one argument (curl -fsSLu user:SECRET).
	clustered string
}

// command is what a command's name says of the arguments after it.
type command struct {
	flags []passwordFlag
	// operandEnds: the command's first argument that is no option is the
	// program it runs (sshpass), whose flags are its own.
	operandEnds bool
	// after are the words one of which must come right before the name (login:
	// docker login, not a sentence's "login").
	after []string
}

// curlNoValue are curl's short flags that take no value.
const curlNoValue = "fsSLvkiIgGnNqZjJOR0123456#"

var (
	mysqlFlags = command{flags: []passwordFlag{{flag: "-p", attached: true}}}
	ldapFlags  = command{flags: []passwordFlag{{flag: "-w", attached: true, separate: true}}}
)

// commandFlags are the commands, by their program's name, whose flags hold a
// password, and those flags.
var commandFlags = map[string]command{
	"mysql": mysqlFlags, "mysqldump": mysqlFlags, "mysqladmin": mysqlFlags, "mysqlimport": mysqlFlags, "mysqlcheck": mysqlFlags, "mysqlshow": mysqlFlags,
	"mariadb": mysqlFlags, "mariadb-dump": mysqlFlags, "mariadb-admin": mysqlFlags, "mariadb-import": mysqlFlags, "mariadb-check": mysqlFlags,
	"curl": {flags: []passwordFlag{
		{flag: "-u", attached: true, separate: true, afterColon: true, clustered: curlNoValue},
		{flag: "-U", attached: true, separate: true, afterColon: true, clustered: curlNoValue},
		{flag: "--user", separate: true, afterColon: true}, {flag: "--proxy-user", separate: true, afterColon: true},
	}},
	"sshpass":    {flags: []passwordFlag{{flag: "-p", attached: true, separate: true}}, operandEnds: true},
	"redis-cli":  {flags: []passwordFlag{{flag: "-a", attached: true, separate: true}}},
	"mongo":      {flags: []passwordFlag{{flag: "-p", separate: true}}},
	"mongosh":    {flags: []passwordFlag{{flag: "-p", separate: true}}},
	"sqlcmd":     {flags: []passwordFlag{{flag: "-P", attached: true, separate: true}}},
	"ldapsearch": ldapFlags, "ldapadd": ldapFlags, "ldapmodify": ldapFlags, "ldapdelete": ldapFlags, "ldapwhoami": ldapFlags, "ldappasswd": ldapFlags,
	"login": {flags: []passwordFlag{{flag: "-p", attached: true, separate: true}},
		after: []string{"docker", "podman", "buildah", "skopeo", "registry", "oras", "nerdctl", "crane"}},
}

// mayRunCommand reports whether s may hold a line that runs one of commandFlags:
// a text with none of their names is not scanned.
func mayRunCommand(s string) bool {
	for _, w := range []string{"mysql", "mariadb", "curl", "sshpass", "redis-cli", "mongo", "sqlcmd", "ldap", "login"} {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// hideCommandPasswords returns s with the passwords given to commandFlags'
// flags hidden, from the command's name to the end of the command it runs, and
// in a quoted argument that runs one (sh -c 'mysql -pSECRET'), also when its
// quote closes on a later line (a script) or past the text's end (a text cut
// short: SecretsOfStart).
func hideCommandPasswords(s string) string { return hideCommandPasswordsIn(s, 0, false) }

// maxQuoteDepth bounds how deep in quotes a command is looked for: each level
// reads its text again.
const maxQuoteDepth = 2

// inSingle says s is the text inside single quotes, where a shell's command
// writes a quote as '\” (set -x): read as one quote of the command's.
func hideCommandPasswordsIn(s string, depth int, inSingle bool) string {
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
	var cmd *command // the command whose arguments are read, once named
	pending := -1    // the index in cmd.flags of a flag whose value is the next argument
	previous := ""   // the argument before, as a name
	var quoted [][2]int
	for i := 0; i < len(s); {
		if n := continuation(s, i); n > 0 {
			i += n // a line continued: the same command (a fourth review)
			continue
		}
		switch s[i] {
		case '\n', '\r', ';', '|', '&', '(', ')':
			// The command's end: what follows runs another (a second review:
			// mysql … && cp -pr a b had r hidden), or a subshell's ($(mysql …)).
			cmd, pending, previous = nil, -1, ""
			i++
			continue
		case ' ', '\t':
			i++
			continue
		}
		// An argument: to a blank or a shell's separator outside quotes, or the
		// line's end; and the text inside each of its quotes.
		start, rawStart := i, i
		quoted = quoted[:0]
		for i < len(s) && !strings.ContainsRune(argEnds, rune(s[i])) && continuation(s, i) == 0 {
			switch {
			case hiddenLen(s, i) > 0:
				i += hiddenLen(s, i) // one argument, though it holds a blank: read so again
			case s[i] == '\\' && i+1 < len(s) && s[i+1] != '\n' && s[i+1] != '\r':
				i += 2
			case inSingle && strings.HasPrefix(s[i:], singleInSingle):
				// 'echo '\''hi'\''; sshpass -p …': the command's own quotes
				// (a fourth review).
				qs := i + len(singleInSingle)
				e := lineEnd(s, qs)
				if k := strings.Index(s[qs:e], singleInSingle); k >= 0 {
					quoted = append(quoted, [2]int{qs, qs + k})
					i = qs + k + len(singleInSingle)
				} else {
					quoted = append(quoted, [2]int{qs, e})
					i = e
				}
			case isQuote(s[i]):
				qs, closed := i, false
				i, closed = shellQuoteEnd(s, i)
				inner := i
				if closed {
					inner--
				}
				quoted = append(quoted, [2]int{qs + 1, inner})
			default:
				i++
			}
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
		if pending < 0 && depth < maxQuoteDepth {
			// A command in quotes (sh -c 'mysql …'), wherever they stand in the
			// argument ({"cmd": "mysql …"}, a fourth review), also when they close
			// on a later line (bash -c 'mysql …\necho done'), or past the text's
			// end (a third review: a long sh -c '…' cut by SecretsOfStart was not
			// read, where the whole text's was).
			changed := false
			for _, q := range quoted {
				text := s[q[0]:q[1]]
				if !strings.ContainsAny(text, " \t") {
					continue
				}
				single := q[0] > 0 && s[q[0]-1] == '\'' && !(inSingle && strings.HasSuffix(s[:q[0]], singleInSingle))
				if inner := hideCommandPasswordsIn(text, depth+1, single); inner != text {
					b.WriteString(s[last:q[0]])
					b.WriteString(inner)
					last, changed = q[1], true
				}
			}
			if changed {
				previous = ""
				continue
			}
		}
		if len(quoted) == 1 && quoted[0][0] == start+1 && (quoted[0][1] == end-1 && end-1 > start && s[end-1] == s[start] || quoted[0][1] == end) {
			// '-pSECRET', "--user=app:SECRET": read inside the quotes, which
			// stay; only an argument quoted whole (FuzzSecrets: "sh -p"0, its
			// inside hidden, lost its close), or by a quote that does not close.
			arg, start, end = s[quoted[0][0]:quoted[0][1]], quoted[0][0], quoted[0][1]
		}
		name := strings.TrimLeft(arg[strings.LastIndexByte(arg, '/')+1:], "$<{!\\")
		if pending >= 0 {
			f := cmd.flags[pending]
			pending = -1
			value(valueStart(s, start, end, f.afterColon), end)
			previous = name
			continue
		}
		if c, ok := commandFlags[name]; ok && (len(c.after) == 0 || slices.Contains(c.after, previous)) && !slices.Contains(namingOptions, previous) {
			cmd, previous = &c, name
			continue
		}
		previous = name
		if cmd == nil {
			continue
		}
		if cmd.operandEnds && !strings.HasPrefix(arg, "-") {
			// sshpass's program: its flags are its own (ssh -p 2222).
			cmd = nil
			continue
		}
		for k, f := range cmd.flags {
			switch {
			case arg == f.flag && f.separate:
				pending = k
			case strings.HasPrefix(f.flag, "--") && strings.HasPrefix(arg, f.flag+"="):
				value(valueStart(s, start+len(f.flag)+1, end, f.afterColon), end)
			case f.attached && len(arg) > len(f.flag) && strings.HasPrefix(arg, f.flag) && !strings.HasPrefix(arg, "--"):
				v := start + len(f.flag)
				if s[v] == '=' {
					v++ // -p=SECRET, as a Go program's flags read it
				}
				value(valueStart(s, v, end, f.afterColon), end)
			case f.clustered != "" && len(arg) > 2 && arg[0] == '-' && arg[1] != '-':
				// -fsSLu user:SECRET: the flag's letter after others that take
				// no value.
				at := strings.IndexByte(arg[1:], f.flag[1])
				if at < 0 || strings.Trim(arg[1:1+at], f.clustered) != "" {
					continue
				}
				if v := start + 1 + at + 1; v == end {
					pending = k
				} else {
					value(valueStart(s, v, end, f.afterColon), end)
				}
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

// singleInSingle is a single quote as a shell's set -x writes it inside single
// quotes.
const singleInSingle = `'\''`

// argEnds are what end an argument outside quotes.
const argEnds = " \t\n\r;|&()"

// namingOptions are options whose value names something else than the program
// run: docker run --name mongo -p 27017:27017 (a fourth review).
var namingOptions = []string{"--name", "--hostname", "--network-alias", "-h"}

// continuation is the length of a backslash that continues the command on the
// next line at s[i] (its line break included), or 0.
func continuation(s string, i int) int {
	if s[i] != '\\' || i+1 >= len(s) {
		return 0
	}
	switch {
	case s[i+1] == '\n':
		return 2
	case s[i+1] == '\r' && i+2 < len(s) && s[i+2] == '\n':
		return 3
	}
	return 0
}

// shellQuoteEnd is where the quoted text a shell reads at s[i] ends: after its
// closing quote (closed), else at its line's end or the text's. A backslash
// escapes a byte inside double quotes and backquotes, none inside single quotes;
// a shell has no triple quotes (a third review: a Markdown fence, ```, made the
// rest of the text one argument).
func shellQuoteEnd(s string, i int) (end int, closed bool) {
	q := s[i]
	for k := i + 1; k < len(s); k++ {
		switch {
		case s[k] == '\\' && q != '\'' && k+1 < len(s) && s[k+1] != '\n' && s[k+1] != '\r':
			k++
		case s[k] == '\'' && q == '\'' && strings.HasPrefix(s[k+1:], `\''`):
			k += 3 // set -x writes a quote inside single quotes so: one text (a fourth review)
		case s[k] == q:
			return k + 1, true
		case s[k] == '\n' || s[k] == '\r':
			return k, false
		}
	}
	return len(s), false
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
