package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"github.com/nats-io/nats-server/v2/server"

	"mesh/logging"
)

// logComponent names nats-server's lines in the log.
const logComponent = "broker"

// natsLog is nats-server's Logger over slog: each line is one record at its own level
// (notices are info), with the component. Warnings and errors that repeat are logged
// once an interval with a count (kindOf), so a route to an absent peer ("Error trying
// to connect to route (attempt %v): %v") is one line every ten seconds however its
// attempt number changes. What one client did (a permissions violation, a refused
// CONNECT: clientEvent) is logged a few times an interval per kind of event and of
// client, with a count, however many subjects or names the client tries.
type natsLog struct {
	log *slog.Logger
	// debug is whether log is at debug: nats-server is then asked for its debug
	// lines, and its trace lines, should any come, are logged at debug.
	debug   bool
	repeats *logging.Limiter
	// violations counts every client event (clientEvent), logged or held back.
	violations eventCounts
	// fatal is nats-server's first fatal line: why it could not start (startFailure).
	fatal atomic.Pointer[string]
}

func newNATSLog(log *slog.Logger, repeats *logging.Limiter) *natsLog {
	return &natsLog{
		log:     log.With(slog.String("component", logComponent)),
		debug:   log.Enabled(context.Background(), slog.LevelDebug),
		repeats: repeats,
	}
}

func (l *natsLog) Noticef(format string, v ...any) { l.emit(slog.LevelInfo, format, v) }
func (l *natsLog) Warnf(format string, v ...any) {
	level := slog.LevelWarn
	if slices.Contains(byDesign, format) {
		level = slog.LevelInfo
	}
	l.emit(level, format, v)
}
func (l *natsLog) Errorf(format string, v ...any) {
	level := slog.LevelError
	if format == routeDialFormat || peerHungUp(format, v) {
		level = slog.LevelWarn
	}
	l.emit(level, format, v)
}

// flushFormat ends nats-server's line for a write to a route (or another
// non-client connection) that failed, prefixed with the connection's name.
const flushFormat = "Error flushing: %v"

// peerHungUp reports whether format and v are nats-server's line for a write that
// failed because the peer closed the connection first (broken pipe, reset): a
// route closed as a control node joins (two routes between the same nodes, one
// closed), is removed or restarts, an ordinary day (a walkthrough met it at every
// join). Other write errors stay errors.
func peerHungUp(format string, v []any) bool {
	if !strings.HasSuffix(format, flushFormat) || len(v) == 0 {
		return false
	}
	err, ok := v[len(v)-1].(error)
	return ok && (errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET))
}

// routeDialFormat is nats-server's line for a route to another control node it
// could not dial. Every rolling restart, and every join before the new node's serve
// runs, made the other nodes log it as an error (a newcomer's walkthrough: nine in a
// short session), paging whoever alerts on errors for what is an ordinary day; a
// control node that stays down is named by `meshctl control status` (exit 5) and by
// the leader's warning of a silent voter. It is a warning, once an interval.
const routeDialFormat = "Error trying to connect to route (attempt %v): %v"

func (l *natsLog) Debugf(format string, v ...any) { l.emit(slog.LevelDebug, format, v) }

// Fatalf is an error marked fatal: nats-server's own logger would exit the process,
// but the broker is embedded and the control node decides what a failure stops. It is
// never held back.
func (l *natsLog) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.fatal.CompareAndSwap(nil, &msg)
	l.log.LogAttrs(context.Background(), slog.LevelError, msg, slog.Bool("fatal", true))
}

// byDesign are the warnings nats-server gives at every start of this broker about
// what this product chose: they are info here, so that a healthy start logs no
// warning and an alert on WARN is kept for what goes wrong. Every port speaks TLS
// first (TestEveryPortSpeaksTLS13First): a client that does not is refused, as meant.
// TestByDesignWarningsAreInfo checks each against the source of the nats-server this
// module builds with, so that a release that rewords one fails there rather than
// warning again unnoticed; daemon's TestAHealthyStartLogsNoWarning starts a node.
var byDesign = []string{
	`Clients that are not using "TLS Handshake First" option will fail to connect`,
}

// sysImportFormat is the line nats-server logs when setting up an account's imports
// of the system account's services fails. It checks that an import is missing and
// adds it in two steps, so two goroutines registering one account (a route coming up
// as the account's first client connects, after a restart) both find it missing, and
// the second is refused as a duplicate of the first's: the import it wanted is
// there. That case is an info line here (the daemon's rolling-restart soak met it
// twice in 289 restarts); any other failure stays an error.
const sysImportFormat = "Error setting up system service import %s -> %s for account: %v"

