// Package operator is the client side of the operator API: it connects to a mesh
// broker with operator credentials (a standard NATS .creds file, from a control
// node's data directory or given on an operator's own machine), checks the broker
// against the CA pin like any host does, and calls the leader's API.
package operator

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"mesh/broker"
	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/pki"
	"mesh/tokenfmt"
)

// ErrUnreachable means no broker of the mesh answered.
var ErrUnreachable = errors.New("cannot reach the control plane")

// ErrLoginRefused means a broker of the mesh (it proved the CA pin) refused the
// credentials' login: nats-server's "Authorization Violation". Seen from here, two
// causes give it alike: a broker of a version older than logins bound to the TLS
// session (decision 0018), which cannot check this login, as during an upgrade; or
// credentials that are not this mesh's. The text names both.
var ErrLoginRefused = errors.New("the broker refused these operator credentials (Authorization Violation): " +
	"either that control node runs a meshctl older than this one, which cannot check its login " +
	"(during an upgrade, use the older meshctl against it, or upgrade it first: operations.md, Upgrading), " +
	"or the credentials are not this mesh's, or were revoked (meshctl operator list shows those issued by name; meshctl operator add issues new ones where the CA key is), " +
	"or they were issued after the backup the control plane was restored from, which holds no record of them (the control node's log says operator_unrecorded; issue them again), " +
	"or they are a removed control node's admin.creds, which log in a few times a minute at most (wait a minute), " +
	"or the login was relayed by something on the path that holds a certificate of the mesh (a removed control node answering at this address: the broker refuses a login bound to another TLS session; the credentials' seed did not leave this machine)")

// ErrNoLeader means the brokers answered but no control node served the request.
var ErrNoLeader = errors.New("no control node answered: the control plane is not serving (is `meshctl serve` running, and does it have a Raft leader? `meshctl control status` shows which control nodes run, and serve's log why one that runs does not lead: a full disk, a quorum lost)")

// ErrNoAnswer means a control node took the request and no answer came within the
// call's timeout: it is overloaded, or it stopped (a leader that fails takes the
// requests it was serving with it). A change may have been carried out.
var ErrNoAnswer = errors.New("the control plane did not answer")

// ErrReadOnly means the broker refused to carry the request: these credentials may
// only read (those of a control node that was removed). Nothing was changed.
var ErrReadOnly = errors.New("these operator credentials may only read the mesh: they belong to a control node that was removed (meshctl control remove); nothing was changed. Use admin.creds from an active control node's data directory")

// Client calls the operator API.
type Client struct {
	nc     *nats.Conn
	denied *deniedSubjects
	loss   *connLoss
	// pin is the CA pin every broker of this connection was checked against
	// (zero for a client that wraps a connection it did not dial).
	pin        [32]byte
	timeout    time.Duration
	leaderWait time.Duration
	// firstAttempt is how long a repeatable request waits for its first answer before
	// it is sent again (see Call).
	firstAttempt time.Duration
	sending      func(op string)
	waiting      func(op string, timeout time.Duration)
	// credsExpire is when the credentials the connection logged in with expire
	// (zero: never): the broker closes the connection then.
	credsExpire time.Time
	// sign signs a change request with the credentials' key (nil: unsigned, a
	// client that wraps a connection it did not dial).
	sign func(msg []byte) (key string, sig []byte, err error)
}

// ErrNotSigned is a change this meshctl could not sign with the key of the
// credentials it logged in with (the file removed or replaced since the login), and
// so did not send.
var ErrNotSigned = errors.New("this change could not be signed with the key of the credentials file it logged in with, so it was not sent")

// signed adds to m, a change's request, the operator's signature of it
// (api.OperatorSigHeader), by which the control plane logs who asked for it. A
// signature that cannot be made is ErrNotSigned, and m is not sent: before, it went
// unsigned without a word, and the control plane's log named nobody for a change
// the operator's credentials made.
func (c *Client) signed(op string, m *nats.Msg) (*nats.Msg, error) {
	if c.sign == nil || api.ReadOnly(op) {
		return m, nil
	}
	at := time.Now().Unix()
	id := ""
	if m.Header != nil {
		id = m.Header.Get(api.RequestHeader)
	}
	key, sig, err := c.sign(api.OperatorSigned(op, at, id, m.Data))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSigned, err)
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(api.OperatorSigHeader, api.FormatOperatorSig(key, at, sig))
	return m, nil
}

// credsSigner signs with the key of the .creds file at path, read at each signing
// and wiped after, as the login's nonce is signed (CredsLogin). loggedIn holds the
// key the connection's last login signed with: a file since replaced by other
// credentials signs nothing, so that a change is never logged under a key other
// than the one its connection logged in with (a review). A reconnection logs in with
// what the file holds then (a renewal put in its place), and signs with it.
func credsSigner(path string, loggedIn *atomic.Pointer[string]) func([]byte) (string, []byte, error) {
	return func(msg []byte) (string, []byte, error) {
		const putBack = ": put the credentials file back (--creds, or the data directory's admin.creds) and run it again"
		b, err := readSmall(path)
		if err != nil {
			return "", nil, fmt.Errorf("%w%s", err, putBack)
		}
		defer clear(b)
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			return "", nil, fmt.Errorf("%w%s", err, putBack)
		}
		defer kp.Wipe()
		key, err := kp.PublicKey()
		if err != nil {
			return "", nil, err
		}
		want := loggedIn.Load()
		if want == nil {
			return "", nil, fmt.Errorf("the key this connection logged in with is not known: run the command again")
		}
		if key != *want {
			return "", nil, fmt.Errorf("the credentials file %s now holds other credentials (key %s…) than those this connection logged in with (key %s…): run the command again, to log in with what the file holds now", path, key[:min(12, len(key))], (*want)[:min(12, len(*want))])
		}
		sig, err := kp.Sign(msg)
		return key, sig, err
	}
}

