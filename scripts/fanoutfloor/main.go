// Command fanoutfloor measures the floor of a watch fan-out on this
// machine: one process writes a frame of the size of a watch event to each
// of N loopback TCP connections (one write per connection, as a node does)
// and another process, its own binary run again, reads them with a
// goroutine per connection (as N Go watchers do). Nothing else happens: no
// HTTP, no JSON, no feed. The latency from the start of each round of
// writes to each frame's arrival is the least a fan-out to N watchers in
// another process can take on the machine at its present load.
//
//	go run ./scripts/fanoutfloor -conns 1000 -rounds 200 -every 100ms
//
// -writers sets how many goroutines share the writes (0: one per
// connection, woken together, as the node's streams are).
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const frameSize = 256 // about a watch event's frame with its chunk framing

func main() {
	conns := flag.Int("conns", 1000, "connections (watchers)")
	rounds := flag.Int("rounds", 200, "frames per connection")
	every := flag.Duration("every", 100*time.Millisecond, "time between rounds")
	writers := flag.Int("writers", 0, "goroutines that write (0: one per connection)")
	reader := flag.String("reader", "", "internal: the address to read from")
	flag.Parse()
	if *reader != "" {
		read(*reader, *conns, *rounds)
		return
	}
	if err := write(*conns, *rounds, *every, *writers); err != nil {
		log.Fatal(err)
	}
}

func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// write runs the writing side: it starts the reader process, accepts its
// connections and writes a round to all of them every interval.
func write(n, rounds int, every time.Duration, writers int) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-reader", ln.Addr().String(), "-conns", strconv.Itoa(n), "-rounds", strconv.Itoa(rounds))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	cs := make([]net.Conn, n)
	for i := range cs {
		if cs[i], err = ln.Accept(); err != nil {
			return err
		}
	}
	lines := bufio.NewScanner(out)
	for lines.Scan() && lines.Text() != "ready" {
	}
	starts := make([]int64, rounds)
	frame := make([]byte, frameSize)
	gen := make([]chan struct{}, rounds) // closed when round r starts
	for r := range gen {
		gen[r] = make(chan struct{})
	}
	var wg sync.WaitGroup
	send := func(c net.Conn, r int) {
		var f [frameSize]byte
		copy(f[:], frame)
		binary.LittleEndian.PutUint64(f[:], uint64(r))
		if _, err := c.Write(f[:]); err != nil {
			log.Fatal(err)
		}
	}
	if writers == 0 {
		// A goroutine per connection, all woken by one close, as the
		// streams of a node are by an event.
		for _, c := range cs {
			go func() {
				for r := 0; r < rounds; r++ {
					<-gen[r]
					send(c, r)
					wg.Done()
				}
			}()
		}
	}
	cpu0 := cpu()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for r := 0; r < rounds; r++ {
		<-tick.C
		wg.Add(n)
		starts[r] = time.Now().UnixNano()
		if writers == 0 {
			close(gen[r])
		} else {
			for w := 0; w < writers; w++ {
				go func() {
					for i := w; i < n; i += writers {
						send(cs[i], r)
						wg.Done()
					}
				}()
			}
		}
		wg.Wait()
	}
	writeCPU := cpu() - cpu0
	var lat []time.Duration
	var readCPU time.Duration
	for lines.Scan() {
		f := strings.Fields(lines.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		if f[0] == "cpu" {
			readCPU = time.Duration(v)
			break
		}
		r, _ := strconv.Atoi(f[0])
		lat = append(lat, time.Duration(v-starts[r]))
	}
	_ = cmd.Wait()
	if len(lat) == 0 {
		return fmt.Errorf("no arrivals")
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration { return lat[int(p*float64(len(lat)-1))] }
	deliveries := n * rounds
	fmt.Printf("conns %d rounds %d writers %d: deliveries %d p50 %.2f ms p99 %.2f ms max %.2f ms; writer CPU %.1f µs/delivery, reader CPU %.1f µs/delivery\n",
		n, rounds, writers, len(lat), ms(q(0.5)), ms(q(0.99)), ms(q(1)),
		float64(writeCPU.Nanoseconds())/1e3/float64(deliveries), float64(readCPU.Nanoseconds())/1e3/float64(deliveries))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// read runs the reading side: a goroutine per connection notes the arrival
// of each frame; once all arrived it prints them and its CPU time.
func read(addr string, n, rounds int) {
	arrivals := make([][]int64, n)
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			ready.Done()
			arrivals[i] = make([]int64, 0, rounds)
			var f [frameSize]byte
			for r := 0; r < rounds; r++ {
				if _, err := io.ReadFull(c, f[:]); err != nil {
					log.Fatal(err)
				}
				arrivals[i] = append(arrivals[i], time.Now().UnixNano())
			}
		}()
	}
	ready.Wait()
	cpu0 := cpu()
	fmt.Println("ready")
	wg.Wait()
	used := cpu() - cpu0
	out := bufio.NewWriter(os.Stdout)
	for _, as := range arrivals {
		for r, at := range as {
			fmt.Fprintf(out, "%d %d\n", r, at)
		}
	}
	fmt.Fprintf(out, "cpu %d\n", used.Nanoseconds())
	out.Flush()
}
