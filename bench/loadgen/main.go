// sievemq-loadgen: an AMQP 0-9-1 load generator for stream queues, written for SieveMQ's
// benchmarks (bench/vs_rabbitmq.py, bench/filter_*.py, bench/classic_work_queue.py).
//
// It drives any broker through the real amqp091-go client. Modes:
//
//	publish  publisher confirms with at most -window messages unconfirmed
//	consume  basic.qos(-prefetch), manual acks (multiple) every -ack-every messages
//	both     a consumer attached first, then a paced publisher; end-to-end latency
//
// One JSON line goes to stdout (see README in this folder for the fields); on an error the
// line carries "error" and the exit status is 1.
//
// Speed: amqp091-go flushes its socket once per frame (three writes per small message).
// The connection is wrapped in batchConn, which gathers whatever is written while the
// previous write(2) is still running into the next one, so the client is not what limits
// a run (-batch=false gives the plain client). GOMAXPROCS defaults to 1 (-procs), leaving
// the other core of a small machine to the broker.
//
// Built offline from Debian's golang-go and golang-github-rabbitmq-amqp091-go-dev by
// bench/loadgen/build.sh.
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ---------------------------------------------------------------- options

type options struct {
	host, uri, mode, queue, offset, filter, matchUnfiltered, exchange        string
	port, size, window, prefetch, ackEvery, filterValues, procs, sampleEvery int
	n, m                                                                     int64
	rate                                                                     float64
	idle, startTimeout                                                       time.Duration
	keep, noDeclare, uniqueProps, persistent, batch                          bool
}

func parseOptions() options {
	var o options
	flag.StringVar(&o.host, "host", envOr("AMQP_HOST", "127.0.0.1"), "broker host")
	flag.IntVar(&o.port, "port", envInt("AMQP_PORT", 5672), "broker port")
	flag.StringVar(&o.uri, "uri", os.Getenv("AMQP_URL"), "amqp:// URL (overrides -host/-port)")
	flag.StringVar(&o.mode, "mode", "publish", "publish | consume | both")
	flag.StringVar(&o.queue, "queue", "", "stream name (default: a fresh one)")
	flag.Int64Var(&o.n, "n", 100000, "messages to publish")
	flag.Int64Var(&o.m, "m", 0, "messages to consume (default: -n)")
	flag.IntVar(&o.size, "size", 100, "body bytes (at least 16: send time and sequence)")
	flag.IntVar(&o.window, "window", 1000, "unconfirmed messages at most")
	flag.IntVar(&o.sampleEvery, "sample-every", 16, "publish: time the confirm of one message in N (1: every one)")
	flag.Float64Var(&o.rate, "rate", 0, "messages a second (0: as fast as confirms allow)")
	flag.IntVar(&o.prefetch, "prefetch", 1000, "basic.qos prefetch count")
	flag.IntVar(&o.ackEvery, "ack-every", 0, "ack (multiple) every N deliveries (default prefetch/2)")
	flag.StringVar(&o.offset, "offset", "first", "x-stream-offset: first|last|next|<n>|ts:<unix>; empty: none")
	flag.StringVar(&o.filter, "filter", "", "x-stream-filter: one value or v1,v2,...")
	flag.StringVar(&o.matchUnfiltered, "match-unfiltered", "", "x-stream-match-unfiltered: true|false")
	flag.IntVar(&o.filterValues, "filter-values", 0, "publish x-stream-filter-value v0..v{K-1} in turn")
	flag.BoolVar(&o.uniqueProps, "unique-props", false, "own message-id, timestamp, content-type and seq header per message")
	flag.BoolVar(&o.persistent, "persistent", false, "delivery-mode 2")
	flag.BoolVar(&o.keep, "keep", false, "do not delete the stream at the end")
	flag.BoolVar(&o.noDeclare, "no-declare", false, "do not declare the stream")
	flag.StringVar(&o.exchange, "exchange", "", "publish to this exchange (routing key: -queue) instead of the default one")
	flag.DurationVar(&o.idle, "idle", 5*time.Second, "consume: stop this long after the last delivery")
	flag.DurationVar(&o.startTimeout, "start-timeout", 30*time.Second, "consume: stop if nothing arrives")
	flag.IntVar(&o.procs, "procs", 1, "GOMAXPROCS")
	flag.BoolVar(&o.batch, "batch", true, "gather socket writes (see the package comment)")
	flag.Parse()
	if o.m == 0 {
		o.m = o.n
	}
	if o.ackEvery <= 0 {
		o.ackEvery = o.prefetch / 2
		if o.ackEvery < 1 {
			o.ackEvery = 1
		}
	}
	if o.sampleEvery < 1 {
		o.sampleEvery = 1
	}
	if o.size < 16 {
		o.size = 16
	}
	if o.queue == "" {
		o.queue = fmt.Sprintf("loadgen-%d", time.Now().UnixNano())
	}
	return o
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func envInt(name string, fallback int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return fallback
}

// ---------------------------------------------------------------- batching connection

// batchConn queues writes and lets one goroutine send them: a write that arrives while the
// previous one is on the wire joins the next. Writes never reorder; a writer blocks only
// when more than batchLimit bytes wait.
type batchConn struct {
	net.Conn
	mu      sync.Mutex
	ready   *sync.Cond
	queued  []byte
	spare   []byte
	err     error
	closing bool
}

const batchLimit = 4 << 20

func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c}
	b.ready = sync.NewCond(&b.mu)
	go b.sender()
	return b
}