// defaultFirstAttempt is how long a read (or a token creation, see Call) first waits
// for an answer before it is sent again. A read is answered in milliseconds, even for
// 10,000 nodes, and a creation within a commit; one that gets no answer went to a
// leader that stopped with it, and the control node elected next answers the same
// request sent again. Each later attempt waits twice as long as the one before, so
// that a request a loaded leader is slow to answer gets more time instead of being
// sent again and again.
const defaultFirstAttempt = 2 * time.Second

// DefaultTimeout is how long a call waits for its answer once a control node took it.
const DefaultTimeout = 15 * time.Second

// DefaultLeaderWait is how long a call waits for a control node to serve it: long
// enough to ride out an election with the default Raft timeouts (2 s), short enough
// that a mesh which lost its quorum is reported quickly.
const DefaultLeaderWait = 10 * time.Second

// Options tune Dial.
type Options struct {
	// Servers overrides the endpoint's brokers (those of mesh.json for Dial).
	Servers []string
	// Timeout bounds each call; 0 means DefaultTimeout.
	Timeout time.Duration
	// Joining lets a join in progress use its own unfinished configuration.
	Joining bool
	// LeaderWait bounds how long a call waits while no control node serves the
	// API (an election, or a daemon still starting); 0 means DefaultLeaderWait,
	// a negative value fails at once.
	LeaderWait time.Duration
	// Sending, when set, is called with the op of each request that may change
	// the mesh, before it is first sent (not a read, not a dry run): a command
	// interrupted before then changed nothing, and says so.
	Sending func(op string)
	// Waiting, when set, is called once a call has waited SlowAnswer for its
	// answer with none come, with the op and how long the call waits in all: a
	// leader that hangs, or waits for a quorum, held meshctl silent for the whole
	// --timeout.
	Waiting func(op string, timeout time.Duration)
}

// SlowAnswer is how long a call waits before Options.Waiting is told: reads and
// changes are answered within a commit, milliseconds, on a mesh that is well.
const SlowAnswer = 2 * time.Second

// Dial connects using dir's mesh.json (brokers, pin) and admin.creds.
func Dial(dir datadir.Dir, o Options) (*Client, error) {
	e, err := DirEndpoint(dir, o.Joining)
	if err != nil {
		return nil, err
	}
	return DialEndpoint(e, o)
}

// brokerURL is the URL the NATS client dials broker host:port at. An IPv6 zone's
// "%" is escaped ("%25"): written as is, the URL did not parse, and an operator's
// --servers [fe80::1%eth0]:7300 failed as a broker unreachable (a review).
func brokerURL(hostport string) string {
	return (&url.URL{Scheme: "tls", Host: hostport}).String()
}

