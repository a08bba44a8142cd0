package integration

import (
	"strings"
	"testing"

	"mesh/integration/harness"
)

// TestDemo runs the README's first command, the built `meshctl demo`, and checks that
// it told the whole story: converged, an impostor refused before it received a byte,
// a relay holding the mesh's own leaf refused without reading the secret, a
// revocation that stopped the agent.
func TestDemo(t *testing.T) {
	r := harness.Run(t, "", nil, bin.Meshctl, "demo")
	if r.Code != 0 {
		t.Fatalf("meshctl demo (exit %d):\n%s", r.Code, r.Combined())
	}
	for _, want := range []string{
		"mesh demo is bootstrapped",
		"checked against the pinned CA",
		"web-1  worker  alive",
		"now holds: \"welcome to web-1",
		"application bytes the impostor received: 0; credentials it saw: 0; identity saved: false",
		"meshhost enrol: refused (login_refused)",
		"the token's secret among them: false",
		"the agent stopped: this node was revoked",
		"the agent started again with the revoked key: stopped on the signed notice",
	} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("the demo did not say %q:\n%s", want, r.Stdout)
		}
	}
	if strings.Count(r.Stdout, "<redacted>") == 0 {
		t.Error("the demo shows its token without redacting the secret")
	}
}
