package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/pflag"
)

// progressEvery is how often a long wait says it is still waiting.
const progressEvery = 5 * time.Second

// progressMode is --progress of the commands that may wait long (status
// --wait, snapshot save and restore): unset, lines go to stderr when it is a
// terminal; set, as given.
type progressMode struct{ set, on bool }

func (p *progressMode) String() string { return strconv.FormatBool(p.on) }

func (p *progressMode) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	p.set, p.on = true, on
	return nil
}

func (p *progressMode) Type() string { return "bool" }

// progressFlag registers --progress, a flag with no value as a bool is.
func progressFlag(fs *pflag.FlagSet, p *progressMode) {
	fs.Var(p, "progress", fmt.Sprintf("say on stderr every %v that fencectl is still waiting (default: when stderr is a terminal; never with -o json)", progressEvery))
	fs.Lookup("progress").NoOptDefVal = "true"
}

// progressWanted reports whether a long wait reports its progress: as
// --progress says, or else when stderr is a terminal; never with -o json,
// whose readers take stderr for errors alone (lock writes its report there).
func (e *env) progressWanted(p progressMode) bool {
	switch {
	case e.jsonOutput():
		return false
	case p.set:
		return p.on
	}
	return e.stderrTerminal != nil && e.stderrTerminal()
}

// startProgress prints "fencectl: " and what the wait is, given how long it
// has lasted, on stderr every progressEvery, until stop, which returns once
// no more line can be printed. With on false it prints nothing.
func (e *env) startProgress(on bool, what func(waited time.Duration) string) (stop func()) {
	if !on {
		return func() {}
	}
	newTicker := e.ticker
	if newTicker == nil {
		newTicker = func(d time.Duration) (<-chan time.Time, func()) {
			t := time.NewTicker(d)
			return t.C, t.Stop
		}
	}
	tick, stopTicker := newTicker(progressEvery)
	start := time.Now()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-tick:
				fmt.Fprintf(e.stderr, "fencectl: %s\n", what(time.Since(start).Round(time.Second)))
			}
		}
	}()
	return func() {
		close(quit)
		<-done
		stopTicker()
	}
}