// DialEndpoint connects to the first broker of e that answers, checking inside the
// TLS handshake that it proves e's CA pin, and logs in with e's credentials.
func DialEndpoint(e Endpoint, o Options) (*Client, error) {
	servers := e.Servers
	if len(o.Servers) > 0 {
		servers = o.Servers
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("%w: no broker address", ErrEndpoint)
	}
	urls := make([]string, 0, len(servers))
	for _, s := range servers {
		urls = append(urls, brokerURL(s))
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	dialTimeout := 5 * time.Second
	if o.Timeout > 0 && o.Timeout < dialTimeout {
		dialTimeout = o.Timeout
	}
	tlsConfig := pki.PinnedClientConfig(e.Pin)
	// Not held while a control node starts, as hosts are (broker.Admission): an
	// operator can reach a node that is still starting, and see why.
	tlsConfig.NextProtos = []string{broker.OperatorProtocol}
	denied, loss := &deniedSubjects{}, newConnLoss()
	loggedIn := new(atomic.Pointer[string]) // the key each login signed with, the last
	connect := func() (*nats.Conn, error) {
		return nats.Connect(strings.Join(urls, ","), append(credsLogin(e.Creds, tlsConfig, dialTimeout, loggedIn),
			nats.ErrorHandler(denied.record),
			nats.DisconnectErrHandler(loss.disconnected),
			nats.Name("meshctl"),
			nats.Timeout(dialTimeout),
			nats.DontRandomize(),
			// The brokers are the ones meshctl was given (mesh.json, the context,
			// --servers), not those a broker's INFO lists, which nobody signs.
			nats.IgnoreDiscoveredServers(),
			// A broker that stops under a call (its control node killed, or
			// restarted) is left for another of the list, pin checked as at the
			// first dial: a read or a token creation is then sent again (Call),
			// where the call ended "nats: connection closed", exit 1, whether or
			// not a change it carried went through.
			nats.MaxReconnects(reconnects),
			nats.ReconnectWait(250*time.Millisecond),
		)...)
	}
	start := time.Now()
	nc, err := connect()
	// A broker at its connection limit says so before the TLS handshake, and takes
	// another connection as soon as one closes: during a storm of hosts refused for
	// room, an operator's connection waits its turn, as a call waits for a leader.
	// So does one that a broker took and did not greet in time (stalled), and one
	// no broker of the list accepted (nats.go's "no servers available": refused
	// everywhere): a control node opens its broker only once a leader is known,
	// and during a restart of every control node (a configuration tool's
	// `systemctl restart` on each) meshctl exited 3 within milliseconds.
	wait, pause := leaderWait(o.LeaderWait), 100*time.Millisecond
	for ; err != nil && (brokerFull(err) || stalled(err) || errors.Is(err, nats.ErrNoServers)) && time.Since(start)+pause < wait; pause = min(2*pause, time.Second) {
		time.Sleep(pause)
		nc, err = connect()
	}
	if err != nil && errors.Is(err, nats.ErrNoServers) && wait > 0 {
		err = fmt.Errorf("%w (refused for %s, --leader-wait: no control node listens there yet, or not at these addresses)", err, time.Since(start).Round(100*time.Millisecond))
	}
	if err != nil {
		if errors.Is(err, pki.ErrPinMismatch) {
			return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, strings.Join(servers, ", "), pki.ErrPinMismatch)
		}
		var ce *pki.ClockError
		if errors.As(err, &ce) {
			// The mesh, by its chain, seen by a clock that disagrees with the
			// one that made its certificates; nothing was sent.
			return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, strings.Join(servers, ", "), ce)
		}
		if errors.Is(err, ErrNoUserJWT) || errors.Is(err, ErrFileTooLarge) {
			// The credentials, not the mesh: nothing was sent.
			return nil, fmt.Errorf("%w: %w", ErrEndpoint, err)
		}
		if errors.Is(err, nats.ErrAuthorization) {
			if exp := credsExpiry(e.Creds); !exp.IsZero() && !time.Now().Before(exp) {
				// Said as what it most likely is: the broker does not say why.
				return nil, fmt.Errorf("%w: the broker refused them, and they expired at %s by this machine's clock: ask for new ones (meshctl operator add, on the control node holding the operator account key)",
					ErrCredsExpired, exp.UTC().Format(time.RFC3339))
			}
			// Not unreachable in fact, but that is the exit code (3) it has always
			// had, and the one scripts that wait out an upgrade retry on.
			return nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, strings.Join(servers, ", "), ErrLoginRefused)
		}
		hint := ""
		if e.Hint != "" {
			hint = " (" + e.Hint + ")"
		}
		return nil, fmt.Errorf("%w at %s: %w%s", ErrUnreachable, strings.Join(servers, ", "), err, hint)
	}
	c := newClient(nc, timeout, o.LeaderWait)
	c.sending, c.waiting = o.Sending, o.Waiting
	c.denied, c.loss, c.pin = denied, loss, e.Pin
	c.credsExpire = credsExpiry(e.Creds)
	c.sign = credsSigner(e.Creds, loggedIn)
	return c, nil
}

// brokerFull reports whether err is a broker refusing a connection before its TLS
// handshake because it holds as many as it may (nats-server's max_connections): its
// "-ERR" line where the handshake's first record was expected.
func brokerFull(err error) bool {
	var rh tls.RecordHeaderError
	return errors.As(err, &rh) && bytes.HasPrefix(rh.RecordHeader[:], []byte("-ERR "))
}

// stalled reports whether err is a broker that took the connection and did not
// complete the TLS handshake, its greeting or the login in time: a control node
// busy with a storm of reconnecting hosts (10,000 of them after a restart), which
// another try soon gets through. An address nothing answers at fails at the dial,
// which is not tried again.
func stalled(err error) bool {
	if errors.Is(err, nats.ErrTimeout) {
		return true // the login's PING went unanswered
	}
	var op *net.OpError
	timedOut := errors.Is(err, context.DeadlineExceeded) || errors.As(err, &op) && op.Timeout()
	if errors.Is(err, broker.ErrHandshake) {
		return timedOut
	}
	return timedOut && op != nil && op.Op == "read"
}

// CredsLogin returns the options of a connection that logs in with a .creds file
// over TLS configured by tlsConfig (the pin check included): the user key signs the
// server's nonce bound to the TLS session (broker.BoundDialer), so that anything
// holding a leaf of the mesh CA cannot relay the login. The file is read at each
// connection and the seed is wiped after signing, as nats.UserCredentials does.
func CredsLogin(creds string, tlsConfig *tls.Config, timeout time.Duration) []nats.Option {
	return credsLogin(creds, tlsConfig, timeout, nil)
}

// credsLogin is CredsLogin, recording in loggedIn (when not nil) the public key each
// login signed its nonce with: a reconnection logs in with what the file holds then.
func credsLogin(creds string, tlsConfig *tls.Config, timeout time.Duration, loggedIn *atomic.Pointer[string]) []nats.Option {
	d := &broker.BoundDialer{TLS: tlsConfig, Timeout: timeout}
	userJWT := func() (string, error) {
		b, err := readSmall(creds)
		if err != nil {
			return "", err
		}
		defer clear(b)
		return credsJWT(creds, b)
	}
	sign := func(msg []byte) ([]byte, error) {
		b, err := readSmall(creds)
		if err != nil {
			return nil, err
		}
		defer clear(b)
		kp, err := jwt.ParseDecoratedUserNKey(b)
		if err != nil {
			return nil, fmt.Errorf("the credentials file %s holds no user seed: %w", creds, err)
		}
		defer kp.Wipe()
		if loggedIn != nil {
			if key, err := kp.PublicKey(); err == nil {
				loggedIn.Store(&key)
			}
		}
		return kp.Sign(msg)
	}
	opts := []nats.Option{nats.SetCustomDialer(d), nats.TLSHandshakeFirst(), nats.UserJWT(userJWT, d.Sign(sign))}
	// Replies come to the inbox of the credentials' key, the only one the
	// credentials of a removed control node may read (authn.RemovedOperatorGrant).
	// A file that cannot be read now fails the connection with its reason.
	if text, err := userJWT(); err == nil {
		if claims, err := jwt.DecodeUserClaims(text); err == nil && nkeys.IsValidPublicUserKey(claims.Subject) {
			opts = append(opts, nats.CustomInboxPrefix(api.OperatorInbox(claims.Subject)))
		}
	}
	return opts
}

