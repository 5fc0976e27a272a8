package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/heraldgw/herald/loadtest/internal/hostinfo"
)

// result is what one run measured.
type result struct {
	cfg       config
	server    string
	channels  int
	loadStart string
	loadEnd   string

	before    snapshot // before any connection
	connected snapshot // every connection open and subscribed
	pubStart  snapshot // publishing begins (broadcast, fanout)
	pubDone   snapshot // publishing ended; stalled subscribers not reading yet
	after     snapshot // end of the hold (idle) or of the drain
	pubEnd    time.Time
	connect   time.Duration
	retries   int64
	logErrors int // Centrifugo: lines at level error in its log (-1: unreadable)

	sent          int
	accepted      [][]uint64 // per channel: offsets the server gave the publications (ws), sequence numbers committed (outbox)
	pubErrs       map[string]int
	maxLag        time.Duration
	drainTimedOut int // subscribers still waiting when the drain bound passed

	expected, delivered int64
	missing             int64 // at subscribers the server did not close
	missingClosed       int64 // at subscribers the server closed
	dups, ooo           int64
	stale, unexpected   int64
	unsubscribed        int64
	stalledClosed       int            // stalled subscribers the server closed
	closes              map[string]int // subscribers the server ended, by reason
	lat                 quantiles

	// With -publish-via outbox:
	outbox       outboxInfo
	commitLat    quantiles // COMMIT returned → subscriber read it
	beforeCommit int64     // deliveries read before their COMMIT returned (in commitLat as 0)
	txLat        quantiles // BEGIN → COMMIT returned
	burst        burstInfo // with -burst
	burstStart   snapshot  // with -burst: everything staged, just before the commits
	lastDelivery time.Time // with the outbox: the latest delivery read
	commitLog    *commitLog
	recvLog      *timeLog     // with -stages
	stages       *stageReport // with -stages, once the child stopped
}

// viaOutbox reports whether the run staged its publications in the outbox.
func (r *result) viaOutbox() bool { return r.cfg.PublishVia == "outbox" }

// published is how many publications the server accepted.
func (r *result) published() int {
	n := 0
	for _, a := range r.accepted {
		n += len(a)
	}
	return n
}

// integrity returns an error when a subscriber the server did not close
// lost, repeated or reordered a publication, or the publisher was refused:
// none of that may happen (docs/protocol.md: a connection delivers each
// publication at most once, in offset order, with no gap).
func (r *result) integrity() error {
	var errs []error
	if r.missing > 0 {
		errs = append(errs, fmt.Errorf("%d publications missing at subscribers the server did not close", r.missing))
	}
	if r.dups > 0 {
		errs = append(errs, fmt.Errorf("%d duplicate deliveries", r.dups))
	}
	if r.ooo > 0 {
		errs = append(errs, fmt.Errorf("%d deliveries out of offset order", r.ooo))
	}
	if r.stale+r.unexpected > 0 {
		errs = append(errs, fmt.Errorf("%d deliveries of offsets never published in this run", r.stale+r.unexpected))
	}
	if n := sumInts(r.pubErrs); n > 0 {
		errs = append(errs, fmt.Errorf("%d publications refused: %v", n, r.pubErrs))
	}
	if r.cfg.publishes() && r.published() < r.sent {
		errs = append(errs, fmt.Errorf("%d publications sent, %d accepted", r.sent, r.published()))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("connbench: delivery check failed: %w", errors.Join(errs...))
}

// print writes the report as markdown.
func (r *result) print(w io.Writer) {
	c := r.cfg
	via := ""
	if r.viaOutbox() {
		via = ", published via the outbox"
	}
	fmt.Fprintf(w, "\n### Connection benchmark: %s, %s%s, %s\n\n", c.Scenario, c.Transport, via, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(w, "- machine: %s\n", hostinfo.Machine())
	fmt.Fprintf(w, "- server: %s\n", r.server)
	if c.publishes() {
		fmt.Fprintf(w, "- publish path measured: %s\n", r.path())
	}
	fmt.Fprintf(w, "- load average (1/5/15 min) at start: %s, at end: %s\n", r.loadStart, r.loadEnd)
	fmt.Fprintf(w, "- command: `%s`\n\n", commandLine())
	fmt.Fprintln(w, "| measurement | result |")
	fmt.Fprintln(w, "|---|---|")
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "| %s | %s |\n", k, fmt.Sprintf(format, a...)) }

	n := int64(c.Conns)
	row("connections opened and subscribed", "%d over %d channel(s) in %.2f s (%s), %d refusals retried",
		c.Conns, r.channels, r.connect.Seconds(), rate(n, r.connect), r.retries)
	if d, ok := cpuDelta(r.before, r.connected); ok {
		row("server CPU to open them", "%.2f s (%.0f µs per connection)", d.Seconds(), float64(d.Microseconds())/float64(n))
	}
	if c.Scenario == "idle" {
		r.printMemory(row, r.before, r.after)
	} else {
		r.printDelivery(row)
		r.printMemory(row, r.before, r.after)
	}
	row("subscribers the server closed, by reason (client-seen)", "%s", countsText(r.closes))
	if c.centrifugo() {
		row("Centrifugo log lines at level error (a failed outbox batch is logged there)", "%d", r.logErrors)
	}
	if r.before.m != nil && r.after.m != nil && !c.centrifugo() {
		match := map[string]string{"transport": c.Transport}
		delta := diff(r.after.m.byLabel("herald_disconnects_total", "reason", match), r.before.m.byLabel("herald_disconnects_total", "reason", match))
		row("server-counted disconnects during the run (herald_disconnects_total)", "%s", countsText(delta))
	}
	fmt.Fprintln(w)
	if err := r.integrity(); err != nil {
		fmt.Fprintf(w, "**Delivery check FAILED**: %v\n\n", err)
	} else if c.publishes() {
		fmt.Fprintf(w, "Delivery check passed: every subscriber the server did not close received every accepted publication of its channel once, in offset order.\n\n")
	}
}