// sameSysImport reports whether a sysImportFormat line says the import it set out to
// add exists already, the same subject mapped to the same subject. nats-server gives
// no typed error for it, so its text is read; TestASystemImportThereAlreadyIsInfo
// checks that text against nats-server's source.
func sameSysImport(format string, v []any) bool {
	if format != sysImportFormat || len(v) != 3 {
		return false
	}
	mapped, ok := v[1].(string)
	err, isErr := v[2].(error)
	if !ok || !isErr {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "duplicate service import subject ") && strings.HasSuffix(msg, fmt.Sprintf("subject %q", mapped))
}

// startFailure is nats-server's first fatal line, or "": it reports so only what
// stops it starting (a listener it could not open).
func (l *natsLog) startFailure() string {
	if p := l.fatal.Load(); p != nil {
		return *p
	}
	return ""
}

func (l *natsLog) Tracef(format string, v ...any) {
	if l.debug {
		l.emit(slog.LevelDebug, format, v, slog.Bool("trace", true))
	}
}

func (l *natsLog) emit(level slog.Level, format string, v []any, attrs ...slog.Attr) {
	ctx := context.Background()
	if level == slog.LevelError && sameSysImport(format, v) {
		level = slog.LevelInfo
	}
	if level >= slog.LevelWarn {
		if e, ok := clientEventOf(format, v); ok {
			// What a client did is a warning, whatever level nats-server gives it:
			// nothing failed here, the event is counted, and a scanner or a
			// compromised host must not raise the control node's errors.
			level = slog.LevelWarn
			if e.what != server.ErrAuthentication.Error() {
				// Authentication errors are the hook's refusals, counted there by reason.
				l.violations.add(e.what + "\x00" + e.conn.account)
			}
			if l.log.Enabled(ctx, level) {
				l.repeats.LogFirst(ctx, l.log, level, clientEventsPerInterval, logComponent, e.kind(), e.what, append(e.attrs(), attrs...)...)
			}
			return
		}
	}
	if !l.log.Enabled(ctx, level) {
		return
	}
	msg := fmt.Sprintf(format, v...)
	if level < slog.LevelWarn {
		// Through the limiter too, a few an interval: a stranger's connection to the
		// route port that fails its handshake is a notice ("Router connection
		// closed: TLS Handshake Failure"), and 20 such connections at a time logged
		// 26,000 lines in 10 s in an audit. A healthy broker's notices are a few of
		// each kind.
		l.repeats.LogFirst(ctx, l.log, level, noticesPerInterval, logComponent, kindOf(msg), msg, attrs...)
		return
	}
	if level > slog.LevelWarn && strings.Contains(msg, handshakeFailed) {
		// Whoever reaches a port can fail a handshake there: a stranger, not
		// something that failed on the control node (the Raft port's refusals
		// are warnings too). A control node whose route is refused shows it.
		level = slog.LevelWarn
	}
	l.repeats.Log(ctx, l.log, level, logComponent, kindOf(msg), msg, attrs...)
}

// noticesPerInterval is how many notices of one kind are logged an interval.
const noticesPerInterval = 20

// handshakeFailed is what nats-server's lines about a failed TLS handshake say
// ("TLS handshake error: …", "TLS route handshake error: …"), followed by the
// error and the subject of the certificate the peer presented, which it chose.
// TestMatchedTextsAreNATSServers checks nats-server's source still logs it.
const handshakeFailed = " handshake error: "

// kindOf is the kind of line the limiter counts repeats of: the line with what a
// client chose and its numbers folded (a failed handshake's, without the error and the
// certificate the peer presented). The format string alone is no kind here:
// nats-server bakes a connection into the format before it formats ("10.0.0.2:6222 -
// rid:17 - TLS route handshake error: %v") and passes some lines whole ("%s"). What
// changes from one retry to the next (attempt counts, ports, addresses, connection
// ids) is numbers; what a client chose (its name, a subject, the bytes it sent that
// nats-server could not parse) nats-server quotes, and a client that could make a
// kind of every line would have every line logged. The lines that say what one client
// did are clientEvents, and never reach here.
//
// Load signals (loadSignals) are about one connection each, but a storm gives them
// for many connections at once, and they are one kind whatever the connection.
func kindOf(msg string) string {
	msg = foldBracketedAddrs(foldQuoted(msg))
	if i := strings.Index(msg, handshakeFailed); i >= 0 {
		// What follows is the peer's to choose (a certificate's subject).
		return foldDigits(msg[:i+len(handshakeFailed)])
	}
	for _, sig := range loadSignals {
		if i := strings.Index(msg, sig); i >= 0 {
			return foldDigits(msg[i:])
		}
	}
	return foldDigits(msg)
}