// NewClient wraps an existing connection (tests; the demo uses Dial).
func NewClient(nc *nats.Conn, timeout time.Duration) *Client {
	return newClient(nc, timeout, 0)
}

func newClient(nc *nats.Conn, timeout, wait time.Duration) *Client {
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return &Client{nc: nc, timeout: timeout, leaderWait: leaderWait(wait), firstAttempt: defaultFirstAttempt}
}

// leaderWait is Options.LeaderWait in effect: 0 is DefaultLeaderWait, a negative
// value none.
func leaderWait(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return DefaultLeaderWait
	case d < 0:
		return 0
	}
	return d
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// Call sends req to operation op and decodes the result into res. A refusal by the
// control plane comes back as *api.Error.
//
// A change is sent once: if no answer comes within the timeout, the control node that
// took it may have carried it out, and ErrNoAnswer says so. An answer comes back only
// through the broker the request went in by, so when the connection to that broker
// closes under a change, the call says so (ErrConnectionLost) as soon as it is clear
// no answer is on its way (answerGrace), instead of waiting out the timeout. A read
// or a token creation (api.Repeatable) is sent again when no answer came within 2 s,
// then 4 s, and so on until the timeout, and at once on the broker that took the
// connection over, because a leader that stops takes the requests it was serving
// with it, and the same request again cannot change anything twice. A declaration
// (api.Resendable) goes under a request id the control plane carries out once, and
// is sent again likewise (first after 5 s), marked as sent again. A refusal that
// says nothing was done (AdminResponse.NotDone) is sent again too, whatever the op.
func (c *Client) Call(op string, req, res any) error {
	return c.call(op, "", false, req, res)
}

// CallRequest is Call for a change that goes under a request id (api.Resendable),
// under id, which the caller chose (api.CheckRequestID): the same change sent
// again under it by another process, a script's retry after an exit 3 or 9, is
// carried out at most once while the control plane keeps the id (an hour after the
// change, state.RequestRetention), and answered with what it did
// (api.DeclareResult.Repeated). With mayRepeat, every sending is marked as one that
// may repeat an earlier one (AdminRequest.Again), as a sending again is: a control
// plane that cannot record the id (a member on older rules) then refuses it rather
// than carry it out without, and one older than ids refuses the mark
// (bad_request); both carry out nothing.
func (c *Client) CallRequest(op, id string, mayRepeat bool, req, res any) error {
	if !api.Resendable(op) {
		return fmt.Errorf("%s is not sent under a request id", op)
	}
	if err := api.CheckRequestID(id); err != nil {
		return err
	}
	return c.call(op, id, mayRepeat, req, res)
}

// call is Call and CallRequest: id is the request id of a resendable op ("": one
// made here), and mayRepeat marks its first sending as sent again.
func (c *Client) call(op, id string, mayRepeat bool, req, res any) error {
	data, err := api.EncodeAdminRequest(op, req)
	if err != nil {
		return err
	}
	if c.sending != nil && !api.ReadOnly(op) && !changesNothing(req) {
		c.sending(op)
	}
	out := &sending{op: op, data: data}
	if c.waiting != nil {
		slow := time.AfterFunc(SlowAnswer, func() { c.waiting(op, c.timeout) })
		defer slow.Stop()
	}
	if api.Resendable(op) {
		if out.again, err = api.EncodeAdminRequestAgain(op, req); err != nil {
			return err
		}
		if id == "" {
			id = api.NewRequestID()
		}
		out.id, out.first, out.sentAgain, out.mayRepeat = id, time.Now(), mayRepeat, mayRepeat
	}
	// A refusal that says nothing was done (the control node that took it no longer
	// led: a hand-over, a rolling restart) is sent again, to the one that leads now,
	// for as long as a call waits for a leader.
	deadline, pause := time.Now().Add(c.leaderWait), 50*time.Millisecond
	for {
		resp, err := c.callOnce(out)
		if err == nil && resp.Error != nil && resp.NotDone && time.Until(deadline) > pause {
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
			continue
		}
		if err != nil {
			return err
		}
		if resp.Error != nil {
			if out.mayRepeat && api.RefusedMember(resp.Error, "again") {
				return fmt.Errorf("%w: the control plane is older than request ids given to it (it refused the mark of a change that may repeat an earlier one: %s); nothing was carried out", ErrRequestIDRefused, resp.Error.Message)
			}
			if resp.NotDone && out.unanswered && !api.ReadOnly(op) && !changesNothing(req) {
				// This sending was not carried out; an earlier one may be, still
				// (a leader whose log write hung took it up: a review).
				return fmt.Errorf("%w; an earlier sending of it went unanswered and may still be carried out: look (%s) before running it again", resp.Error, LookAt(op))
			}
			if resp.Error.Code == api.CodeNotFound && strings.HasPrefix(resp.Error.Message, "unknown operation") && !strings.Contains(resp.Error.Message, "upgrade") {
				// A control node older than the operation says no more (newer ones
				// name their version): during an upgrade in the documented order
				// the leader is the last upgraded (a walkthrough).
				return &api.Error{Code: resp.Error.Code, Message: resp.Error.Message + ": the leading control node runs a meshctl older than this one, which does not know " + op +
					"; nothing was done: upgrade every control node (meshctl control status shows what each runs), or run the meshctl they run"}
			}
			if out.sentAgain && !out.mayRepeat && resp.Error.Code == api.CodeBadRequest {
				// The first sending was checked alike and its answer lost; a
				// control plane older than the mark refuses it as unknown.
				return fmt.Errorf("%w while %s waited for its answer; sent again, it was refused (%s): a control plane older than this meshctl refuses a change sent again, and the first sending may have been carried out: look (`meshctl nodes`) before running it again",
					ErrConnectionLost, op, resp.Error.Message)
			}
			return resp.Error
		}
		if res == nil {
			return nil
		}
		if len(resp.Result) == 0 {
			// An answer of neither: nothing to read, and json's "unexpected end
			// of JSON input" would say nothing of why.
			return &api.Error{Code: api.CodeInternal, Message: "the control plane answered " + op + " with no result and no error: its log says why; report it as a bug"}
		}
		if err := json.Unmarshal(resp.Result, res); err != nil {
			return &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("the control plane's answer to %s cannot be read (%v): report it as a bug", op, err)}
		}
		return nil
	}
}

