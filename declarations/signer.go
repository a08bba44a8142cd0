package declarations

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Signer signs envelopes with one set of keys. It checks the keys and derives their
// ids once, and encodes each envelope into buffers it reuses: a declaration to a
// whole fleet is signed once per node, and what SignEnvelope repeats for every
// message (the key ids, encoding/json's reflection, the scratch buffers) was most of
// the garbage a fan-out left behind. The bytes it produces are the ones
// SignEnvelope and SignDeclaration always produced. A Signer is safe for use by
// several goroutines at once.
type Signer struct {
	keys []ed25519.PrivateKey // sorted by key id, as the envelope lists signatures
	ids  []string
	// scratch holds the payload and PAE buffers of a signing in progress.
	scratch sync.Pool
}

// NewSigner checks keys as SignEnvelope does (at least one, at most MaxSignatures,
// each an Ed25519 private key, none twice) and returns a Signer for them.
func NewSigner(keys ...ed25519.PrivateKey) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("declarations: cannot sign: no signing key given")
	}
	if len(keys) > MaxSignatures {
		return nil, fmt.Errorf("declarations: cannot sign with %d keys; an envelope carries at most %d signatures", len(keys), MaxSignatures)
	}
	type keyed struct {
		id  string
		key ed25519.PrivateKey
	}
	ks := make([]keyed, 0, len(keys))
	for i, k := range keys {
		if len(k) != ed25519.PrivateKeySize {
			return nil, fmt.Errorf("declarations: cannot sign: signing key %d is %d bytes, want an Ed25519 private key of %d", i, len(k), ed25519.PrivateKeySize)
		}
		id := KeyID(k.Public().(ed25519.PublicKey))
		for _, o := range ks {
			if o.id == id {
				return nil, fmt.Errorf("declarations: cannot sign: key %s given twice", id)
			}
		}
		ks = append(ks, keyed{id, slices.Clone(k)})
	}
	slices.SortFunc(ks, func(a, b keyed) int { return strings.Compare(a.id, b.id) })
	s := &Signer{}
	for _, k := range ks {
		s.keys, s.ids = append(s.keys, k.key), append(s.ids, k.id)
	}
	return s, nil
}

// scratch is the reusable memory of one signing.
type scratch struct{ payload, pae []byte }

// Envelope is SignEnvelope with the Signer's keys.
func (s *Signer) Envelope(payloadType string, payload []byte) ([]byte, error) {
	if reason := checkPayloadType(payloadType); reason != "" {
		return nil, errors.New("declarations: cannot sign: " + reason)
	}
	if payloadType == PayloadTypeBatch {
		// A signature over PAE(PayloadTypeBatch, x) vouches for every leaf under
		// the root x: only SignBatch makes one, over a root it hashed itself.
		return nil, errors.New("declarations: cannot sign: " + PayloadTypeBatch + " is signed by SignBatch only, over a tree it hashed")
	}
	if len(payload) == 0 {
		return nil, errors.New("declarations: cannot sign an empty payload")
	}
	sc := s.get()
	defer s.scratch.Put(sc)
	sc.pae = appendPAE(sc.pae[:0], payloadType, payload)
	return s.encode(payloadType, payload, sc.pae)
}

func (s *Signer) get() *scratch {
	if sc, ok := s.scratch.Get().(*scratch); ok {
		return sc
	}
	return &scratch{}
}

// encode signs msg (the PAE of payloadType and payload) with every key and returns
// the envelope.
func (s *Signer) encode(payloadType string, payload, msg []byte) ([]byte, error) {
	return s.encodeSigned(payloadType, payload, s.signatures(msg), nil)
}

// signatures signs msg with every key, in key id order.
func (s *Signer) signatures(msg []byte) []Signature {
	sigs := make([]Signature, len(s.keys))
	for i, k := range s.keys {
		sigs[i] = Signature{KeyID: s.ids[i], Sig: ed25519.Sign(k, msg)}
	}
	return sigs
}

// encodeSigned returns the envelope of payload with sigs and, for a batch, its
// proof, as encoding/json writes an Envelope: the same field order, standard
// base64, and HTML-safe escapes in the payload type (which only a type that needs
// them would show; it then takes encoding/json's own path).
func (s *Signer) encodeSigned(payloadType string, payload []byte, sigs []Signature, batch *Batch) ([]byte, error) {
	var out []byte
	if !jsonPlain(payloadType) {
		env := Envelope{PayloadType: payloadType, Payload: payload, Signatures: sigs}
		if batch != nil {
			// A copy: batch itself, and the path it points to, stay on the
			// caller's stack (each proof of a fan-out is made there).
			env.Batch = &Batch{Salt: slices.Clone(batch.Salt), Index: batch.Index, Path: slices.Clone(batch.Path)}
		}
		var err error
		if out, err = json.Marshal(env); err != nil {
			return nil, fmt.Errorf("declarations: encoding envelope: %w", err)
		}
	} else {
		const (
			head   = `{"payloadType":"`
			body   = `","payload":"`
			list   = `","signatures":[`
			keyid  = `{"keyid":"`
			sig    = `","sig":"`
			closer = `"}`
			tail   = `]}`
			// The proof: `,"batch":{"salt":"…","index":N,"path":"…"}`.
			salt  = `,"batch":{"salt":"`
			index = `","index":`
			path  = `,"path":"`
			end   = `"}`
		)
		b64 := base64.StdEncoding.EncodedLen
		size := len(head) + len(payloadType) + len(body) + b64(len(payload)) + len(list) + len(tail)
		for _, sg := range sigs {
			size += len(keyid) + len(sg.KeyID) + len(sig) + b64(len(sg.Sig)) + len(closer) + 1
		}
		if batch != nil {
			size += len(salt) + b64(len(batch.Salt)) + len(index) + 20 + len(path) + b64(len(batch.Path)) + len(end)
		}
		out = make([]byte, 0, size)
		out = append(append(append(out, head...), payloadType...), body...)
		out = base64.StdEncoding.AppendEncode(out, payload)
		out = append(out, list...)
		for i, sg := range sigs {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(append(append(out, keyid...), sg.KeyID...), sig...)
			out = base64.StdEncoding.AppendEncode(out, sg.Sig)
			out = append(out, closer...)
		}
		out = append(out, ']')
		if batch != nil {
			out = append(out, salt...)
			out = base64.StdEncoding.AppendEncode(out, batch.Salt)
			out = strconv.AppendUint(append(out, index...), batch.Index, 10)
			out = base64.StdEncoding.AppendEncode(append(out, path...), batch.Path)
			out = append(out, end...)
		}
		out = append(out, '}')
	}
	if len(out) > MaxEnvelopeSize {
		return nil, fmt.Errorf("%w: the signed envelope would be %d bytes, over the limit of %d; declare less per node", ErrTooLarge, len(out), MaxEnvelopeSize)
	}
	return out, nil
}