func (r *result) printDelivery(row func(k, format string, a ...any)) {
	c := r.cfg
	pubWindow := r.pubEnd.Sub(r.pubStart.at)
	pubRow := "publications sent / accepted (WebSocket publish op, one connection)"
	switch {
	case r.viaOutbox() && c.centrifugo():
		pubRow = fmt.Sprintf("outbox transactions begun / committed (BEGIN, INSERT, COMMIT; %d producer connections)", r.outbox.producers)
	case r.viaOutbox():
		pubRow = fmt.Sprintf("outbox transactions begun / committed (BEGIN, Stage, COMMIT; %d producer connections)", r.outbox.producers)
	case c.centrifugo():
		pubRow = "publications sent / accepted (server API publish, up to 16 requests in flight)"
	}
	if c.Burst > 0 {
		r.printBurst(row)
	} else {
		row(pubRow, "%d / %d over %.2f s (%s, target %d/s); pacer fell behind by up to %s",
			r.sent, r.published(), pubWindow.Seconds(), rate(int64(r.published()), pubWindow), c.Rate, ms(r.maxLag))
	}
	if r.viaOutbox() && c.Burst == 0 {
		row("staging transaction BEGIN → COMMIT returned: p50 / p99 / max", "%s / %s / %s (%d transactions)",
			ms(r.txLat.P50), ms(r.txLat.P99), ms(r.txLat.Max), r.txLat.N)
	}
	window := r.after.at.Sub(r.pubStart.at)
	drain := "every subscriber still connected had every publication"
	if r.drainTimedOut > 0 {
		drain = fmt.Sprintf("%d subscribers still waiting when the %v drain bound passed", r.drainTimedOut, c.Drain)
	}
	row("deliveries received / expected", "%d / %d; **%s** over %.2f s (publishing + drain: %s)",
		r.delivered, r.expected, rate(r.delivered, window), window.Seconds(), drain)
	if d, ok := cpuDelta(r.pubStart, r.after); ok {
		row("server CPU over publishing + drain ("+r.after.cpuFrom+")", "%.2f s (%.0f %% of one core); **%.0f deliveries per server CPU-second**",
			d.Seconds(), 100*d.Seconds()/window.Seconds(), float64(r.delivered)/d.Seconds())
	}
	gen := r.after.gen - r.pubStart.gen
	row("generator CPU over the same window (subscribers + publisher)", "%.2f s (%.0f %% of one core)", gen.Seconds(), 100*gen.Seconds()/window.Seconds())
	if r.viaOutbox() {
		row("**latency outbox COMMIT returned → subscriber receive**: p50 / p90 / p99 / p99.9 / max", "**%s / %s / %s / %s / %s** (min %s, %d samples; %d read before their COMMIT returned, counted as 0)",
			ms(r.commitLat.P50), ms(r.commitLat.P90), ms(r.commitLat.P99), ms(r.commitLat.P999), ms(r.commitLat.Max), ms(r.commitLat.Min), r.commitLat.N, r.beforeCommit)
	}
	if r.stages != nil {
		r.stages.print(row, r.burst.firstCommit)
	}
	latRow := "latency publisher send → subscriber receive: p50 / p99 / p99.9 / max"
	if r.viaOutbox() {
		latRow = "latency producer BEGIN → subscriber receive (staging transaction included): p50 / p99 / p99.9 / max"
	}
	row(latRow, "**%s / %s / %s / %s** (min %s, %d samples)",
		ms(r.lat.P50), ms(r.lat.P99), ms(r.lat.P999), ms(r.lat.Max), ms(r.lat.Min), r.lat.N)
	if c.Stall > 0 {
		row("stalled subscribers (read nothing until publishing ended; not in the latency) / closed by the server", "%d / %d", c.Stall, r.stalledClosed)
	}
	if r.pubStart.rss >= 0 && r.pubDone.rss >= 0 {
		row("server RSS when publishing began / ended (stalled subscribers not reading yet)", "%s / %s",
			mib(float64(r.pubStart.rss)), mib(float64(r.pubDone.rss)))
	}
	row("missing (open subscribers) / missing (closed subscribers) / duplicate / out of order / not published", "%d / %d / %d / %d / %d",
		r.missing, r.missingClosed, r.dups, r.ooo, r.stale+r.unexpected)
	if r.before.m != nil && r.after.m != nil && !c.centrifugo() {
		dropped, _ := r.after.m.value("herald_queue_dropped_total", nil)
		dropped0, _ := r.before.m.value("herald_queue_dropped_total", nil)
		match := map[string]string{"transport": c.Transport}
		del, _ := r.after.m.value("herald_deliveries_total", match)
		del0, _ := r.before.m.value("herald_deliveries_total", match)
		row("server-counted deliveries (herald_deliveries_total) / queue drops (herald_queue_dropped_total)", "%.0f / %.0f", del-del0, dropped-dropped0)
	}
}

