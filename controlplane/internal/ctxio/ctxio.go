// Package ctxio stops a long copy when its context ends: a backup's snapshot and
// files are copied on serve's run group, which a stop cancels.
package ctxio

import (
	"context"
	"io"
)

// Reader returns r, whose reads fail with ctx's error once ctx ends.
func Reader(ctx context.Context, r io.Reader) io.Reader { return reader{ctx: ctx, r: r} }

type reader struct {
	ctx context.Context
	r   io.Reader
}

func (c reader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
