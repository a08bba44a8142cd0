package join

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

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

// TestJoinReadsThePendingFileOneWayOnly: encoding/json alone reads a pending file
// with a member twice (the last one winning) or a name in another case; a file
// this program never writes, whose keys another reader would read otherwise. It
// is refused as unusable and left as it is, and the file without the fault is
// taken (the join goes on to the network).
func TestJoinReadsThePendingFileOneWayOnly(t *testing.T) {
	tok := controlToken(t, "127.0.0.1:1", [32]byte{1}, tokenfmt.RoleControl, time.Now())
	parsed, err := tokenfmt.Parse(tok, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	th := parsed.SecretHash()
	user, _ := nkeys.CreateUser()
	userSeed, _ := user.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	curve, _ := nkeys.CreateCurveKeys()
	curveSeed, _ := curve.Seed()
	valid, _ := json.Marshal(map[string]string{"node": parsed.Node, "token_hash": hexOf(th[:]),
		"nkey_seed": string(userSeed), "curve_seed": string(curveSeed)})
	for name, tc := range map[string]struct {
		data []byte
		says string // "": taken
	}{
		"valid":                    {valid, ""},
		"seed twice":               {bytes.Replace(valid, []byte(`{`), []byte(`{"nkey_seed":"`+string(otherSeed)+`",`), 1), `"nkey_seed" appears twice`},
		"a member in another case": {bytes.Replace(valid, []byte(`"nkey_seed"`), []byte(`"NKEY_SEED"`), 1), `"NKEY_SEED" is field "nkey_seed"`},
	} {
		t.Run(name, func(t *testing.T) {
			d := datadir.Dir(t.TempDir())
			write(t, d.Path(pendingFile), string(tc.data))
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			err := Join(ctx, Options{Dir: d, Token: tok, Out: &strings.Builder{}})
			if tc.says == "" {
				if errors.Is(err, ErrDataDir) {
					t.Fatalf("the pending file was refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDataDir) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("want ErrDataDir saying %q, got %v", tc.says, err)
			}
			if strings.Contains(err.Error(), "SUA") || strings.Contains(err.Error(), "SXA") {
				t.Fatalf("the error quotes a seed: %v", err)
			}
			if after, _ := os.ReadFile(d.Path(pendingFile)); !bytes.Equal(after, tc.data) {
				t.Fatal("the unusable pending file was changed")
			}
		})
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
