package declarations_test

import (
	"crypto/ed25519"
	"fmt"
	"time"

	"mesh/declarations"
)

// A control plane signs a declaration; the host verifies it against the keys
// it trusts and what it applied last, and reports refusals by code.
func Example() {
	signingPub, signingKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		panic(err)
	}
	now := time.Now()
	// The public key the host enrolled with (an nkey), which binds the
	// declaration to this enrolment of web-1.
	const nodeKey = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	content := "listen = 8080\n"
	raw, err := declarations.SignDeclaration(declarations.Declaration{
		Mesh: "demo", Node: "web-1", NodeKey: nodeKey, Version: 1, KeyringEpoch: 1,
		IssuedAt: now, ExpiresAt: now.Add(declarations.DefaultValidity),
		Body: declarations.Body{Files: []declarations.File{
			{Path: "etc/app.conf", Content: &content, Mode: "0640"},
		}},
	}, signingKey)
	if err != nil {
		panic(err)
	}

	// On the host.
	trusted := []ed25519.PublicKey{signingPub}
	v, err := declarations.VerifyDeclaration(raw, trusted, declarations.Expect{Mesh: "demo", Node: "web-1", NodeKey: nodeKey, Now: time.Now()})
	fmt.Println(v.Version, v.Body.Files[0].Path, err)

	// The same bytes delivered to another node, or after version 2 was applied.
	_, err = declarations.VerifyDeclaration(raw, trusted, declarations.Expect{Mesh: "demo", Node: "web-2", NodeKey: nodeKey, Now: time.Now()})
	fmt.Println(declarations.Code(err))
	_, err = declarations.VerifyDeclaration(raw, trusted, declarations.Expect{
		Mesh: "demo", Node: "web-1", NodeKey: nodeKey, Now: time.Now(), HaveApplied: true, AppliedVersion: 2,
	})
	fmt.Println(declarations.Code(err))

	// A host that trusts another key.
	otherPub, _, _ := ed25519.GenerateKey(nil)
	_, err = declarations.VerifyDeclaration(raw, []ed25519.PublicKey{otherPub}, declarations.Expect{Mesh: "demo", Node: "web-1", NodeKey: nodeKey, Now: time.Now()})
	fmt.Println(declarations.Code(err))
	// Output:
	// 1 etc/app.conf <nil>
	// wrong_audience
	// rolled_back
	// untrusted
}
