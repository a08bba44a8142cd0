package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
)

// ErrNoUserJWT means an operator credentials file holds no user JWT; nothing was
// sent to the mesh.
var ErrNoUserJWT = errors.New("holds no user JWT: a .creds file holds the user JWT and its seed, each between its BEGIN and END lines (an nkey seed file alone is not one); nothing was sent")

// credsJWT returns the user JWT of a .creds file's contents, read from path. It
// returns a JWT or nothing: jwt.ParseDecoratedJWT takes the whole file for the JWT
// when it finds no JWT block, and the first block whatever it holds, so for a file
// that holds a seed alone it returns the seed. nats.go then sent the seed in the
// CONNECT's jwt field, where nats-server keeps it with the closed connection and
// shows it to every operator who lists those with their authentication (CONNZ
// auth). The error names the file, never what it holds.
func credsJWT(path string, contents []byte) (string, error) {
	text, err := jwt.ParseDecoratedJWT(contents)
	if err == nil {
		_, err = jwt.DecodeUserClaims(text)
	}
	if err != nil {
		return "", fmt.Errorf("the credentials file %s %w", path, ErrNoUserJWT)
	}
	return text, nil
}

// ErrCredsExpired means the broker refused operator credentials whose JWT has
// expired by this machine's clock: new ones are issued where the operator account
// key is (meshctl operator add).
var ErrCredsExpired = errors.New("these operator credentials have expired")

// credsExpiry is when the user JWT of the .creds file at path expires (zero: never,
// or the file cannot be read as one).
func credsExpiry(path string) time.Time {
	b, err := readSmall(path)
	if err != nil {
		return time.Time{}
	}
	text, err := credsJWT(path, b)
	if err != nil {
		return time.Time{}
	}
	claims, err := jwt.DecodeUserClaims(text)
	if err != nil || claims.Expires == 0 {
		return time.Time{}
	}
	return time.Unix(claims.Expires, 0)
}
