package datadir

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

// TestConfigWithAByteOrderMark: mesh.json saved by an editor that writes a UTF-8
// byte order mark first is refused as corrupt (no reader of the mesh's JSON files
// skips one: decision 0024), saying so and what to do; it was "corrupt: it is not a
// JSON object", which sent the operator looking for damage that is not there.
func TestConfigWithAByteOrderMark(t *testing.T) {
	c := validConfig()
	c.Format = ConfigFormat
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{"\xef\xbb\xbf" + string(body), "\xef\xbb\xbf\n" + string(body) + "\n", "\n\xef\xbb\xbf" + string(body)} {
		d := Dir(t.TempDir())
		if err := os.WriteFile(d.Path(ConfigFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for name, load := range map[string]func() error{
			"LoadConfig":    func() error { _, err := d.LoadConfig(); return err },
			"ReadConfigRaw": func() error { _, err := d.ReadConfigRaw(); return err },
		} {
			err := load()
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "starts with a UTF-8 byte order mark (an editor added it") || !strings.Contains(err.Error(), "remove it") {
				t.Errorf("%s of %q…: %v, want the byte order mark named", name, content[:8], err)
			}
		}
	}
}