func (b *batchConn) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.queued) > batchLimit && b.err == nil {
		b.ready.Wait()
	}
	if b.err != nil {
		return 0, b.err
	}
	b.queued = append(b.queued, p...)
	b.ready.Broadcast()
	return len(p), nil
}

func (b *batchConn) sender() {
	b.mu.Lock()
	for {
		for len(b.queued) == 0 && !b.closing && b.err == nil {
			b.ready.Wait()
		}
		if b.err != nil || (b.closing && len(b.queued) == 0) {
			b.mu.Unlock()
			return
		}
		out := b.queued
		b.queued = b.spare[:0]
		b.mu.Unlock()
		_, err := b.Conn.Write(out)
		b.mu.Lock()
		b.spare = out
		if err != nil {
			b.err = err
		}
		b.ready.Broadcast()
	}
}

func (b *batchConn) Close() error {
	b.mu.Lock()
	b.closing = true
	b.ready.Broadcast()
	b.mu.Unlock()
	return b.Conn.Close()
}

func dial(o options) (*amqp.Connection, error) {
	url := o.uri
	if url == "" {
		url = fmt.Sprintf("amqp://guest:guest@%s:%d/", o.host, o.port)
	}
	cfg := amqp.Config{Heartbeat: 60 * time.Second, Locale: "en_US"}
	if o.batch {
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			c, err := net.DialTimeout(network, addr, 30*time.Second)
			if err != nil {
				return nil, err
			}
			return newBatchConn(c), nil
		}
	}
	return amqp.DialConfig(url, cfg)
}

// ---------------------------------------------------------------- results

type result map[string]interface{}

func percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func round(v float64, digits int) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', digits, 64), 64)
	return f
}

// ---------------------------------------------------------------- publishing

type publishStats struct {
	published int64
	seconds   float64
	confirmUs []float64
}

func publish(conn *amqp.Connection, o options, count int64, rate float64) (publishStats, error) {
	var st publishStats
	ch, err := conn.Channel()
	if err != nil {
		return st, err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return st, err
	}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, o.window+16))
	slots := make(chan struct{}, o.window)
	var sampled sync.Map // delivery tag -> send time, one message in -sample-every
	var nacked int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		var seen int64
		for c := range confirms {
			if !c.Ack {
				atomic.AddInt64(&nacked, 1)
			}
			if t, ok := sampled.LoadAndDelete(c.DeliveryTag); ok {
				st.confirmUs = append(st.confirmUs, float64(time.Since(t.(time.Time)).Microseconds()))
			}
			<-slots
			seen++
			if seen == count {
				return
			}
		}
	}()
	body := make([]byte, o.size)
	msg := amqp.Publishing{Body: body}
	if o.persistent {
		msg.DeliveryMode = amqp.Persistent
	}
	start := time.Now()
	var tag uint64
	for i := int64(0); i < count; i++ {
		if rate > 0 {
			// bursts of about a millisecond: sleep until message i is due
			due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
			if wait := time.Until(due); wait > time.Millisecond {
				time.Sleep(wait)
			}
		}
		slots <- struct{}{}
		now := time.Now()
		binary.BigEndian.PutUint64(body[0:8], uint64(now.UnixNano()))
		binary.BigEndian.PutUint64(body[8:16], uint64(i))
		if o.uniqueProps {
			msg.MessageId = strconv.FormatInt(i, 10) + "-" + strconv.FormatInt(now.UnixNano(), 36)
			msg.Timestamp = now
			msg.ContentType = "application/octet-stream"
			msg.Headers = amqp.Table{"seq": i}
		}
		if o.filterValues > 0 {
			if msg.Headers == nil || !o.uniqueProps {
				msg.Headers = amqp.Table{}
			}
			msg.Headers["x-stream-filter-value"] = "v" + strconv.Itoa(int(i%int64(o.filterValues)))
		}
		tag++
		if tag%uint64(o.sampleEvery) == 1%uint64(o.sampleEvery) {
			sampled.Store(tag, now)
		}
		if err := ch.Publish(o.exchange, o.queue, false, false, msg); err != nil {
			return st, err
		}
	}
	select {
	case <-done:
	case <-time.After(120 * time.Second):
		return st, errors.New("confirms did not all arrive within 120 s")
	}
	st.seconds = time.Since(start).Seconds()
	st.published = count
	if n := atomic.LoadInt64(&nacked); n > 0 {
		return st, fmt.Errorf("%d messages were nacked", n)
	}
	return st, nil
}

