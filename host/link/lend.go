package link

import (
	"errors"
	"sync"
)

// ErrLoanEnded is what a Lent key signs with once its loan ended: the attempt that
// asks (a login at another broker, late) signs nothing, so sends no login.
var ErrLoanEnded = errors.New("another broker took the login first")

// Lent lends a signing function to attempts that run at once (an enrolment's or a
// join's logins at the token's brokers) until End: the caller may wipe the key
// then, and an attempt still under way must neither use it meanwhile nor log in
// once one attempt has the connection.
type Lent struct {
	mu   sync.Mutex
	sign func([]byte) ([]byte, error)
}

// Lend lends sign until End.
func Lend(sign func([]byte) ([]byte, error)) *Lent { return &Lent{sign: sign} }

// Sign signs input with the lent key, or fails with ErrLoanEnded once the loan
// ended.
func (l *Lent) Sign(input []byte) ([]byte, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sign == nil {
		return nil, ErrLoanEnded
	}
	return l.sign(input)
}

// End takes the key back, once any signature under way is made.
func (l *Lent) End() {
	l.mu.Lock()
	l.sign = nil
	l.mu.Unlock()
}
