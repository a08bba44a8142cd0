package join

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"
)

// pendingWhy is every reason parsePending may give: the fields' names (in any
// case, as the file spelled them) and byte offsets, never a member's value. The
// file holds the join's seeds, and the reason is printed.
var pendingWhy = regexp.MustCompile(`^(data after the pending join|not a pending join: (empty or cut short|not JSON at byte \d+|not a JSON object|an unknown field|` +
	`field "(?i:node|token_hash|nkey_seed|curve_seed)" of the wrong type|` +
	`member "(?i:node|token_hash|nkey_seed|curve_seed)" (appears twice|is field "(node|token_hash|nkey_seed|curve_seed)" in another case: write it "(node|token_hash|nkey_seed|curve_seed)")|` +
	`not valid UTF-8 \(at byte \d+\)|not valid JSON: (the document ends|unexpected byte at offset \d+,) [a-z ,]+|JSON nested deeper than \d+ levels))$`)

// FuzzParsePending: whatever join-pending.json holds (cut short, garbage, not
// UTF-8, members twice or in another case, data after it), parsePending never
// panics; a refusal is one of pendingWhy's reasons, quoting no value of the file;
// and what it reads is the file's one reading: written back, it reads the same.
func FuzzParsePending(f *testing.F) {
	good := `{"node":"cp-4","token_hash":"` + strings.Repeat("ab", 32) + `","nkey_seed":"SUAKYRHVIOREXV7EUZTBHUHL7NUMHPMAS7QMDU3GTIUWEI5LDNOXD43IZY","curve_seed":"SXAGDWK2HYWB3CKCUJ7WKTMKLETJX7HXUU4QZSHMB2WBJMVSXXNQSLGY54"}`
	f.Add([]byte(good))
	f.Add([]byte(good + "\n"))
	f.Add([]byte(good + `{}`))
	f.Add([]byte(good[:40]))
	f.Add([]byte(``))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"node":"cp-4","node":"cp-5"}`))
	f.Add([]byte(`{"NODE":"cp-4"}`))
	f.Add([]byte(`{"node":4}`))
	f.Add([]byte(`{"SUAKYRHVIOREXV7EUZTB":"x"}`))
	f.Add([]byte("{\"node\":\"\xff\"}"))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, why := parsePending(data)
		if why != "" {
			if !pendingWhy.MatchString(why) {
				t.Fatalf("refused with a reason that may quote the file: %q", why)
			}
			if p != (pending{}) {
				t.Fatalf("refused (%s) but read %+v", why, p)
			}
			return
		}
		again, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		if q, why := parsePending(again); why != "" || q != p {
			t.Fatalf("read %+v; written back it reads %+v (%s)", p, q, why)
		}
	})
}
