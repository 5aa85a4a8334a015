package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fenced/fenced/client"
)

// Exit codes. Scripts depend on them; see exitCodesHelp and docs/CLI.md.
const (
	exitOK       = 0
	exitErr      = 1
	exitUsage    = 2
	exitRefused  = 3
	exitLockLost = 4
)

// usageError is wrong usage of fencectl: exit code 2.
type usageError struct {
	cmd string
	msg string
}

func (e *usageError) Error() string { return e.msg }

func usageErr(cmd, msg string) error { return &usageError{cmd: cmd, msg: msg} }

// exitError ends fencectl with a given code. An empty msg prints nothing,
// for example when lock passes on the exit code of its command.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// report prints err as one line on stderr and returns the exit code.
func report(e *env, err error) int {
	var ue *usageError
	var xe *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "fencectl: %s\n", ue.msg)
		if ue.cmd != "" {
			fmt.Fprintf(e.stderr, "Run 'fencectl help %s' for usage.\n", ue.cmd)
		} else {
			fmt.Fprintln(e.stderr, "Run 'fencectl help' for usage.")
		}
		return exitUsage
	case errors.As(err, &xe):
		if xe.msg != "" {
			fmt.Fprintf(e.stderr, "fencectl: %s\n", xe.msg)
		}
		return xe.code
	}
	fmt.Fprintf(e.stderr, "fencectl: %s\n", oneLine(err.Error()))
	return exitErr
}

// oneLine keeps an error on one line of stderr, so scripts can log it as such.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// explained is a message for people that still unwraps to the error it
// explains, so errors.Is keeps working without repeating that error's text.
type explained struct {
	msg string
	err error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.err }

func explainedf(err error, format string, args ...any) error {
	return &explained{msg: fmt.Sprintf(format, args...), err: err}
}

// subject names what a request was about, for error messages.
type subject struct {
	key    string
	holder string
	token  string
}

// grant names the grant a request was about; a forced release names no
// token, and is about the key's current grant.
func (s subject) grant() string {
	if s.token == "" {
		return "the last grant of key " + s.key
	}
	return fmt.Sprintf("the grant of key %s with token %s", s.key, s.token)
}

// explain turns an error of the api client into a message an operator can act
// on. The error stays wrapped, so callers can still test it with errors.Is.
func explain(err error, s subject, e *env) error {
	if err == nil {
		return nil
	}
	var ae *client.Error
	errors.As(err, &ae)
	switch {
	case errors.Is(err, client.ErrHeld):
		by, after := "another holder", "1s"
		if ae != nil && ae.HeldBy != "" {
			by = ae.HeldBy
		}
		if ae != nil && ae.RetryAfter != "" {
			after = ae.RetryAfter
		}
		return explainedf(err, "key %s is held by %s; retry after %s", s.key, by, after)
	case errors.Is(err, client.ErrLockDelay):
		after := "a moment"
		if ae != nil && ae.RetryAfter != "" {
			after = ae.RetryAfter
		}
		return explainedf(err, "key %s is in its lock-delay: its last grant expired without a release, and it is kept from new holders for a while; retry after %s", s.key, after)
	case errors.Is(err, client.ErrNotHolder):
		return explainedf(err, "key %s is not held by %s", s.key, s.holder)
	case errors.Is(err, client.ErrStaleToken):
		return explainedf(err, "token %s is not the current grant of key %s (superseded or never granted)", s.token, s.key)
	case errors.Is(err, client.ErrExpired):
		return explainedf(err, "%s has expired", s.grant())
	case errors.Is(err, client.ErrNoLease):
		return explainedf(err, "%s has no live lease (released or expired)", s.grant())
	case errors.Is(err, client.ErrUnknownKey):
		return explainedf(err, "key %s is unknown: it was never granted", s.key)
	case errors.Is(err, client.ErrGrantEnded):
		return explainedf(err, "the grant this request made of key %s has already ended", s.key)
	case errors.Is(err, client.ErrSeqExhausted):
		return explainedf(err, "key %s used every token of the current epoch; the cluster is moving to a new term, retry shortly", s.key)
	case errors.Is(err, client.ErrMalformedToken):
		return explainedf(err, "malformed token %q: %v", s.token, err)
	case errors.Is(err, client.ErrBadRequest) && ae != nil:
		return explainedf(err, "fenced refused the request: %s", ae.Message)
	case errors.Is(err, client.ErrUnknownOutcome):
		return explainedf(err, "outcome unknown: the request may or may not have been applied before --timeout %v ran out; repeating it is safe: %v",
			e.g.timeout, err)
	case errors.Is(err, client.ErrNoConnection):
		return explainedf(err, "no fenced node accepted a connection within --dial-timeout %v (endpoints %s): %v",
			e.g.dialTimeout, strings.Join(e.g.endpoints, ","), err)
	case errors.Is(err, client.ErrUnavailable) && errors.Is(err, context.DeadlineExceeded):
		return explainedf(err, "no fenced node could serve the request within %v (endpoints %s): %v",
			e.g.timeout, strings.Join(e.g.endpoints, ","), err)
	case errors.Is(err, client.ErrUnavailable):
		// Ended before any deadline: the endpoints cannot be used as
		// given (TLS, addresses), or none had what was asked.
		return explainedf(err, "no fenced node could serve the request (endpoints %s): %v",
			strings.Join(e.g.endpoints, ","), err)
	case errors.Is(err, context.DeadlineExceeded):
		return explainedf(err, "timed out after %v: %v", e.g.timeout, err)
	}
	return err
}