// sending is one call's request as it goes out: the same request id (api.Resendable
// ops) at every sending, and the mark of one sent again once the first may have
// reached the control plane.
type sending struct {
	op    string
	data  []byte
	again []byte    // data marked as sent again (AdminRequest.Again); nil: never sent again
	id    string    // the request id (api.RequestHeader); "" for the other ops
	first time.Time // when it was first sent: sent again within api.MaxResend of it only
	// sentAgain records that a sending marked as sent again went out.
	sentAgain bool
	// mayRepeat: every sending is marked as sent again, the first too
	// (CallRequest).
	mayRepeat bool
	// unanswered records that a sending went unanswered (timed out, or its
	// connection lost): a later sending's "nothing was done" speaks for itself
	// only, and the unanswered one may still be carried out.
	unanswered bool
}

// message is the request to send now.
func (s *sending) message(subject string) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: s.data}
	if s.sentAgain {
		m.Data = s.again
	}
	if s.id != "" {
		m.Header = nats.Header{api.RequestHeader: []string{s.id}}
	}
	return m
}

// callOnce sends one call (request, and its own sending again) and decodes the
// answer.
func (c *Client) callOnce(out *sending) (api.AdminResponse, error) {
	var resp api.AdminResponse
	op := out.op
	msg, err := c.request(out)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return resp, fmt.Errorf("%w; waited %s", ErrNoLeader, c.leaderWait)
		}
		if errors.Is(err, ErrReadOnly) {
			return resp, ErrReadOnly
		}
		repeatable := api.Repeatable(op) || out.again != nil
		if (errors.Is(err, errAnswerLost) || errors.Is(err, nats.ErrConnectionClosed)) && !c.credsExpire.IsZero() && !time.Now().Before(c.credsExpire) {
			// The broker ends a connection at its credentials' expiry, and
			// refuses them from then on: not a connection to wait out.
			if api.ReadOnly(op) {
				return resp, fmt.Errorf("%w (at %s): the connection closed with them before %s was answered; ask for new ones (meshctl operator add)",
					ErrCredsExpired, c.credsExpire.UTC().Format(time.RFC3339), op)
			}
			return resp, fmt.Errorf("%w (at %s): the connection closed with them before %s was answered; the control node that took it may have carried it out: look (%s) with credentials that are valid, and ask for new ones (meshctl operator add)",
				ErrCredsExpired, c.credsExpire.UTC().Format(time.RFC3339), op, LookAt(op))
		}
		if errors.Is(err, errAnswerLost) {
			if repeatable {
				return resp, fmt.Errorf("%w while %s waited for its answer, and it was not answered through the brokers that took the connection over within %s; run it again", ErrConnectionLost, op, c.timeout)
			}
			return resp, fmt.Errorf("%w while %s waited for its answer, which comes back only through the broker that took the request; the control node that took it may have carried it out: look (%s) before running it again", ErrConnectionLost, op, LookAt(op))
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			if repeatable {
				return resp, fmt.Errorf("%w before %s was answered, and no broker of the list took it again; run it again", ErrConnectionLost, op)
			}
			return resp, fmt.Errorf("%w before %s was answered, and no broker of the list took it again; the control node that took it may have carried it out: look (%s) before running it again", ErrConnectionLost, op, LookAt(op))
		}
		if errors.Is(err, nats.ErrTimeout) {
			if c.denied.has(api.AdminSubject(op)) {
				return resp, ErrReadOnly
			}
			if api.ReadOnly(op) {
				return resp, fmt.Errorf("%w %s within %s; run it again", ErrNoAnswer, op, c.timeout)
			}
			// Not "before it stopped": a leader that cannot commit (no quorum of
			// voters that can write their log) holds the request, and carries it out
			// once one can, a minute later as well as never.
			return resp, fmt.Errorf("%w %s within %s; it may have been carried out, or may still be (a leader waiting for a quorum that can write commits it once there is one): look (%s) before running it again, and meshctl control status for the voters", ErrNoAnswer, op, c.timeout, LookAt(op))
		}
		return resp, err
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return resp, fmt.Errorf("malformed reply from the control plane: %w", err)
	}
	return resp, nil
}

