package operator

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/controlplane/datadir"
	"mesh/host/jsonkeys"
)

// FuzzLoadContext: a NATS context file (--context, MESH_CONTEXT) names the brokers,
// the credentials and the CA an operator's command trusts. For any content and
// $HOME, LoadContext must not panic; it refuses with ErrEndpoint, as an
// *InputFileError of kind ErrCorrupt naming the file; what it accepts is the
// file's url, creds and ca as encoding/json reads them, each member once (a member
// twice is refused: decision 0024), with a leading ~/ of creds and ca made $HOME's
// and nothing else changed.
func FuzzLoadContext(f *testing.F) {
	f.Add([]byte(`{"description":"","url":"tls://10.0.0.1:7300","creds":"~/mesh/op.creds","ca":"/etc/mesh/ca.pem","nkey":"","token":""}`), "/home/op")
	f.Add([]byte(`{"url":"a:1","url":"b:2"}`), "/h")
	f.Add([]byte(`{"URL":"a:1","Creds":"~/x","CA":"~/"}`), "/h")
	f.Add([]byte(`{"url":"a:1","creds":"~/../../etc/shadow","ca":"~"}`), "/h")
	f.Add([]byte(`{"creds":"~/x"}`), "")
	f.Add([]byte(`{"url":1}`), "/h")
	f.Add([]byte(`{"url":"a:1"} {"url":"b:2"}`), "/h")
	f.Add([]byte(`{"url":"a:1","nested":{"url":"x","url":"y"}}`), "/h")
	f.Add([]byte("{\"url\":\"\xff\"}"), "/h")
	f.Add([]byte(`null`), "/h")
	f.Add([]byte(`[]`), "/h")
	f.Add([]byte(``), "/h")
	f.Fuzz(func(t *testing.T, data []byte, home string) {
		path := filepath.Join(t.TempDir(), "ctx.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			if k == "HOME" {
				return home
			}
			return ""
		}
		c, err := LoadContext(path, getenv)
		var want Context
		jerr := json.Unmarshal(data, &want)
		if err != nil {
			var fe *InputFileError
			if !errors.Is(err, ErrEndpoint) || !errors.As(err, &fe) || !errors.Is(err, datadir.ErrCorrupt) || fe.Path != path || !strings.Contains(err.Error(), path) {
				t.Fatalf("refusal of no known kind: %v", err)
			}
			if jerr == nil && !errors.Is(jsonkeys.Check(data, &want), jsonkeys.ErrDuplicate) {
				t.Fatalf("a context encoding/json reads, without a member twice, refused: %v", err)
			}
			return
		}
		if jerr != nil {
			t.Fatalf("accepted a context encoding/json refuses (%v): %+v", jerr, c)
		}
		if errors.Is(jsonkeys.Check(data, &want), jsonkeys.ErrDuplicate) {
			t.Fatalf("accepted a context with a member twice: %+v", c)
		}
		if c.Path != path || c.URL != want.URL || c.Creds != ExpandHome(want.Creds, getenv) || c.CA != ExpandHome(want.CA, getenv) {
			t.Fatalf("read %+v, the file says %+v", c, want)
		}
		for _, p := range [][2]string{{want.Creds, c.Creds}, {want.CA, c.CA}} {
			rest, tilde := strings.CutPrefix(p[0], "~/")
			switch {
			case tilde && home != "":
				if p[1] != filepath.Join(home, rest) {
					t.Fatalf("%q expanded to %q with HOME %q", p[0], p[1], home)
				}
			case p[1] != p[0]:
				t.Fatalf("%q changed to %q (HOME %q)", p[0], p[1], home)
			}
		}
	})
}
