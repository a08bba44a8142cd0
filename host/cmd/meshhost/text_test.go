package main

import "testing"

// TestShownEscapesWhatDrivesATerminal: what meshhost prints of a hook's output and of
// errors keeps its lines and text, and shows as escapes what would drive the
// terminal: an escape sequence (here one that sets the window title and one that
// clears the screen), a carriage return writing over the line, a bidi override
// reordering it, a line separator, invalid UTF-8.
func TestShownEscapesWhatDrivesATerminal(t *testing.T) {
	for in, want := range map[string]string{
		"nginx: [emerg] unknown directive\nline 2\tcol 3": "nginx: [emerg] unknown directive\nline 2\tcol 3",
		"ok\x1b]0;pwned\x07\x1b[2J":                       `ok\x1b]0;pwned\a\x1b[2J`,
		"failed\rsucceeded":                               `failed\rsucceeded`,
		"file \u202eexe.txt":                              `file \u202eexe.txt`,
		"a\u2028b":                                        `a\u2028b`,
		"bad \xff byte":                                   `bad \ufffd byte`,
		"del\x7f and c1 \u009b":                           `del\x7f and c1 \u009b`,
		"héllo, 世界":                                       "héllo, 世界",
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}
