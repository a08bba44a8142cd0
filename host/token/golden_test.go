package token

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// The vectors are generated on the control-plane side (go test ./tokenfmt -run
// TestGolden -update) and copied here byte for byte; this side parses them with its
// own code.
const goldenFile = "testdata/golden.json"

type vector struct {
	Name  string `json:"name"`
	Token string `json:"token"`
	Now   int64  `json:"now"`
	Want  *struct {
		Mesh       string   `json:"mesh"`
		Brokers    []string `json:"brokers"`
		CAPin      string   `json:"ca_pin"`
		SigningKey string   `json:"signing_key"`
		Node       string   `json:"node"`
		Role       string   `json:"role"`
		Expiry     int64    `json:"expiry"`
		Secret     string   `json:"secret"`
		ProofKey   string   `json:"proof_key"`
		Proof      string   `json:"proof"`
	} `json:"want"`
	Error string `json:"error"`
}

func vectors(t testing.TB) []vector {
	t.Helper()
	data, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var vs []vector
	if err := dec.Decode(&vs); err != nil {
		t.Fatalf("%s: %v", goldenFile, err)
	}
	return vs
}

// kind names an error the way the vectors do.
func kind(err error) string {
	var names []string
	for name, sentinel := range map[string]error{
		"empty": ErrEmpty, "too_long": ErrTooLong, "not_token": ErrNotToken, "version": ErrUnsupportedVersion,
		"truncated": ErrTruncated, "checksum": ErrChecksum, "expired": ErrExpired, "malformed": ErrMalformed,
	} {
		if errors.Is(err, sentinel) {
			names = append(names, name)
		}
	}
	if len(names) != 1 {
		return "ambiguous or unknown: " + strings.Join(names, ",")
	}
	var fe *FieldError
	if names[0] == "malformed" {
		if !errors.As(err, &fe) {
			return "malformed without a FieldError"
		}
		return "malformed:" + fe.Field
	}
	return names[0]
}

func TestGolden(t *testing.T) {
	mine, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := os.ReadFile("../../tokenfmt/testdata/golden.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mine, theirs) {
		t.Fatal("testdata/golden.json differs from tokenfmt/testdata/golden.json; regenerate both with: go test ./tokenfmt -run TestGolden -update")
	}

	vs := vectors(t)
	if len(vs) < 30 {
		t.Fatalf("only %d vectors", len(vs))
	}
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			tok, err := Parse(v.Token, time.Unix(v.Now, 0))
			if v.Error == "" && err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if v.Error != "" {
				if got := kind(err); got != v.Error {
					t.Fatalf("error %v is of kind %s; want %s", err, got, v.Error)
				}
				if s := strings.Split(strings.TrimSpace(v.Token), "_"); len(s) > 8 && len(s[8]) >= 12 && strings.Contains(strings.ToLower(err.Error()), strings.ToLower(s[8])) {
					t.Errorf("error text contains the secret field: %v", err)
				}
			}
			if v.Want == nil {
				if tok.Mesh != "" || tok.Node != "" || tok.Brokers != nil || tok.Secret != [SecretSize]byte{} {
					t.Errorf("Parse returned a token with error %v", err)
				}
				return
			}
			w := v.Want
			var brokers []string
			for _, ap := range tok.Brokers {
				brokers = append(brokers, ap.String())
			}
			checks := []struct{ field, got, want string }{
				{"mesh", tok.Mesh, w.Mesh},
				{"brokers", strings.Join(brokers, ","), strings.Join(w.Brokers, ",")},
				{"ca_pin", hex.EncodeToString(tok.CAPin[:]), w.CAPin},
				{"signing_key", hex.EncodeToString(tok.SigningKey), w.SigningKey},
				{"node", tok.Node, w.Node},
				{"role", string(tok.Role), w.Role},
				{"secret", tok.SecretHex(), w.Secret},
				{"proof_key", hex.EncodeToString(tok.ProofKey()), w.ProofKey},
				{"proof", hex.EncodeToString(tok.Prove(tok.Mesh, tok.Node, "UGOLDENNODEKEY")), w.Proof},
			}
			for _, c := range checks {
				if c.got != c.want {
					t.Errorf("%s = %q; want %q", c.field, c.got, c.want)
				}
			}
			if len(brokers) != len(w.Brokers) {
				t.Errorf("%d brokers; want %d", len(brokers), len(w.Brokers))
			}
			if !tok.Expiry.Equal(time.Unix(w.Expiry, 0)) || tok.Expiry.Location() != time.UTC {
				t.Errorf("expiry = %v; want %d in UTC", tok.Expiry, w.Expiry)
			}
			if err := tok.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
			if v.Error == "expired" {
				var ee *ExpiredError
				if !errors.As(err, &ee) || !ee.Expiry.Equal(tok.Expiry) || ee.Ago() != time.Duration(v.Now-w.Expiry)*time.Second {
					t.Errorf("error %v; want an ExpiredError %ds after %d", err, v.Now-w.Expiry, w.Expiry)
				}
			}
		})
	}
}

func TestFieldOrder(t *testing.T) {
	want := []string{"version", "mesh", "brokers", "ca_pin", "signing_key", "node", "role", "expiry", "secret", "crc"}
	got := Fields()
	if !slices.Equal(got, want) {
		t.Fatalf("Fields() = %q; want %q", got, want)
	}
	got[1] = "changed"
	if Fields()[1] != "mesh" {
		t.Fatal("Fields() hands out shared state")
	}
	// The golden worker token has one text field per name.
	for _, v := range vectors(t) {
		if v.Name == "valid_worker" {
			if n := len(strings.Split(v.Token, "_")); n != len(want) {
				t.Fatalf("valid_worker has %d fields; want %d", n, len(want))
			}
			return
		}
	}
	t.Fatal("no valid_worker vector")
}
