// Package operatorcreds issues operator credentials by name: one person's, or one
// automation's, each recorded by the mesh (its name and public key, never its
// seed), expiring, and revocable on its own (meshctl operator revoke) without
// touching anyone else's. The control nodes' own admin.creds stay what a control
// node's operator commands use.
package operatorcreds

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"mesh/controlplane/api"
	"mesh/controlplane/datadir"
	"mesh/controlplane/operator"
)

// ErrNoAccountKey: the data directory does not hold the operator account key, which
// signs operator credentials; only the control node holding it issues them.
var ErrNoAccountKey = errors.New("operator credentials are issued only on the control node holding the operator account key")

// DefaultTTL is how long credentials live unless --ttl says otherwise; MaxTTL the
// longest (the control plane refuses longer).
const (
	DefaultTTL = 90 * 24 * time.Hour
	MaxTTL     = 2 * 365 * 24 * time.Hour
	MinTTL     = time.Hour
)

// Options are what Issue needs besides the data directory.
type Options struct {
	Name string
	TTL  time.Duration
	// Renew issues them beside the valid credentials of Name, which stay valid
	// (until they expire, or are revoked by their key).
	Renew bool
	Now   func() time.Time
	// Operator tunes the call that records the credentials.
	Operator operator.Options
}

// Issued is a credential issued and recorded.
type Issued struct {
	// Creds is the .creds file (user JWT and seed): the only copy of the seed.
	Creds []byte
	// Record is the mesh's record of it.
	Record api.OperatorView
}

// Issue makes operator credentials named o.Name, valid for o.TTL, signed by the
// operator account key of dir, and records them through dir's control plane: only
// recorded credentials are listed, log in, and may be revoked by name. Nothing is
// written: the caller writes Creds where it was told, and if that fails, says to
// revoke them (nobody holds their seed).
func Issue(dir datadir.Dir, o Options) (Issued, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if err := api.CheckOperatorName(o.Name); err != nil {
		return Issued{}, err
	}
	if o.TTL < MinTTL || o.TTL > MaxTTL {
		return Issued{}, fmt.Errorf("--ttl %s: credentials live %s to %s", o.TTL, MinTTL, MaxTTL)
	}
	cfg, err := dir.LoadConfig()
	if err != nil {
		return Issued{}, err
	}
	if !dir.Exists(datadir.AccountKeyFile) {
		// mesh.json names the holder at this node's join, which may have been lost
		// and its keys restored elsewhere since (a walkthrough was sent to the
		// removed machine): the mesh says where they are now, as for a control
		// token (join.Mint).
		where := "the machine that ran meshctl bootstrap"
		if h, asked := operator.CAHolderNow(dir, o.Operator); asked && h != "" {
			where = h + ", which holds it now, as its heartbeats say"
		} else if asked {
			where = "the control node it is restored into: no running control node says it holds it"
		} else if cfg.CAHolder != "" && cfg.CAHolder != cfg.Node {
			where = cfg.CAHolder + ", unless it was restored elsewhere (meshctl nodes marks the CA holder)"
		}
		return Issued{}, fmt.Errorf("%w: this is %s, and its data directory holds no %s; issue them on %s", ErrNoAccountKey, cfg.Node, datadir.AccountKeyFile, where)
	}
	if err := dir.CheckKeysPrivate(datadir.AccountKeyFile); err != nil {
		return Issued{}, err
	}
	seed, err := dir.ReadFile(datadir.AccountKeyFile)
	if err != nil {
		return Issued{}, err
	}
	account, err := nkeys.FromSeed(seed)
	if err != nil {
		return Issued{}, fmt.Errorf("%s: %w: %w", datadir.AccountKeyFile, datadir.ErrCorrupt, err)
	}
	user, err := nkeys.CreateUser()
	if err != nil {
		return Issued{}, err
	}
	userPub, _ := user.PublicKey()
	userSeed, _ := user.Seed()
	now := o.Now()
	claims := jwt.NewUserClaims(userPub)
	claims.Name = o.Name
	claims.IssuedAt = now.Unix()
	claims.Expires = now.Add(o.TTL).Unix()
	token, err := claims.Encode(account)
	if err != nil {
		return Issued{}, fmt.Errorf("sign the operator JWT: %w", err)
	}
	creds, err := jwt.FormatUserConfig(token, userSeed)
	if err != nil {
		return Issued{}, err
	}
	c, err := operator.Dial(dir, o.Operator)
	if err != nil {
		return Issued{}, err
	}
	defer c.Close()
	var res api.OperatorAddResult
	if err := c.Call(api.OpOperatorAdd, api.OperatorAddRequest{JWT: token, IssuedBy: cfg.Node, Renew: o.Renew}, &res); err != nil {
		if api.RefusedMember(err, "renew") {
			// A control plane from before renewals decodes requests strictly.
			return Issued{}, &api.Error{Code: api.CodeOlderControlNode, Message: "the control plane is older than renewals (--renew): nothing was recorded; upgrade every control node first"}
		}
		if mayBeRecorded(err) {
			// The record may have committed, and the seed goes with this process:
			// a renewal's record nobody holds kept the name at its two valid
			// credentials, and the refusal of the next said to revoke the older,
			// the one in use (a review). Named here, it is revoked alone (a
			// plain add's, by name: the only valid ones then, and --key needs
			// rules 14).
			revoke := "meshctl operator revoke " + o.Name
			if o.Renew {
				revoke += " --key " + userPub
			}
			return Issued{}, fmt.Errorf("%w\nthe mesh may have recorded these credentials (key %s), and nobody holds their seed: if meshctl operator list shows that key, revoke them (%s), then run this again",
				err, userPub, revoke)
		}
		return Issued{}, err
	}
	return Issued{Creds: creds, Record: res.Operator}, nil
}

// mayBeRecorded reports whether an operator.add that failed may have been
// committed all the same: no answer, a connection lost, or an
// answer saying the change may still be (or was) carried out; not a refusal,
// which records nothing.
func mayBeRecorded(err error) bool {
	if errors.Is(err, operator.ErrNoAnswer) || errors.Is(err, operator.ErrConnectionLost) {
		return true
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.Code {
	case api.CodeInternal, api.CodeTooLarge:
		return true // carried out, its answer not written
	case api.CodeUnavailable:
		// A commit left pending, or leadership lost after the entry was
		// appended: either may still commit (a review).
		return strings.Contains(ae.Message, "may still be carried out") || strings.Contains(ae.Message, "leadership changed during the request")
	}
	return false
}