// jsonPlain reports whether encoding/json writes s between quotes unchanged: printable
// ASCII without the characters it escapes (the quote, the backslash, and <, > and &,
// which it escapes for HTML).
func jsonPlain(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// EncodedBody is a body that passed Validate, with its canonical encoding: the
// bytes SignDeclaration puts in every declaration of this body, encoded once for
// the nodes of a fleet.
type EncodedBody struct {
	encoded []byte
}

// EncodeBody checks b's rules (Validate) and encodes it.
func EncodeBody(b Body) (EncodedBody, error) {
	if err := b.Validate(); err != nil {
		return EncodedBody{}, err
	}
	enc, err := json.Marshal(b.plain())
	if err != nil {
		return EncodedBody{}, fmt.Errorf("declarations: encoding body: %w", err)
	}
	return EncodedBody{encoded: enc}, nil
}

// Len is the size of the body's encoding in bytes: what keeping it costs.
func (b EncodedBody) Len() int { return len(b.encoded) }

// Declaration is SignDeclaration of d with body as its body, which this Signer's
// keys sign: it checks d as SignDeclaration does and produces the same bytes.
// d.Body must be empty; body is the one signed.
func (s *Signer) Declaration(d Declaration, body EncodedBody) ([]byte, error) {
	sc := s.get()
	defer s.scratch.Put(sc)
	p, err := appendDeclaration(sc.payload[:0], d, body)
	if err != nil {
		return nil, err
	}
	sc.payload = p
	sc.pae = appendPAE(sc.pae[:0], PayloadTypeDeclaration, p)
	return s.encode(PayloadTypeDeclaration, p, sc.pae)
}

// AppendDeclarationPayload checks d as Declaration does and appends to dst the
// payload Declaration would sign: what SignBatch takes for each node of a fleet,
// appended one after the other into one buffer.
func AppendDeclarationPayload(dst []byte, d Declaration, body EncodedBody) ([]byte, error) {
	return appendDeclaration(dst, d, body)
}

// appendDeclaration checks d and appends its payload, body as its body, to p.
func appendDeclaration(p []byte, d Declaration, body EncodedBody) ([]byte, error) {
	if err := d.checkHeader(); err != nil {
		return nil, err
	}
	if !jsonPlain(d.Mesh) || !jsonPlain(d.Node) || !jsonPlain(d.NodeKey) {
		// checkHeader admits no such id today; were it ever widened, a quote in an
		// id must not become a field of the signed payload.
		return nil, errors.New("declarations: cannot sign declaration: an id holds a character JSON would escape")
	}
	if d.Body.Files != nil {
		return nil, errors.New("declarations: cannot sign declaration: its body is given twice (in the declaration and encoded)")
	}
	if body.encoded == nil {
		return nil, errors.New("declarations: cannot sign declaration: the body was not encoded (use EncodeBody)")
	}
	// The fields in Declaration's order, as encoding/json writes them: the ids and
	// the key passed the checks above, so none needs an escape; times as
	// time.Time's MarshalJSON (RFC 3339 with nanoseconds, in UTC).
	p = append(p, `{"mesh":"`...)
	p = append(append(p, d.Mesh...), `","node":"`...)
	p = append(append(p, d.Node...), `","node_key":"`...)
	p = append(append(p, d.NodeKey...), `","version":`...)
	p = append(strconv.AppendUint(p, d.Version, 10), `,"keyring_epoch":`...)
	p = append(strconv.AppendUint(p, d.KeyringEpoch, 10), `,"issued_at":"`...)
	var err error
	if p, err = d.IssuedAt.UTC().AppendText(p); err != nil {
		return nil, fmt.Errorf("declarations: encoding declaration: issued_at: %w", err)
	}
	p = append(p, `","expires_at":"`...)
	if p, err = d.ExpiresAt.UTC().AppendText(p); err != nil {
		return nil, fmt.Errorf("declarations: encoding declaration: expires_at: %w", err)
	}
	return append(append(append(p, `","body":`...), body.encoded...), '}'), nil
}