// printBurst writes a -burst run's drain: from the first COMMIT sent to
// the last delivery read, over every publication of the burst.
func (r *result) printBurst(row func(k, format string, a ...any)) {
	b := r.burst
	row("burst committed", "%d publications over %d channels in %d transactions, committed at once (the last COMMIT returned %s after the first was sent)",
		r.published(), r.channels, b.txs, ms(b.lastCommit.Sub(b.firstCommit)))
	if r.lastDelivery.IsZero() || b.firstCommit.IsZero() {
		row("**drain, first COMMIT → last delivery**", "n/a (nothing delivered)")
		return
	}
	d := r.lastDelivery.Sub(b.firstCommit)
	row("**drain, first COMMIT → last delivery**", "**%.3f s: %s** (deliveries %d; from the last COMMIT returned: %.3f s)",
		d.Seconds(), rate(int64(r.published()), d), r.delivered, r.lastDelivery.Sub(b.lastCommit).Seconds())
	n := float64(r.published())
	if cpu, ok := cpuDelta(r.burstStart, r.after); ok {
		row("server CPU from just before the commits to every delivery", "%.2f s (%.1f µs per record)", cpu.Seconds(), 1e6*cpu.Seconds()/n)
	}
	gen := r.after.gen - r.burstStart.gen
	row("generator CPU over the same window (the subscribers' reading)", "%.2f s (%.1f µs per record)", gen.Seconds(), 1e6*gen.Seconds()/n)
}

