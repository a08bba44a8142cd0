package tokenfmt

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"strings"
	"testing"
)

// secretForms are the ways the secret could show up if a printer reached it.
func secretForms(tok Token) []string {
	h := hex.EncodeToString(tok.Secret[:])
	return []string{
		h, strings.ToUpper(h), h[:16], strings.ToUpper(h[:16]),
		base64.StdEncoding.EncodeToString(tok.Secret[:]),
		strings.Trim(fmt.Sprint(tok.Secret[:]), "[]"), // decimal bytes, as %v of the array prints
		fmt.Sprintf("%q", tok.Secret[:8]),
		tok.Encode(),
	}
}

func TestRedaction(t *testing.T) {
	tok := mustMint(t, testOptions(t))
	// Sanity: the forms are findable where the secret is present.
	if !strings.Contains(tok.Encode(), hex.EncodeToString(tok.Secret[:])) {
		t.Fatal("Encode does not contain the secret; the checks below would prove nothing")
	}
	if !strings.Contains(fmt.Sprintf("%v", struct{ S [32]byte }{tok.Secret}), secretForms(tok)[5]) {
		t.Fatal("the decimal form of the secret is not what fmt prints for the array")
	}

	type holder struct {
		Tok Token
		Ptr *Token
	}
	outputs := map[string]string{}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3v", "%-8s", "%+q"} {
		outputs[verb] = fmt.Sprintf(verb, tok)
		outputs["pointer "+verb] = fmt.Sprintf(verb, &tok)
		outputs["in struct "+verb] = fmt.Sprintf(verb, holder{tok, &tok})
		outputs["in slice "+verb] = fmt.Sprintf(verb, []Token{tok})
	}
	outputs["Sprint"] = fmt.Sprint(tok)
	outputs["%T %v"] = fmt.Sprintf("%T %v", tok, tok)
	outputs["Sprintln"] = fmt.Sprintln(tok, &tok)
	outputs["String"] = tok.String()
	outputs["GoString"] = tok.GoString()

	var logBuf bytes.Buffer
	log.New(&logBuf, "", 0).Printf("joining with %v", tok)
	outputs["log"] = logBuf.String()

	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"slog text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"slog json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		var b bytes.Buffer
		l := slog.New(h(&b))
		l.Info("token", "token", tok, "ptr", &tok, "any", slog.AnyValue(tok), "held", holder{tok, &tok})
		outputs[name] = b.String()
	}

	for name, v := range map[string]any{"json": tok, "json pointer": &tok, "json struct": holder{tok, &tok}} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		outputs[name] = string(b)
	}

	for name, out := range outputs {
		if !strings.Contains(out, "redacted") && !strings.HasPrefix(name, "slog") {
			t.Errorf("%s: output does not show the redaction: %s", name, out)
		}
		for _, form := range secretForms(tok) {
			if strings.Contains(out, form) {
				t.Errorf("%s: output contains the secret (%q): %s", name, form, out)
			}
		}
	}
	for _, name := range []string{"slog text", "slog json"} {
		if !strings.Contains(outputs[name], "redacted") || !strings.Contains(outputs[name], tok.Node) {
			t.Errorf("%s: want the public fields and a redacted secret: %s", name, outputs[name])
		}
	}
}

func TestStringShowsPublicFields(t *testing.T) {
	tok := mustMint(t, testOptions(t))
	s := tok.String()
	for _, want := range []string{"mesh1_", tok.Mesh, tok.Node, string(tok.Role), tok.Brokers[0].String(),
		hex.EncodeToString(tok.CAPin[:]), hex.EncodeToString(tok.SigningKey), "<redacted>"} {
		if !strings.Contains(s, want) {
			t.Errorf("String() = %q; missing %q", s, want)
		}
	}
	if _, err := Parse(s, tok.Expiry.Add(-1)); err == nil {
		t.Error("the redacted String() parses as a token")
	}
	var back struct {
		Mesh, Node, Role, Secret string
		Brokers                  []string
		Expiry                   int64
	}
	b, _ := json.Marshal(tok)
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Mesh != tok.Mesh || back.Node != tok.Node || back.Secret != "<redacted>" || back.Expiry != tok.Expiry.Unix() || len(back.Brokers) != 1 {
		t.Errorf("MarshalJSON = %s", b)
	}
}