// loadSignals are nats-server's warnings about one connection that say the broker is
// loaded rather than what the client did. 10,000 hosts reconnecting to a restarted
// control node made it log a readloop stall for each of 700–2,400 of them, one line
// each; as one kind they are a line every interval, with the count of the others.
// (A slow consumer is a notice in nats-server 2.15, not a warning; its kind is folded
// all the same.) TestMatchedTextsAreNATSServers checks nats-server's source still logs
// each.
var loadSignals = []string{" - Readloop processing time: ", " - Slow Consumer Detected"}

// foldDigits replaces each run of digits by one '#'.
func foldDigits(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	digits := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= '0' && c <= '9' {
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		}
		digits = false
		b.WriteByte(c)
	}
	return b.String()
}

// foldBracketedAddrs replaces each IP address between brackets (an IPv6 address as
// nats-server and Go's errors write it, "[2001:db8::a]:4222") by "#": its hex digits
// would otherwise survive foldDigits, and every source address of a /64 be a kind of
// its own, 1,024 kinds a stranger's failed handshakes could fill the limiter with.
func foldBracketedAddrs(s string) string {
	if !strings.Contains(s, "[") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for {
		i := strings.IndexByte(s, '[')
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			b.WriteString(s)
			return b.String()
		}
		if _, err := netip.ParseAddr(s[i+1 : i+j]); err == nil {
			b.WriteString(s[:i] + "[#]")
		} else {
			b.WriteString(s[:i+j+1])
		}
		s = s[i+j+1:]
	}
}

// foldQuoted replaces each double-quoted string (as %q writes it, escapes included) by
// "…". A quote left open folds the rest of the line.
func foldQuoted(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			b.WriteByte(s[i])
			continue
		}
		b.WriteString(`"…"`)
		i = closingQuote(s, i+1)
	}
	return b.String()
}

// closingQuote returns the index of the quote that closes a string begun before i, or
// len(s) if none does.
func closingQuote(s string, i int) int {
	for ; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return len(s)
}

// clientEventsPerInterval is how many lines of one kind of client event are logged an
// interval: the first few say which subjects or names were tried, and however many
// events a client makes, the log has that many lines and a count.
const clientEventsPerInterval = 5

// maxClientText bounds what a line repeats of what a client chose (a subject, a name,
// a user): a subject may run to kilobytes, and the line says what happened, it does
// not keep a copy.
const maxClientText = 128

// clientEvent is a line nats-server logs about what one client did: a permissions
// violation, a refused CONNECT, an error the client sent. A client can make it again
// at will with text of its choosing in it (a client that may publish on one subject
// can try 5,000 others in a second), so the line is logged as what happened, with
// what the client chose as attributes, cut short; and its kind is what happened, in
// which account, to what kind of user (kind), never what the client chose, nor its
// connection, which a client can change by connecting again.
type clientEvent struct {
	what   string // nats-server's words for it: the message
	conn   connection
	detail []slog.Attr // what the client chose: subject, reply, queue, user, error
}

// connection is what nats-server says of a client's connection: its address and id,
// the name the client gave itself, the account it was placed in (the account's name
// tag) and the user it authenticated as ("nkey:U…", "jwt:U…", "user:…", "token").
type connection struct{ addr, name, account, user string }

// kind is the event's kind for the limiter: what happened, in which account (hosts and
// enrolling clients, operators, the control plane), to which kind of user.
func (e clientEvent) kind() string {
	return e.what + " in " + e.conn.account + " by " + userKind(e.conn.user)
}

// attrs are the line's attributes: who the client is, then what it chose.
func (e clientEvent) attrs() []slog.Attr {
	a := []slog.Attr{slog.String("client", clip(e.conn.addr))}
	if e.conn.name != "" {
		a = append(a, slog.String("name", clip(e.conn.name)))
	}
	if e.conn.account != "" {
		a = append(a, slog.String("account", e.conn.account), slog.String("user", clip(e.conn.user)))
	}
	return append(a, e.detail...)
}

// clientEventOf recognises a client event by the format nats-server logs it with.
func clientEventOf(format string, v []any) (clientEvent, bool) {
	for _, of := range []func(string, []any) (clientEvent, bool){argEvent, subscriptionViolation, authError} {
		if e, ok := of(format, v); ok {
			return e, true
		}
	}
	return clientEvent{}, false
}

func event(what, conn string, detail ...slog.Attr) clientEvent {
	return clientEvent{what: what, conn: parseConnection(conn), detail: detail}
}

// argEvents are the client events whose format ends in what the client chose, passed
// as the one argument.
var argEvents = []struct{ format, what, key string }{
	{"Publish Violation - Subject %q", "Publish Violation - Subject", "subject"},
	{"Publish Violation - Reply %q", "Publish Violation - Reply", "reply"},
	{"Client Error %s", "Client Error", "error"},
}

func argEvent(format string, v []any) (clientEvent, bool) {
	if len(v) != 1 {
		return clientEvent{}, false
	}
	for _, a := range argEvents {
		if conn, ok := cutEvent(format, a.format); ok {
			return event(a.what, conn, slog.String(a.key, clip(fmt.Sprintf("%s", v[0])))), true
		}
	}
	return clientEvent{}, false
}