// ---------------------------------------------------------------- consuming

type consumeStats struct {
	consumed, bytes, matched, unmatched, noHeader int64
	seconds, firstMs                              float64
	stopReason                                    string
	latencyUs                                     []float64
}

func consumeArgs(o options) (amqp.Table, error) {
	args := amqp.Table{}
	switch {
	case o.offset == "":
	case o.offset == "first" || o.offset == "last" || o.offset == "next":
		args["x-stream-offset"] = o.offset
	case strings.HasPrefix(o.offset, "ts:"):
		secs, err := strconv.ParseInt(o.offset[3:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad -offset %q", o.offset)
		}
		args["x-stream-offset"] = time.Unix(secs, 0)
	default:
		n, err := strconv.ParseInt(o.offset, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bad -offset %q", o.offset)
		}
		args["x-stream-offset"] = n
	}
	if o.filter != "" {
		values := strings.Split(o.filter, ",")
		if len(values) == 1 {
			args["x-stream-filter"] = values[0]
		} else {
			list := make([]interface{}, len(values))
			for i, v := range values {
				list[i] = v
			}
			args["x-stream-filter"] = list
		}
	}
	if o.matchUnfiltered != "" {
		args["x-stream-match-unfiltered"] = o.matchUnfiltered == "true"
	}
	return args, nil
}

// consume reads until o.m deliveries, -idle after the last one, or -start-timeout before
// the first; “ready“ is closed once consume-ok has arrived (the "both" mode waits on it).
func consume(conn *amqp.Connection, o options, ready chan<- struct{}, latency bool) (consumeStats, error) {
	var st consumeStats
	ch, err := conn.Channel()
	if err != nil {
		return st, err
	}
	defer ch.Close()
	if err := ch.Qos(o.prefetch, 0, false); err != nil {
		return st, err
	}
	args, err := consumeArgs(o)
	if err != nil {
		return st, err
	}
	deliveries, err := ch.Consume(o.queue, "", false, false, false, false, args)
	if err != nil {
		return st, err
	}
	start := time.Now()
	if ready != nil {
		close(ready)
	}
	last := start
	filterSet := map[string]bool{}
	for _, v := range strings.Split(o.filter, ",") {
		if v != "" {
			filterSet[v] = true
		}
	}
	var unacked int
	timer := time.NewTimer(o.startTimeout)
	defer timer.Stop()
	for st.consumed < o.m {
		select {
		case d, ok := <-deliveries:
			if !ok {
				st.stopReason = "channel closed"
				return st, errors.New("the broker closed the consumer's channel")
			}
			now := time.Now()
			if st.consumed == 0 {
				st.firstMs = float64(now.Sub(start).Microseconds()) / 1000
			}
			last = now
			st.consumed++
			st.bytes += int64(len(d.Body))
			if latency && len(d.Body) >= 8 {
				sent := int64(binary.BigEndian.Uint64(d.Body[0:8]))
				st.latencyUs = append(st.latencyUs, float64(now.UnixNano()-sent)/1000)
			}
			if len(filterSet) > 0 {
				v, has := d.Headers["x-stream-filter-value"].(string)
				switch {
				case !has:
					st.noHeader++
				case filterSet[v]:
					st.matched++
				default:
					st.unmatched++
				}
			}
			unacked++
			if unacked >= o.ackEvery {
				if err := d.Ack(true); err != nil {
					return st, err
				}
				unacked = 0
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(o.idle)
		case <-timer.C:
			if st.consumed == 0 {
				st.stopReason = "start timeout"
			} else {
				st.stopReason = "idle"
			}
			st.seconds = last.Sub(start).Seconds()
			return st, nil
		}
	}
	st.stopReason = "count"
	st.seconds = last.Sub(start).Seconds()
	return st, nil
}

// ---------------------------------------------------------------- main

func run(o options) (result, error) {
	out := result{"mode": o.mode, "queue": o.queue}
	conn, err := dial(o)
	if err != nil {
		return out, err
	}
	defer conn.Close()
	if !o.noDeclare {
		ch, err := conn.Channel()
		if err != nil {
			return out, err
		}
		if _, err := ch.QueueDeclare(o.queue, true, false, false, false, amqp.Table{"x-queue-type": "stream"}); err != nil {
			return out, err
		}
		ch.Close()
	}
	switch o.mode {
	case "publish":
		st, err := publish(conn, o, o.n, o.rate)
		addPublish(out, o, st)
		if err != nil {
			return out, err
		}
	case "consume":
		st, err := consume(conn, o, nil, false)
		addConsume(out, o, st)
		if err != nil {
			return out, err
		}
	case "both":
		consumerConn, err := dial(o)
		if err != nil {
			return out, err
		}
		defer consumerConn.Close()
		ready := make(chan struct{})
		type outcome struct {
			st  consumeStats
			err error
		}
		got := make(chan outcome, 1)
		co := o
		co.offset = "next"
		co.m = o.n
		go func() {
			st, err := consume(consumerConn, co, ready, true)
			got <- outcome{st, err}
		}()
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			return out, errors.New("the consumer did not start within 30 s")
		}
		pst, err := publish(conn, o, o.n, o.rate)
		addPublish(out, o, pst)
		if err != nil {
			return out, err
		}
		c := <-got
		addConsume(out, o, c.st)
		if c.err != nil {
			return out, c.err
		}
		lat := c.st.latencyUs
		sort.Float64s(lat)
		out["lat_p50_us"] = round(percentile(lat, 0.50), 1)
		out["lat_p90_us"] = round(percentile(lat, 0.90), 1)
		out["lat_p99_us"] = round(percentile(lat, 0.99), 1)
		out["lat_p999_us"] = round(percentile(lat, 0.999), 1)
		if len(lat) > 0 {
			out["lat_max_us"] = round(lat[len(lat)-1], 1)
		}
	default:
		return out, fmt.Errorf("unknown -mode %q", o.mode)
	}
	if !o.keep {
		ch, err := conn.Channel()
		if err == nil {
			_, _ = ch.QueueDelete(o.queue, false, false, false)
			ch.Close()
		}
	}
	return out, nil
}

func addPublish(out result, o options, st publishStats) {
	out["published"] = st.published
	if st.seconds > 0 {
		out["pub_msgs_per_s"] = round(float64(st.published)/st.seconds, 1)
		out["pub_MB_per_s"] = round(float64(st.published)*float64(o.size)/st.seconds/1e6, 3)
	}
	sort.Float64s(st.confirmUs)
	out["confirm_p50_us"] = round(percentile(st.confirmUs, 0.50), 1)
	out["confirm_p99_us"] = round(percentile(st.confirmUs, 0.99), 1)
}

func addConsume(out result, o options, st consumeStats) {
	out["consumed"] = st.consumed
	out["bytes_received"] = st.bytes
	out["first_msg_ms"] = round(st.firstMs, 3)
	out["stop_reason"] = st.stopReason
	if st.seconds > 0 {
		out["cons_msgs_per_s"] = round(float64(st.consumed)/st.seconds, 1)
		out["cons_MB_per_s"] = round(float64(st.bytes)/st.seconds/1e6, 3)
	}
	if o.filter != "" {
		out["filter_matched"] = st.matched
		out["filter_unmatched"] = st.unmatched
		out["filter_no_header"] = st.noHeader
	}
}

func main() {
	o := parseOptions()
	runtime.GOMAXPROCS(o.procs)
	began := time.Now()
	out, err := run(o)
	if out == nil {
		out = result{}
	}
	out["client_cpu_s"] = round(cpuSeconds(), 3)
	out["wall_secs"] = round(time.Since(began).Seconds(), 3)
	status := 0
	if err != nil {
		out["error"] = err.Error()
		status = 1
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	os.Exit(status)
}
