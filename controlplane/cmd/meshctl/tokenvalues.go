package main

import "mesh/tokenfmt"

// refuseToken refuses a flag's value that holds what looks like a token: one pasted
// into the wrong flag. Such a value is echoed where no error goes through
// tokenfmt.HideTokens (a plan, the paths the demo narrates, files named after it), so
// it is refused before anything prints or writes it, and the refusal does not quote
// it.
func refuseToken(flag, value string) error {
	if !tokenfmt.HoldsToken(value) {
		return nil
	}
	return usagef("%s holds what looks like a token (not shown here): a token is never a path or an address; give the flag its own value, and keep the token for `meshctl join` or `meshhost enrol`", flag)
}
