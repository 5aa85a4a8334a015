// Command fencectl is the admin and scripting CLI of fenced.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "fencectl: not implemented yet")
	os.Exit(2)
}
