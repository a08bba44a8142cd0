package broker

import (
	"encoding/json"
	"fmt"
	"log/slog"

	"mesh/host/redact"
)

// String describes the client without its credentials: the password (a token
// secret, or an enrolling client's proof), the in-process token and the JWT (a
// seed file given as creds arrives as the JWT) are "<redacted>" when present, and
// the user name is shown only when it has the form of this mesh's (userText).
func (c Client) String() string {
	return fmt.Sprintf("Client{Username:%s Password:%s Token:%s Nkey:%q JWT:%s Sig:(%d bytes) Name:%q Nonce:(%d bytes) Binding:(%d bytes) Remote:%s TLS:%t HostsFull:%t Recheck:%t}",
		userText(c.Username), redact.IfSet(c.Password), redact.IfSet(c.Token), clip(c.Nkey), redact.IfSet(c.JWT), len(c.Sig),
		clip(c.Name), len(c.Nonce), len(c.Binding), addrString(c.Remote), c.TLS != nil, c.HostsFull, c.Recheck)
}

// GoString is String, so that %#v does not print the credentials either.
func (c Client) GoString() string { return "broker." + c.String() }

// Format implements fmt.Formatter so that every verb, not only %v and %s, prints
// the redacted form: without it %d or %x would print the fields, credentials
// included, even of a Client held in another struct.
func (c Client) Format(f fmt.State, verb rune) {
	redact.Format(f, verb, "broker.Client", c.String(), c.GoString())
}

// LogValue implements slog.LogValuer: the client's public fields, and its
// credentials redacted.
func (c Client) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("user", userText(c.Username)),
		slog.String("password", redact.IfSet(c.Password)),
		slog.String("token", redact.IfSet(c.Token)),
		slog.String("nkey", clip(c.Nkey)),
		slog.String("jwt", redact.IfSet(c.JWT)),
		slog.String("name", clip(c.Name)),
		slog.String("remote", addrString(c.Remote)),
		slog.Bool("tls", c.TLS != nil),
		slog.Bool("hosts_full", c.HostsFull),
		slog.Bool("recheck", c.Recheck),
	)
}

// MarshalJSON writes the client's public fields and its credentials redacted: a
// Client has no JSON form of its own, and one in a JSON document or a JSON log
// must not carry them there.
func (c Client) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		User      string `json:"user"`
		Password  string `json:"password"`
		Token     string `json:"token"`
		Nkey      string `json:"nkey"`
		JWT       string `json:"jwt"`
		Name      string `json:"name"`
		Remote    string `json:"remote"`
		TLS       bool   `json:"tls"`
		HostsFull bool   `json:"hosts_full"`
		Recheck   bool   `json:"recheck"`
	}{userText(c.Username), redact.IfSet(c.Password), redact.IfSet(c.Token), clip(c.Nkey), redact.IfSet(c.JWT), clip(c.Name),
		addrString(c.Remote), c.TLS != nil, c.HostsFull, c.Recheck})
}
