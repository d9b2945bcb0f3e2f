package volumearchive

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"
)

// Command is the volume copier's name as a nest-syncer subcommand: the
// short-lived host pod that copies a tenant volume for a snapshot runs
// `nest-syncer volume-copy hold`, and the snapshot's writer or restorer
// execs PackCommand or UnpackCommand in it.
const Command = "volume-copy"

// The subcommands of Command.
const (
	// HoldCommand waits, doing nothing, until SIGTERM or --for has passed:
	// the copy pod's main process, so that a pod its maker lost ends by
	// itself.
	HoldCommand = "hold"
	// PackCommand writes the tree under --dir to stdout (Pack) and then
	// its Stats, as one JSON line, to stderr.
	PackCommand = "pack"
	// UnpackCommand writes the stream on stdin into --dir (Unpack), at
	// most --limit bytes of contents, and then its Stats to stderr.
	UnpackCommand = "unpack"
)

// Main runs the subcommand args[0] with its flags, args[1:].
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%s: want a subcommand: %s, %s or %s", Command, HoldCommand, PackCommand, UnpackCommand)
	}
	fs := flag.NewFlagSet(Command+" "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the volume's mount path")
	limit := fs.Int64("limit", 0, "unpack: the most bytes of file contents to write")
	holdFor := fs.Duration("for", time.Hour, "hold: how long to wait at most")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case HoldCommand:
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		select {
		case <-ctx.Done():
		case <-time.After(*holdFor):
		}
		return nil
	case PackCommand, UnpackCommand:
	default:
		return fmt.Errorf("%s: unknown subcommand %q: want %s, %s or %s", Command, args[0], HoldCommand, PackCommand, UnpackCommand)
	}
	if *dir == "" {
		return errors.New("--dir is required")
	}
	var st Stats
	var err error
	if args[0] == PackCommand {
		st, err = Pack(*dir, stdout)
	} else {
		if *limit <= 0 {
			return errors.New("--limit is required: the most bytes of file contents to write")
		}
		st, err = Unpack(*dir, stdin, *limit)
	}
	if err != nil {
		return err
	}
	return json.NewEncoder(stderr).Encode(st)
}