// request sends one call (see Call for when it is sent again).
func (c *Client) request(out *sending) (*nats.Msg, error) {
	subject := api.AdminSubject(out.op)
	if !api.Repeatable(out.op) && out.again == nil {
		m, err := c.signed(out.op, out.message(subject))
		if err != nil {
			return nil, err
		}
		return c.attempt(m, c.timeout)
	}
	deadline := time.Now().Add(c.timeout)
	attempt := c.firstAttempt
	if out.again != nil {
		// A change takes a commit and, for a declaration, a signature and a
		// message for each node it reaches: more than a read, at 10,000 nodes.
		attempt = c.firstAttempt * 5 / 2
	}
	for {
		wait := min(attempt, time.Until(deadline))
		m, err := c.signed(out.op, out.message(subject))
		if err != nil {
			if out.unanswered {
				return nil, fmt.Errorf("%w; an earlier sending of it went unanswered and may still be carried out: look (%s) before running it again", err, LookAt(out.op))
			}
			return nil, err
		}
		msg, err := c.attempt(m, wait)
		lost, timedOut := errors.Is(err, errAnswerLost), errors.Is(err, nats.ErrTimeout)
		if (!lost && !timedOut) || time.Until(deadline) <= 0 {
			return msg, err
		}
		out.unanswered = true
		if out.again != nil {
			if time.Since(out.first) > api.MaxResend {
				return msg, err // its id may be off the record by the time it arrives
			}
			// The first sending may have reached the control plane: the next
			// says so, and is carried out only if the first was not.
			out.sentAgain = true
		}
		if lost {
			continue // sent again on the broker that took the connection over
		}
		attempt *= 2
	}
}

// LookAt names the commands that show whether a change op asked for was carried
// out, for an operator who cannot tell.
func LookAt(op string) string {
	switch {
	case op == api.OpTokenCreate || op == api.OpTokenCancel:
		return "`meshctl token list`"
	case strings.HasPrefix(op, "signing-key."):
		return "`meshctl signing-key status`"
	case strings.HasPrefix(op, "control."):
		return "`meshctl control status`, `meshctl nodes`"
	case strings.HasPrefix(op, "operator."):
		return "`meshctl operator list`"
	}
	return "`meshctl nodes`"
}

// changesNothing reports whether req asks to change nothing (a dry run).
func changesNothing(req any) bool {
	r, ok := req.(interface{ ChangesNothing() bool })
	return ok && r.ChangesNothing()
}

// answerGrace is how long a call whose connection closed under it still waits for its
// answer: one a broker already routed to where the connection went is delivered there.
const answerGrace = time.Second

// errAnswerLost means the connection a request went out on closed before its answer
// came, and none came within answerGrace after.
var errAnswerLost = errors.New("the connection closed under the request")

// attempt sends data to subject once (Request: again on "no responders") and waits up
// to timeout for the answer, or until answerGrace after the connection closed under
// it (errAnswerLost), or until the broker refused to carry it (ErrReadOnly: it says so
// at once, and never delivers the request).
func (c *Client) attempt(m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	subject := m.Subject
	if c.denied.has(subject) {
		return nil, ErrReadOnly // the broker refuses this connection the subject for good
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	lost, denied := c.loss.watch(), c.denied.watch()
	go func() {
		var grace <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-lost:
				lost = nil
				t := time.NewTimer(answerGrace)
				defer t.Stop()
				grace = t.C
			case <-grace:
				cancel(errAnswerLost)
				return
			case <-denied:
				if c.denied.has(subject) {
					cancel(ErrReadOnly)
					return
				}
				denied = c.denied.watch()
			}
		}
	}()
	return RequestMsgContext(ctx, c.nc, m, timeout, c.leaderWait)
}

// connLoss tells the calls waiting on a connection that it closed under them: their
// requests' answers, routed back through the broker each went in by, are lost with
// that broker's connection even when another broker of the list takes it over.
type connLoss struct {
	mu     sync.Mutex
	closed chan struct{}
}

func newConnLoss() *connLoss { return &connLoss{closed: make(chan struct{})} }

// disconnected is the connection's DisconnectErrHandler.
func (l *connLoss) disconnected(*nats.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	close(l.closed)
	l.closed = make(chan struct{})
}

