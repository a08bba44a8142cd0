package api

import (
	"errors"
	"fmt"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// MaxStatusCodeLen and MaxStatusMessageLen bound what a node's status may say of an
// error: codes are the verifier's and the agent's words (docs/protocol.md), and a
// message longer than the limit is cut.
const (
	MaxStatusCodeLen    = 64
	MaxStatusMessageLen = 512
)

// ValidStatusCode reports whether code is one a status may carry: 1 to
// MaxStatusCodeLen characters of a-z, 0-9 and '_'. A node's report is read by
// operators in a terminal: nothing else reaches it.
func ValidStatusCode(code string) bool {
	if code == "" || len(code) > MaxStatusCodeLen {
		return false
	}
	for i := 0; i < len(code); i++ {
		c := code[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// CleanText returns s as one line a terminal shows as it is, cut to at most max
// bytes on a character boundary: tabs and line breaks become spaces; other control
// characters (an escape sequence's ESC among them), the format characters (those
// that reorder text, and the invisible ones) and the line separators, and invalid
// UTF-8 are written as Go escapes (\x1b, \u202e, \u200b, \ufffd). Text a node sends (its error message) goes through it before
// it is kept or shown.
func CleanText(s string, max int) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || hidden(r) {
			clean = false
			break
		}
	}
	if clean && len(s) <= max {
		return s
	}
	out := make([]byte, 0, min(len(s), max))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		var piece string
		switch {
		case r == utf8.RuneError && size <= 1:
			piece = `\ufffd`
		case r == '\t' || r == '\n' || r == '\r':
			piece = " "
		case hidden(r):
			piece = strconv.QuoteRuneToASCII(r)
			piece = piece[1 : len(piece)-1]
		default:
			piece = s[i : i+size]
		}
		if len(out)+len(piece) > max {
			break
		}
		out = append(out, piece...)
		i += size
	}
	return string(out)
}

// TerminalText returns s as a terminal shows it, as it is: line breaks and tabs are
// kept; other control characters (an escape sequence's ESC, a carriage return that
// writes over the line), every format character (those that reorder text, and the
// invisible ones: U+200B, U+FEFF, U+00AD) and line or paragraph separator, and
// invalid UTF-8 are written as Go escapes, as meshhost writes its own. meshctl's
// errors go through it: they quote what an operator typed (a --data path, a label
// value), which must not drive the terminal it is shown on.
func TerminalText(s string) string {
	clean := utf8.ValidString(s)
	for _, r := range s {
		if terminalHidden(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	out := make([]byte, 0, len(s)+16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			out = append(out, `\ufffd`...)
		case terminalHidden(r):
			q := strconv.QuoteRuneToASCII(r)
			out = append(out, q[1:len(q)-1]...)
		default:
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

// terminalHidden reports whether TerminalText writes r out: what acts on a
// terminal, or does not show itself there, line breaks and tabs apart.
func terminalHidden(r rune) bool {
	return r != '\n' && r != '\t' && hidden(r)
}

// hidden reports whether r changes what a terminal shows rather than showing
// itself: control characters, every format character (those that reorder text,
// and the invisible ones: U+200B, U+FEFF, U+00AD, the tag characters that can
// carry a hidden text in an innocent-looking one), and the line and paragraph
// separators. A node's error message kept with only the reordering ones escaped
// reached every control node's state and operators' tables with the rest as
// sent (a review), where meshctl's own text and meshhost's escaped them all.
func hidden(r rune) bool {
	return unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp)
}

// MaxAgentLen bounds the agent a node names in its enrolment and its status
// (Status.Agent): "meshhost/" and its build's version (buildinfo.Stamped, such as
// 0.1.0+git20261203145709.7132ef2931ef.dirty) fit with room to spare.
const MaxAgentLen = 64

// ValidAgent reports whether agent is one the control plane keeps and shows: a
// program and its version, "NAME/VERSION", at most MaxAgentLen bytes of a-z, A-Z,
// 0-9 and . _ + - besides the one '/', neither part empty. A host is not trusted
// and what it says here reaches operators' terminals and a metric's label: nothing
// else is kept (the node's agent is then unknown, as for a node that never said).
// It allocates nothing: it runs for every status report.
func ValidAgent(agent string) bool {
	if len(agent) > MaxAgentLen {
		return false
	}
	slash := -1
	for i := 0; i < len(agent); i++ {
		switch c := agent[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '+', c == '-':
		case c == '/' && slash < 0:
			slash = i
		default:
			return false
		}
	}
	return slash > 0 && slash < len(agent)-1
}

// MaxLabels is how many labels a node or a token carries at most.
const MaxLabels = 64

// CheckLabel reports whether k=v can be given to `meshctl label`: a key of 1 to 63
// characters of letters, digits and . _ / -, a value of up to 63 of the same
// (empty: the label removed). Labels are selected on, shown in a terminal and kept
// in every node's record, so they are short and plain. A selector and a token's
// labels take a value besides (CheckValuedLabel).
func CheckLabel(k, v string) error {
	if !labelText(k, false) || !labelText(v, true) {
		return fmt.Errorf("label %q=%q: keys are 1 to 63 characters of letters, digits and . _ / -; values up to 63 of the same", k, v)
	}
	return nil
}

// ErrEmptyLabelValue is CheckValuedLabel's refusal of k= where a label needs its
// value.
var ErrEmptyLabelValue = errors.New("the label has an empty value")

// CheckValuedLabel is CheckLabel for a label that selects nodes (declare's
// selector) or is given to a node (a token's labels): its value may not be empty.
// An empty value selected every node lacking the key (a node without tier has
// tier "", as a map reads), so `declare --label tier=$TIER` with TIER unset
// replaced the files of every node without a tier; and a token's tier= gave the
// node a label `meshctl label` cannot set (k= removes).
func CheckValuedLabel(k, v string) error {
	if err := CheckLabel(k, v); err != nil {
		return err
	}
	if v == "" {
		return fmt.Errorf("%w: %s= (a label is selected, and given, with its value: %s=VALUE)", ErrEmptyLabelValue, k, k)
	}
	return nil
}

func labelText(s string, emptyOK bool) bool {
	if s == "" {
		return emptyOK
	}
	if len(s) > 63 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '/' || r == '-') {
			return false
		}
	}
	return true
}