// path names the publish path the latency figures measure.
func (r *result) path() string {
	switch {
	case r.viaOutbox() && r.cfg.centrifugo():
		return fmt.Sprintf("outbox: BEGIN, INSERT INTO %s ('publish', {channel, data}, partition), COMMIT on %d producer connections to database %s (%s) → Centrifugo's PostgreSQL outbox consumer → broker → subscribers; latency from the producer's COMMIT returning",
			r.outbox.table, r.outbox.producers, r.outbox.database, r.outbox.postgres)
	case r.viaOutbox():
		return fmt.Sprintf("outbox: BEGIN, outboxfeed.Stage, COMMIT on %d producer connections to database %s (%s) → the server's outbox Worker → broker → subscribers; latency from the producer's COMMIT returning",
			r.outbox.producers, r.outbox.database, r.outbox.postgres)
	case r.cfg.centrifugo():
		return "Centrifugo server API publish (HTTP) → broker → subscribers; latency from the publisher's send"
	}
	return "WebSocket publish op (one connection) → broker → subscribers; latency from the publisher's send"
}

// printMemory writes the server's memory per connection: the change from
// before the first connection to `at`, divided by the connections.
func (r *result) printMemory(row func(k, format string, a ...any), before, at snapshot) {
	n := float64(r.cfg.Conns)
	if before.rss >= 0 && at.rss >= 0 {
		row("server RSS (VmRSS) before / after / per connection", "%s / %s / **%s**",
			mib(float64(before.rss)), mib(float64(at.rss)), kib(float64(at.rss-before.rss)/n))
	} else if v0, ok0 := metric(before, "process_resident_memory_bytes"); ok0 {
		if v1, ok1 := metric(at, "process_resident_memory_bytes"); ok1 {
			row("server RSS (process_resident_memory_bytes) before / after / per connection", "%s / %s / **%s**", mib(v0), mib(v1), kib((v1-v0)/n))
		}
	}
	for _, m := range []struct{ name, what string }{
		{"go_memstats_heap_inuse_bytes", "server Go heap in use"},
		{"go_memstats_stack_inuse_bytes", "server goroutine stacks"},
	} {
		v0, ok0 := metric(before, m.name)
		v1, ok1 := metric(at, m.name)
		if ok0 && ok1 {
			row(fmt.Sprintf("%s (%s) before / after / per connection", m.what, m.name), "%s / %s / **%s**", mib(v0), mib(v1), kib((v1-v0)/n))
		}
	}
	if v0, ok0 := metric(before, "go_goroutines"); ok0 {
		if v1, ok1 := metric(at, "go_goroutines"); ok1 {
			row("server goroutines (go_goroutines) before / after / per connection", "%.0f / %.0f / %.2f", v0, v1, (v1-v0)/n)
		}
	}
	if v0, ok0 := metric(before, "go_gc_duration_seconds_count"); ok0 {
		if v1, ok1 := metric(at, "go_gc_duration_seconds_count"); ok1 {
			// The heap figure counts garbage not yet collected: how many
			// collections ran tells how fresh it is.
			row("server GC cycles between the two readings (go_gc_duration_seconds_count)", "%.0f", v1-v0)
		}
	}
	if before.genRSS >= 0 && at.genRSS >= 0 {
		row("generator RSS per connection (client side, for scale)", "%s", kib(float64(at.genRSS-before.genRSS)/n))
	}
}

// cpuDelta is the server CPU used between two snapshots.
func cpuDelta(a, b snapshot) (time.Duration, bool) {
	if a.cpu < 0 || b.cpu < 0 {
		return 0, false
	}
	return b.cpu - a.cpu, true
}

func metric(s snapshot, name string) (float64, bool) {
	if s.m == nil {
		return 0, false
	}
	return s.m.value(name, nil)
}

func diff(after, before map[string]float64) map[string]float64 {
	out := make(map[string]float64)
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// countsText lists m as "key: n, ..." in key order, or "none".
func countsText[N int | float64](m map[string]N) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s: %.0f", k, float64(m[k])))
	}
	return strings.Join(parts, ", ")
}

func sumInts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// ms formats a duration in milliseconds, to the microsecond.
func ms(d time.Duration) string {
	return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
}

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f/s", float64(n)/d.Seconds())
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }
func kib(b float64) string { return fmt.Sprintf("%.1f KiB", b/(1<<10)) }

// commandLine is how the program was invoked, for the report.
func commandLine() string {
	args := os.Args[1:]
	if strings.HasSuffix(os.Args[0], ".test") {
		return "go test ./loadtest/connbench (in-process run)"
	}
	return "go run ./loadtest/connbench " + strings.Join(args, " ")
}