// watch returns a channel closed when the connection next closes; nil, never closed,
// for a client that wraps a connection it did not dial (NewClient).
func (l *connLoss) watch() <-chan struct{} {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// reconnects bounds the operator connection's reconnection attempts: each round tries
// every broker of the list, 250 ms apart, so a few seconds of a mesh whose brokers
// all stopped end the call (ErrConnectionLost) rather than keep it waiting.
const reconnects = 8

// ErrConnectionLost means the connection to the control plane closed under a call
// and no broker of the list took it again: a change the call carried may have been
// carried out.
var ErrConnectionLost = errors.New("the connection to the control plane was lost")

// Request sends data to subject and waits up to timeout for the answer. "No
// responders" means the broker delivered the request to nobody (no leader yet, or an
// election in progress), so sending it again cannot make anything happen twice; it is
// sent again until leaderWait has passed, and the last "no responders" is returned.
func Request(nc *nats.Conn, subject string, data []byte, timeout, leaderWait time.Duration) (*nats.Msg, error) {
	return RequestContext(context.Background(), nc, subject, data, timeout, leaderWait)
}

// RequestContext is Request ended early by ctx: its error is then ctx's cause. A
// timeout is nats.ErrTimeout, as Request's.
func RequestContext(ctx context.Context, nc *nats.Conn, subject string, data []byte, timeout, leaderWait time.Duration) (*nats.Msg, error) {
	return RequestMsgContext(ctx, nc, &nats.Msg{Subject: subject, Data: data}, timeout, leaderWait)
}

// RequestMsgContext is RequestContext for a message with headers.
func RequestMsgContext(ctx context.Context, nc *nats.Conn, m *nats.Msg, timeout, leaderWait time.Duration) (*nats.Msg, error) {
	deadline := time.Now().Add(leaderWait)
	pause := 50 * time.Millisecond
	for {
		msg, err := requestOnce(ctx, nc, m, timeout)
		remaining := time.Until(deadline)
		if !errors.Is(err, nats.ErrNoResponders) || remaining <= 0 {
			return msg, err
		}
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(min(pause, remaining)):
		}
		pause = min(2*pause, time.Second)
	}
}

// requestOnce is one request within timeout, or until ctx ends.
func requestOnce(ctx context.Context, nc *nats.Conn, m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg, err := nc.RequestMsgWithContext(rctx, m)
	switch {
	case err == nil:
		return msg, nil
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case errors.Is(err, context.DeadlineExceeded):
		return nil, nats.ErrTimeout
	}
	return nil, err
}

// MintToken mints a worker token for node: the secret is generated here and only its
// hash reaches the control plane, which answers with what hosts must be told
// (brokers, pin, current signing key) and the expiry by its clock.
func (c *Client) MintToken(node string, role tokenfmt.Role, ttl time.Duration, labels map[string]string) (tokenfmt.Token, error) {
	tok, _, err := c.Mint(TokenTerms{Node: node, Role: role, TTL: ttl, Labels: labels})
	return tok, err
}

// TokenTerms are what a worker token admits.
type TokenTerms struct {
	Node   string
	Role   tokenfmt.Role
	TTL    time.Duration
	Labels map[string]string
	// Replace cancels the node's pending tokens as this one is minted; without it
	// the control plane refuses while one is pending (api.CodeTokenPending).
	Replace bool
}

// Mint mints a token on terms t, and returns it with the pending tokens it replaced.
func (c *Client) Mint(t TokenTerms) (tokenfmt.Token, []api.TokenView, error) {
	var secret [tokenfmt.SecretSize]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return tokenfmt.Token{}, nil, err
	}
	id := (tokenfmt.Token{Secret: secret}).SecretHash()
	var res api.TokenCreateResult
	err := c.Call(api.OpTokenCreate, api.TokenCreateRequest{
		ID: hex.EncodeToString(id[:]), ProofKey: hex.EncodeToString(tokenfmt.Token{Secret: secret}.ProofKey()), Node: t.Node, Role: string(t.Role),
		Labels: t.Labels, TTL: api.Duration(t.TTL), Replace: t.Replace,
	}, &res)
	if err != nil {
		return tokenfmt.Token{}, nil, err
	}
	// The token makes hosts trust the CA it pins: it must be the CA this
	// connection proved, not one the answer names, which a machine holding a leaf
	// of the mesh's CA (a removed control node's) could have sent.
	if c.pin != ([32]byte{}) && res.CAPin != hex.EncodeToString(c.pin[:]) {
		return tokenfmt.Token{}, nil, fmt.Errorf("%w: the control plane's answer pins CA %.16s…, and the brokers of this connection proved CA %.16s…: no token was made (the mint is pending until it expires: cancel it with `meshctl token cancel %s`)",
			ErrPinMismatch, res.CAPin, hex.EncodeToString(c.pin[:]), t.Node)
	}
	tok, err := TokenFrom(secret, t.Node, t.Role, res)
	return tok, res.Replaced, err
}

// ErrRequestIDRefused means a control plane older than request ids given by the
// caller (CallRequest) refused the change, and carried out nothing.
var ErrRequestIDRefused = errors.New("a request id cannot be given to this control plane")

// ErrPinMismatch means the control plane's answer to a token's creation named
// another CA than the one the connection was checked against.
var ErrPinMismatch = errors.New("the answer names another mesh CA than the one this connection proved")

