package ctxio

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReaderStopsWithItsContext: reads pass through until the context ends, then
// fail with its error.
func TestReaderStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := Reader(ctx, strings.NewReader("abcdef"))
	buf := make([]byte, 3)
	if n, err := r.Read(buf); n != 3 || err != nil || string(buf) != "abc" {
		t.Fatalf("read %d %q, %v; want abc", n, buf[:n], err)
	}
	cancel()
	if _, err := io.ReadAll(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("a read after the context ended: %v, want context.Canceled", err)
	}
}
