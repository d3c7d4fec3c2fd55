// Reads a file with Go's os package: the Go runtime makes its own system calls, never
// through libc, so an LD_PRELOAD library sees none of them.
package main

import (
	"fmt"
	"os"
)

func main() {
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		os.Exit(2)
	}
	var sum uint64
	for _, b := range data {
		sum += uint64(b)
	}
	fmt.Println(sum)
}
