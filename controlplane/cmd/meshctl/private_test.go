package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"mesh/host/writeerr"
)

// TestTokenOutputIsJudgedThroughTheOutputWriter: run writes stdout through a
// writeerr.Writer, and the token's checks of the file stdout is must look through it.
// They did not (a review): a file others may read, holding data already (>>), was
// written to, where it is refused; and a file the shell emptied was not seen.
func TestTokenOutputIsJudgedThroughTheOutputWriter(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens.txt")
	if err := os.WriteFile(p, []byte("earlier\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := privateOutput(&writeerr.Writer{W: f}); !errors.Is(err, errOutputExposed) {
		t.Errorf("a file others may read, holding data, through the output writer: %v, want errOutputExposed", err)
	}
	empty, err := os.Create(filepath.Join(t.TempDir(), "empty.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if !emptyFile(&writeerr.Writer{W: empty}) {
		t.Error("an empty file through the output writer is not seen as one")
	}
}
