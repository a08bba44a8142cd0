package join

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"mesh/controlplane/datadir"
	"mesh/tokenfmt"
)

// TestJoinKeepsAnUnusablePendingFile: the pending file holds the keys an earlier run
// presented, which the mesh may have recorded for the token. One that is cut short,
// corrupt, over the cap or holds bad seeds is refused with ErrDataDir and left as it
// is, before any network; before, it was replaced by new keys, and a re-run after
// an admission was refused as token_used with the recorded keys gone.
func TestJoinKeepsAnUnusablePendingFile(t *testing.T) {
	tok := controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, time.Now())
	parsed, err := tokenfmt.Parse(tok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	th := parsed.SecretHash()
	good, _ := json.Marshal(map[string]string{"node": parsed.Node, "token_hash": hexOf(th[:]),
		"nkey_seed": "SUAAVDT3FW6QOAD5NBNWBTRBI3RQSF5EKZHSXKMTQJVN7ZKHLSKL6RUOEI", "curve_seed": "SXAAXMRAEP6JWWHNB6IKFL554IE6LZVT6EY5MBRICPILTLOPHAG73I3YX4"})
	for name, data := range map[string][]byte{
		"cut short":      good[:len(good)/2],
		"empty":          {},
		"not JSON":       []byte("keys"),
		"trailing brace": append(bytes.Clone(good), '}'),
		"unknown field":  bytes.Replace(good, []byte(`"node"`), []byte(`"nodes"`), 1),
		"bad seeds":      bytes.Replace(good, []byte("SUAAV"), []byte("SUAAX"), 1),
		"over the cap":   append(bytes.Clone(good), bytes.Repeat([]byte(" "), datadir.MaxFileSize)...),
	} {
		t.Run(name, func(t *testing.T) {
			d := datadir.Dir(t.TempDir())
			write(t, d.Path(pendingFile), string(data))
			err := Join(t.Context(), Options{Dir: d, Token: tok, Out: &strings.Builder{}})
			if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), pendingFile) {
				t.Fatalf("want ErrDataDir naming %s, got %v", pendingFile, err)
			}
			if strings.Contains(err.Error(), "SUAA") || strings.Contains(err.Error(), "SXAA") {
				t.Fatalf("the error quotes a seed: %v", err)
			}
			if after, _ := os.ReadFile(d.Path(pendingFile)); !bytes.Equal(after, data) {
				t.Fatal("the unusable pending file was changed")
			}
		})
	}
	// A pending join of another token is not this join's: it starts afresh.
	d := datadir.Dir(t.TempDir())
	other := bytes.Replace(good, []byte(hexOf(th[:])), []byte(strings.Repeat("0", 64)), 1)
	write(t, d.Path(pendingFile), string(other))
	err = Join(t.Context(), Options{Dir: d, Token: tok, Out: &strings.Builder{}})
	if errors.Is(err, ErrDataDir) {
		t.Fatalf("another token's pending join was refused: %v", err)
	}
	if after, _ := os.ReadFile(d.Path(pendingFile)); bytes.Equal(after, other) {
		t.Fatal("another token's pending join was kept")
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
