package main

import (
	"context"
	"errors"
)

// csiServe runs the standalone CSI plugin (`plinth-node csi-serve`). This is
// a placeholder: the CSI work replaces this file.
func csiServe(ctx context.Context, args []string) error {
	return errors.New("csi-serve is not implemented yet")
}
