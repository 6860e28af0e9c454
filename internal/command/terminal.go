package command

import (
	"io"
	"os"
)

// IsTerminal reports whether w is a terminal, where progress is drawn in place.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