// subscriptionViolations are the violations nats-server formats before it logs them:
// the format is the whole line, subject included (`Subscription Violation - Subject
// "x", SID 1`, or with `, Queue: "q"` before the SID).
var subscriptionViolations = []string{"Subscription Violation - Subject ", "Subscription Violation Too Many Tokens - Subject "}

func subscriptionViolation(format string, v []any) (clientEvent, bool) {
	if len(v) != 0 {
		return clientEvent{}, false
	}
	for _, words := range subscriptionViolations {
		// The last: a client's name, before it, may say anything.
		i := strings.LastIndex(format, words)
		if i < 0 {
			continue
		}
		conn, ok := cutEvent(format[:i+len(words)], words)
		detail, parsed := subscriptionDetail(format[i+len(words):])
		if ok && parsed {
			return event(strings.TrimSpace(words), conn, detail...), true
		}
	}
	return clientEvent{}, false
}

// subscriptionDetail reads the subject and queue of a subscription violation.
func subscriptionDetail(s string) ([]slog.Attr, bool) {
	subject, s, ok := cutQuoted(s)
	if !ok {
		return nil, false
	}
	detail := []slog.Attr{slog.String("subject", clip(subject))}
	if q, queued := strings.CutPrefix(s, ", Queue: "); queued {
		var queue string
		if queue, s, ok = cutQuoted(q); !ok {
			return nil, false
		}
		detail = append(detail, slog.String("queue", clip(queue)))
	}
	return detail, strings.HasPrefix(s, ", SID ")
}

// authError is nats-server's line for a CONNECT it refused: the error and the user the
// client presented, or the error alone.
func authError(format string, v []any) (clientEvent, bool) {
	what := server.ErrAuthentication.Error()
	if len(v) == 0 {
		conn, ok := cutEvent(format, what)
		return event(what, conn), ok
	}
	if err, isErr := v[0].(error); len(v) == 2 && isErr && errors.Is(err, server.ErrAuthentication) {
		conn, ok := cutEvent(format, "%v - %s")
		return event(what, conn, slog.String("user", clip(fmt.Sprint(v[1])))), ok
	}
	return clientEvent{}, false
}

// cutEvent returns the connection nats-server put before words, if format is words
// about a connection (or words alone).
func cutEvent(format, words string) (conn string, ok bool) {
	if format == words {
		return "", true
	}
	return strings.CutSuffix(format, " - "+words)
}

// parseConnection reads nats-server's name of a connection: `addr - cid:N`, then the
// client's name and the account and user, each quoted (` - "v1.55.0:go:name" -
// "ACC…/HOSTS/nkey:U…"`), either of them absent. A client's name cannot end the
// quotes early (they are %q's), and it cannot name an account that is not one of
// the broker's.
func parseConnection(conn string) connection {
	const sep = ` - "`
	i := strings.Index(conn, sep)
	if i < 0 {
		return connection{addr: conn}
	}
	c := connection{addr: conn[:i]}
	var quoted []string
	for rest := conn[i:]; strings.HasPrefix(rest, sep); {
		s, r, ok := cutQuoted(rest[len(sep)-1:])
		if !ok {
			break
		}
		quoted, rest = append(quoted, s), r
	}
	if n := len(quoted); n > 0 {
		if account, user, ok := accountUser(quoted[n-1]); ok {
			c.account, c.user, quoted = account, user, quoted[:n-1]
		}
	}
	if len(quoted) > 0 {
		c.name = quoted[0]
	}
	return c
}

// accountUser reads nats-server's "account/user" label: the account's public key and
// its name tag, then the user.
func accountUser(label string) (account, user string, ok bool) {
	parts := strings.SplitN(label, "/", 3)
	if len(parts) != 3 || !slices.Contains(accountNames[AccountNone+1:], parts[1]) {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// userKind is how a connection authenticated, from nats-server's label of its user: an
// nkey (hosts and enrolling clients), a JWT (operators), a user name, or the control
// plane's token; never the key or the name.
func userKind(label string) string {
	if label == "token" {
		return label
	}
	kind, _, _ := strings.Cut(label, ":")
	switch kind {
	case "nkey", "jwt", "user":
		return kind
	}
	return ""
}

// cutQuoted unquotes the Go-quoted string s begins with and returns what follows it.
func cutQuoted(s string) (text, rest string, ok bool) {
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", false
	}
	text, err = strconv.Unquote(q)
	return text, s[len(q):], err == nil
}

// clip cuts s to maxClientText bytes, on a character boundary, marking the cut.
func clip(s string) string {
	if len(s) <= maxClientText {
		return s
	}
	cut := maxClientText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
