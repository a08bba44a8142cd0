package daemon

import (
	"math/rand/v2"
	"strings"
	"testing"

	"mesh/controlplane/api"
	"mesh/host/redact"
)

// redactPieces are what a failing hook's output is made of here: filler, and the
// secrets redact recognises, some long (a token, shrunk to a short mark when
// hidden) and some that shrink little.
func redactPieces() []string {
	tok := "mesh1_demo_192.0.2.10:7300_" + strings.Repeat("ab", 32) + "_" + strings.Repeat("cd", 32) + "_web-1_worker_1796000900_" + strings.Repeat("5e", 32) + "_0badc0de"
	return []string{
		"starting service ", "error: connection refused\n", "x", strings.Repeat("-", 40), " ",
		tok, tok + "\n", "DB_PASSWORD=hunter2hunter2 ", "SUAM2VBHQFLFPDU4TDWXQ5RW4XX4S7DNM7YXZDJMBYWKUYHGBIVZ3YHTJA",
		"postgres://app:pw0rdpw0rd@db:5432/x ", "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----\n",
		`"api_key": "abcdefabcdef" `, "é", "\x1b[31m",
		"postgres://app:" + strings.Repeat("p", 900) + "@db:5432/x ", // a password that may run past the cut
		"<password>" + strings.Repeat("q", 900) + "</password>\n",
		// Values whose end is looked ahead for (a second review).
		"conn: Password=open sesame" + strings.Repeat(" word", 30) + ";Server=db ", "<password><![CDATA[line\n" + strings.Repeat("qline\n", 40) + "]]></password> ",
		"+ export 'DB_PASSWORD=it'\\''s " + strings.Repeat("w ", 60) + "' ",
	}
}

// TestRedactKeptKeepsWhatHidingAllKeeps: the start of a report's message kept in
// the state is the same whether the whole message is hidden or, as redactKept does,
// its first redactLook bytes: for messages of every length up to 8 KiB made of
// filler and secrets, secrets straddling the cut among them (and many tokens before
// it, which shrink the text toward the cut). A secret cut short at redactLook would
// otherwise reach the state.
func TestRedactKeptKeepsWhatHidingAllKeeps(t *testing.T) {
	pieces := redactPieces()
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n < 3000; n++ {
		var b strings.Builder
		want := rng.IntN(8 << 10)
		tokens := rng.IntN(2) == 0 // mostly tokens: the text shrinks most
		for b.Len() < want {
			p := pieces[rng.IntN(len(pieces))]
			if tokens && rng.IntN(2) == 0 {
				p = pieces[5]
			}
			b.WriteString(p)
		}
		msg := b.String()
		if len(msg) > 8<<10 {
			msg = msg[:8<<10]
		}
		got := api.CleanText(redactKept(msg), api.MaxStatusMessageLen)
		all := api.CleanText(redact.Secrets(msg), api.MaxStatusMessageLen)
		if got != all {
			t.Fatalf("message of %d bytes: kept %q, hiding it all keeps %q", len(msg), got, all)
		}
	}
	// A seed cut at redactLook, behind tokens that shrink the text to it.
	tok := pieces[5]
	msg := strings.Repeat(tok, (redactLook-40)/len(tok))
	msg += strings.Repeat("x", redactLook-len(msg)-20) + pieces[8] + strings.Repeat("y", 4000)
	if got := api.CleanText(redactKept(msg), api.MaxStatusMessageLen); strings.Contains(got, pieces[8][:20]) {
		t.Fatalf("a seed cut at the look's end was kept: %q", got)
	}
}