// TokenFrom assembles a token from its secret and the control plane's answer to the
// token's creation.
func TokenFrom(secret [tokenfmt.SecretSize]byte, node string, role tokenfmt.Role, res api.TokenCreateResult) (tokenfmt.Token, error) {
	t := tokenfmt.Token{Secret: secret, Mesh: res.Mesh, Node: node, Role: role, Expiry: res.Expiry.UTC().Truncate(time.Second)}
	var linkLocal []netip.AddrPort
	for _, b := range res.Brokers {
		ap, err := netip.ParseAddrPort(b)
		if err != nil {
			return t, fmt.Errorf("the control plane lists broker %q, which is not ip:port", b)
		}
		if ap.Addr().Is6() && ap.Addr().IsLinkLocalUnicast() {
			// Listed from before meshctl refused one: no host dials it
			// (no zone), so the token carries the others (tokenfmt.CheckAddress).
			linkLocal = append(linkLocal, ap)
			continue
		}
		if len(t.Brokers) == tokenfmt.MaxBrokers {
			// A token carries at most so many; the node learns every broker
			// from its signed membership once enrolled. With more control
			// nodes, every mint failed after the token was recorded (a review).
			continue
		}
		t.Brokers = append(t.Brokers, ap)
	}
	if len(t.Brokers) == 0 {
		t.Brokers = linkLocal[:min(len(linkLocal), tokenfmt.MaxBrokers)] // nothing else to carry
	}
	pin, err := hex.DecodeString(res.CAPin)
	if err != nil || len(pin) != 32 {
		return t, errors.New("the control plane sent a malformed CA pin")
	}
	copy(t.CAPin[:], pin)
	key, err := hex.DecodeString(res.SigningKey)
	if err != nil || len(key) != ed25519.PublicKeySize {
		return t, errors.New("the control plane sent a malformed signing key")
	}
	t.SigningKey = ed25519.PublicKey(key)
	if err := t.Validate(); err != nil {
		return t, fmt.Errorf("minted token does not validate: %w", err)
	}
	return t, nil
}

// Nodes fetches the roster (or the nodes named in req), following the pages. A
// page the control plane could not send (api.CodeTooLarge) is asked for again at
// half the size, and the pages after it at that size.
func (c *Client) Nodes(req api.NodesRequest) (api.NodesResult, error) {
	var all api.NodesResult
	for {
		var page api.NodesResult
		err := c.Call(api.OpNodes, req, &page)
		if limit, ok := smallerPage(err, req.Limit); ok {
			req.Limit = limit
			continue
		}
		if err != nil {
			return all, err
		}
		nodes := append(all.Nodes, page.Nodes...)
		all = page
		all.Nodes = nodes
		if page.Next == "" {
			all.Next = ""
			return all, nil
		}
		req.After = page.Next
	}
}

// Progress asks where req's targets stand (what `declare --wait` polls), in as
// many requests as it takes: at most api.MaxNodesPage targets each, fewer when an
// answer would not fit in one message. The targets an answer leaves out
// (api.ProgressResult.Left) are asked about again; a request whose answer the
// control plane could not send (api.CodeTooLarge) is sent again with half as many
// targets, and the requests after it with as many. The result answers for every
// target, in req's order.
func (c *Client) Progress(req api.ProgressRequest) (api.ProgressResult, error) {
	all := api.ProgressResult{Others: []api.TargetProgress{}}
	targets, size := req.Targets, api.MaxNodesPage
	for len(targets) > 0 {
		page := targets[:min(size, len(targets))]
		var res api.ProgressResult
		err := c.Call(api.OpProgress, api.ProgressRequest{Targets: page, Body: req.Body}, &res)
		if smaller, ok := smallerPage(err, size); ok {
			size = smaller
			continue
		}
		if err != nil {
			return all, err
		}
		answered := len(page) - res.Left
		if res.Left < 0 || answered <= 0 || res.Converged+len(res.Others) != answered {
			return all, fmt.Errorf("%w: it answered for %d of %d nodes, and left out %d", ErrProgressAnswer, res.Converged+len(res.Others), len(page), res.Left)
		}
		all.Converged += res.Converged
		all.Others = append(all.Others, res.Others...)
		targets = targets[answered:]
	}
	return all, nil
}

// ErrProgressAnswer is an answer to progress that does not add up: a control
// plane that answered for other nodes than it was asked about.
var ErrProgressAnswer = errors.New("the control plane's answer to progress does not add up")

// smallerPage is the page size to ask again with after err: half of limit (0: the
// control plane's, api.MaxNodesPage), when err says the answer for limit would not
// fit in one message (api.CodeTooLarge); false for any other err, and when even
// one did not.
func smallerPage(err error, limit int) (int, bool) {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeTooLarge {
		return 0, false
	}
	if limit <= 0 || limit > api.MaxNodesPage {
		limit = api.MaxNodesPage
	}
	return limit / 2, limit > 1
}

// deniedSubjects remembers the subjects the broker refused this connection to publish
// on: a request it refused is never answered, and without this the caller would be
// told that the control plane may have carried it out.
type deniedSubjects struct {
	mu   sync.Mutex
	subj map[string]bool
	// recorded is closed, and replaced, at each refusal recorded (watch).
	recorded chan struct{}
}

// watch returns a channel closed at the next refusal recorded; nil, never closed, for
// a client that wraps a connection it did not dial (NewClient).
func (d *deniedSubjects) watch() <-chan struct{} {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.recorded == nil {
		d.recorded = make(chan struct{})
	}
	return d.recorded
}

// record is the connection's error handler: nats.go reports a permissions violation
// asynchronously, with the subject quoted in the error's text (the only place the
// client library gives it).
func (d *deniedSubjects) record(_ *nats.Conn, _ *nats.Subscription, err error) {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return
	}
	msg := strings.ToLower(err.Error())
	i := strings.Index(msg, "publish to ")
	if i < 0 {
		return
	}
	subject := strings.Trim(strings.TrimSpace(msg[i+len("publish to "):]), `"'`)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.subj == nil {
		d.subj = map[string]bool{}
	}
	if len(d.subj) < 64 {
		d.subj[subject] = true
	}
	if d.recorded != nil {
		close(d.recorded)
		d.recorded = nil
	}
}

func (d *deniedSubjects) has(subject string) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.subj[strings.ToLower(subject)]
}
