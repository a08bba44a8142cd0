package main

import (
	"encoding/json"
	"fmt"
	"testing"
)

// TestStatusJSONHasNoNull: `meshhost status --json` of a node that manages no file
// yet gives "managed": [] (it gave null, where operations.md lists managed as always
// there), and no other member is null: a list is a list, empty or not, and what
// has no value is left out (the members marked ? in the table).
func TestStatusJSONHasNoNull(t *testing.T) {
	dir, _ := enrolled(t)
	code, stdout, stderr := runCLI("", nil, "status", "--state", dir, "--json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
	}
	if m, ok := out["managed"].([]any); !ok || len(m) != 0 {
		t.Errorf("managed is %#v, want [] (present, empty):\n%s", out["managed"], stdout)
	}
	var nulls []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case nil:
			nulls = append(nulls, path)
		case map[string]any:
			for k, e := range v {
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", out)
	if len(nulls) > 0 {
		t.Errorf("null members %v:\n%s", nulls, stdout)
	}
}