// BenchmarkRedactKept: what the leader spends hiding a report's 8 KiB message,
// against hiding all of it.
func BenchmarkRedactKept(b *testing.B) {
	pieces := redactPieces()
	var sb strings.Builder
	for i := 0; sb.Len() < 8<<10; i++ {
		sb.WriteString(pieces[i%len(pieces)])
	}
	msg := sb.String()[:8<<10]
	b.Run("kept", func(b *testing.B) {
		for b.Loop() {
			_ = api.CleanText(redactKept(msg), api.MaxStatusMessageLen)
		}
	})
	b.Run("all", func(b *testing.B) {
		for b.Loop() {
			_ = api.CleanText(redact.Secrets(msg), api.MaxStatusMessageLen)
		}
	})
}

// TestRedactKeptHidesAMessageOnceAtMost (a security review): a message with no
// blank after its first redactLook bytes was hidden to its end as the first part,
// then again whole: twice the cost of hiding it all, 2 ms for 8 KiB. Whatever the
// message, what is hidden is the whole at most once, and a first part at most
// redactLook+redactSeek long; one with no blank near the look is hidden once.
func TestRedactKeptHidesAMessageOnceAtMost(t *testing.T) {
	pieces := redactPieces()
	rng := rand.New(rand.NewPCG(3, 4))
	for n := 0; n < 2000; n++ {
		var b strings.Builder
		for want := rng.IntN(8 << 10); b.Len() < want; {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		msg := b.String()
		var calls, hidden int
		count := func(s string) string { calls, hidden = calls+1, hidden+len(s); return redact.Secrets(s) }
		redactKeptWith(msg, count, count)
		if calls > 2 || hidden > len(msg)+4*api.MaxStatusMessageLen+1024 {
			t.Fatalf("a message of %d bytes: hidden %d times, %d bytes in all", len(msg), calls, hidden)
		}
	}
	for _, msg := range []string{strings.Repeat("key='key=", 8<<10/9), strings.Repeat("x", 8<<10), strings.Repeat("a", 3200) + " " + strings.Repeat("b", 5000)} {
		calls := 0
		count := func(s string) string { calls++; return redact.Secrets(s) }
		redactKeptWith(msg, count, count)
		if calls != 1 {
			t.Errorf("a message of %d bytes with no blank near the look was hidden %d times, want once", len(msg), calls)
		}
	}
}

// TestRedactKeptKeepsWhatHidingAllKeepsPastALookAhead (a second review): a value
// whose end the scanner looks ahead for, a connection string's ';' or a CDATA
// section's "]]>", lying past the first part's cut, behind secrets that shrink the
// text toward it: the kept start showed the rest of the password, or the CDATA's
// lines, where hiding it all hid them.
func TestRedactKeptKeepsWhatHidingAllKeepsPastALookAhead(t *testing.T) {
	words := func(n int) string { return strings.Repeat("lorem ", n/6+1)[:n] }
	for name, mk := range map[string]func(pad int) string{
		"a connection string": func(pad int) string {
			return "run: password=" + strings.Repeat("x", 1400) + " " + words(pad) + " conn: Password=Sesame open" + strings.Repeat(" secretword", 18) + ";Server=db " + words(1500)
		},
		// A third review's: a command's quote closing past the cut.
		"a long quoted command": func(pad int) string {
			return words(pad) + " + sh -c 'mysql -uroot -pQz1w app -e \"" + words(2600) + "\"'\nafter " + words(800)
		},
		"a CDATA section": func(pad int) string {
			return "run: password=" + strings.Repeat("x", 1100) + " " + words(pad) + " <password><![CDATA[line1\n" + strings.Repeat("secretline\n", 85) + "]]></password> " + words(1500)
		},
	} {
		for pad := 0; pad < 700; pad++ {
			msg := mk(pad)
			kept := api.CleanText(redactKept(msg), api.MaxStatusMessageLen)
			if all := api.CleanText(redact.Secrets(msg), api.MaxStatusMessageLen); kept != all || strings.Contains(kept, "Qz1w") || strings.Contains(kept, "secretword") || strings.Contains(kept, "secretline") {
				t.Fatalf("%s, %d bytes before it: kept %q, hiding it all keeps %q", name, pad, kept, all)
			}
		}
	}
}
