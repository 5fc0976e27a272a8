package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldgw/herald/loadtest/internal/benchkit"
	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// latencyResult is the outcome of the latency phase.
type latencyResult struct {
	Rate         int           `json:"rate"`
	Batch        int           `json:"batch"`
	Partitions   int           `json:"partitions"`
	PollInterval time.Duration `json:"-"`
	PollS        float64       `json:"partition_poll_interval_s"`
	Notify       bool          `json:"listen_notify"`
	Producers    int           `json:"producers"`
	Channels     int           `json:"channels"`

	Committed  int                `json:"committed"`
	Duplicates int64              `json:"duplicates"`
	Elapsed    time.Duration      `json:"-"`                // first → last commit
	MaxLag     time.Duration      `json:"-"`                // how far the pacer fell behind
	Commit     benchkit.Quantiles `json:"commit"`           // producers' COMMIT round trip
	Latency    benchkit.Quantiles `json:"commit_to_client"` // COMMIT returned → client received
	FromInsert benchkit.Quantiles `json:"insert_to_client"` // embedded timestamp (just before INSERT) → client received
	Early      int                `json:"early"`            // received before the producer saw its COMMIT return (counted as 0)

	CentrifugoCPU time.Duration `json:"-"`
	PostgresCPU   time.Duration `json:"-"`
	SelfCPU       time.Duration `json:"-"`
	Window        time.Duration `json:"-"` // the CPU window: staging start → last record received

	AchievedPerS      float64 `json:"achieved_per_s"`
	ElapsedS          float64 `json:"elapsed_s"`
	MaxLagS           float64 `json:"pacer_max_lag_s"`
	WindowS           float64 `json:"cpu_window_s"`
	CentrifugoCPUS    float64 `json:"centrifugo_cpu_s"`
	PostgresCPUS      float64 `json:"postgres_cpu_s"`
	SelfCPUS          float64 `json:"bench_process_cpu_s"`
	CentrifugoUSPerRc float64 `json:"centrifugo_cpu_us_per_record"`
	PostgresUSPerRc   float64 `json:"postgres_cpu_us_per_record"`
	ErrorLogLines     int     `json:"centrifugo_error_log_lines"`
}

func (r *latencyResult) finish() {
	r.PollS = r.PollInterval.Seconds()
	if r.Elapsed > 0 && r.Committed > 1 {
		r.AchievedPerS = float64(r.Committed-1) / r.Elapsed.Seconds()
	}
	r.ElapsedS, r.MaxLagS, r.WindowS = r.Elapsed.Seconds(), r.MaxLag.Seconds(), r.Window.Seconds()
	r.CentrifugoCPUS, r.PostgresCPUS, r.SelfCPUS = r.CentrifugoCPU.Seconds(), r.PostgresCPU.Seconds(), r.SelfCPU.Seconds()
	r.CentrifugoUSPerRc, r.PostgresUSPerRc = benchkit.PerRecordMicros(r.CentrifugoCPU, r.Committed), benchkit.PerRecordMicros(r.PostgresCPU, r.Committed)
}

// runLatency runs Centrifugo with a low-latency consumer and one
// WebSocket client subscribed (server-side, through the token's channels
// claim) to every bench channel, stages single-row transactions at
// cfg.Rate, and measures commit → client latency per record.
func (e *env) runLatency(ctx context.Context) (res latencyResult, err error) {
	cfg := e.cfg
	res = latencyResult{Rate: cfg.Rate, Batch: cfg.LatencyBatch, Partitions: cfg.LatencyPartitions,
		PollInterval: cfg.LatencyPollInterval, Notify: cfg.LatencyNotify, Producers: cfg.LatencyProducers, Channels: cfg.Channels}
	if err := recreateTable(ctx, e.pool, cfg.LatencyNotify); err != nil {
		return res, err
	}
	cf, err := e.start("latency", cfParams{Partitions: cfg.LatencyPartitions, Batch: cfg.LatencyBatch,
		PollInterval: cfg.LatencyPollInterval, Notify: cfg.LatencyNotify, ChannelLimit: cfg.Channels + 1})
	if err != nil {
		return res, err
	}
	defer cf.stop()
	if err := cf.waitHealthy(ctx, cfg.StartupTimeout); err != nil {
		return res, fmt.Errorf("cfbench: centrifugo /health: %w", err)
	}
	total := int(int64(cfg.Rate) * int64(cfg.LatencyDuration) / int64(time.Second))
	channels := make([]string, 0, cfg.Channels+1)
	for i := range cfg.Channels {
		channels = append(channels, "bench:ch-"+strconv.Itoa(i))
	}
	channels = append(channels, warmupChannel)
	client, err := dialClient(ctx, cf, channels, total)
	if err != nil {
		return res, err
	}
	defer client.close()

	// Warm-up: one row per partition, delivered end to end.
	for p := range cfg.LatencyPartitions {
		if err := insertOne(ctx, e.pool, []byte(`{"channel":"`+warmupChannel+`","data":{"warmup":true}}`), p); err != nil {
			return res, err
		}
	}
	err = pollUntil(ctx, cfg.StartupTimeout, 5*time.Millisecond, func() (bool, error) {
		if err := errors.Join(cf.alive(), client.failed()); err != nil {
			return false, err
		}
		return client.warm.Load() >= int64(cfg.LatencyPartitions), nil
	})
	if err != nil {
		return res, fmt.Errorf("cfbench: latency: warm-up publications did not arrive: %w; log:\n%s", err, cf.logTail())
	}

	pool, err := openPool(ctx, e.dbURL, cfg.LatencyProducers, "cfbench-latency")
	if err != nil {
		return res, err
	}
	defer pool.Close()
	fmt.Fprintf(e.progress, "latency: staging %d records at %d/s over %d connections (batch %d, %d partitions, poll %v, LISTEN/NOTIFY %v)\n",
		total, cfg.Rate, cfg.LatencyProducers, cfg.LatencyBatch, cfg.LatencyPartitions, cfg.LatencyPollInterval, benchkit.OnOff(cfg.LatencyNotify))

	cf0, pg0, self0 := cf.cpu(), benchkit.ReadBackends(ctx, e.pool), benchkit.SelfCPU()
	start := time.Now()
	marks, lag, err := pacedStage(ctx, pool, cfg, total)
	if err != nil {
		return res, err
	}
	res.MaxLag, res.Committed = lag, len(marks)
	err = pollUntil(ctx, cfg.DeliverTimeout, 2*time.Millisecond, func() (bool, error) {
		if err := errors.Join(cf.alive(), client.failed()); err != nil {
			return false, err
		}
		return client.count.Load() >= int64(len(marks)), nil
	})
	res.Window = time.Since(start)
	res.CentrifugoCPU, res.PostgresCPU, res.SelfCPU = cf.cpu()-cf0, benchkit.ReadBackends(ctx, e.pool).Since(pg0), benchkit.SelfCPU()-self0
	if err != nil {
		return res, fmt.Errorf("cfbench: latency: %d of %d records received: %w", client.count.Load(), len(marks), err)
	}
	res.Duplicates = client.dups.Load()

	first, last := marks[0].committedAt, marks[0].committedAt
	commits := make([]time.Duration, 0, len(marks))
	lat := make([]time.Duration, 0, len(marks))
	fromInsert := make([]time.Duration, 0, len(marks))
	for _, m := range marks {
		first, last = min(first, m.committedAt), max(last, m.committedAt)
		commits = append(commits, m.commitTook)
		at := client.recv[m.n].Load()
		if at == 0 {
			return res, fmt.Errorf("cfbench: latency: record %d committed but never received", m.n)
		}
		d := time.Duration(at - m.committedAt)
		if d < 0 {
			res.Early++
			d = 0
		}
		lat = append(lat, d)
		fromInsert = append(fromInsert, time.Duration(at-m.insertAt))
	}
	res.Elapsed = time.Duration(last - first)
	res.Commit, res.Latency, res.FromInsert = benchkit.Summarize(commits), benchkit.Summarize(lat), benchkit.Summarize(fromInsert)
	res.ErrorLogLines = cf.ErrorLines()
	res.finish()
	fmt.Fprintf(e.progress, "latency: commit → client p50 %s p99 %s p99.9 %s max %s (achieved %.0f/s)\n",
		benchkit.MS(res.Latency.P50), benchkit.MS(res.Latency.P99), benchkit.MS(res.Latency.P999), benchkit.MS(res.Latency.Max), res.AchievedPerS)
	return res, nil
}

// commitMark is one producer's committed record.
type commitMark struct {
	n           int
	insertAt    int64 // mono() just before its INSERT (the record embeds the wall clock then)
	committedAt int64 // mono() when COMMIT returned
	commitTook  time.Duration
}

// clockBase anchors mono.
var clockBase = time.Now()

// mono is monotonic nanoseconds since clockBase: the producers and the
// client are in this process, so their times compare directly.
func mono() int64 { return int64(time.Since(clockBase)) }

// pacedStage hands record numbers to the producers on a fixed schedule
// and collects their commits. It returns the largest lag of the schedule.
func pacedStage(ctx context.Context, pool *pgxpool.Pool, cfg config, total int) ([]commitMark, time.Duration, error) {
	marks, lag, err := benchkit.Paced(ctx, cfg.Rate, cfg.LatencyProducers, total, func(k int) (commitMark, error) {
		return produceOne(ctx, pool, k, cfg.Channels, cfg.LatencyPartitions, false)
	})
	if err == nil && len(marks) == 0 {
		return nil, lag, errors.New("cfbench: latency: nothing committed")
	}
	return marks, lag, err
}

// produceOne inserts record k in its own transaction (BEGIN, INSERT,
// COMMIT, as Herald's producers do; with business, a business row
// before the INSERT), with the time just before the
// INSERT embedded in its data, and times the COMMIT.
func produceOne(ctx context.Context, pool *pgxpool.Pool, k, channels, partitions int, business bool) (commitMark, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return commitMark{}, fmt.Errorf("cfbench: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	if business {
		if err := benchkit.InsertBusiness(ctx, tx, k); err != nil {
			return commitMark{}, fmt.Errorf("cfbench: %w", err)
		}
	}
	insertAt, ts := mono(), time.Now().UnixNano()
	body := cfoutbox.AppendPublish(nil, "bench:ch-"+strconv.Itoa(k%channels), []byte(`{"n":`+strconv.Itoa(k)+
		`,"ts":`+strconv.FormatInt(ts, 10)+`,"note":"outbox benchmark record"}`))
	if _, err := tx.Exec(ctx, outbox(false).InsertSQL(), body, k%partitions); err != nil {
		return commitMark{}, fmt.Errorf("cfbench: insert: %w", err)
	}
	before := mono()
	if err := tx.Commit(ctx); err != nil {
		return commitMark{}, fmt.Errorf("cfbench: commit: %w", err)
	}
	now := mono()
	return commitMark{n: k, insertAt: insertAt, committedAt: now, commitTook: time.Duration(now - before)}, nil
}

// wsClient is one Centrifugo client over WebSocket, JSON protocol,
// recording when each record first arrived.
type wsClient struct {
	conn   *websocket.Conn
	cancel context.CancelFunc
	recv   []atomic.Int64 // mono() at first receipt, by record number
	count  atomic.Int64   // distinct records received
	dups   atomic.Int64
	warm   atomic.Int64
	errMu  sync.Mutex
	err    error
	done   chan struct{}
}

// clientToken is a connection JWT (HS256) for user cfbench with
// server-side subscriptions to channels.
func clientToken(secret string, channels []string) (string, error) {
	claims := jwt.MapClaims{"sub": "cfbench", "exp": time.Now().Add(time.Hour).Unix(), "channels": channels}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
}

// reply is the part of a Centrifugo protocol reply the client reads.
type reply struct {
	ID    uint32 `json:"id"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Connect *struct {
		Client string                     `json:"client"`
		Subs   map[string]json.RawMessage `json:"subs"`
	} `json:"connect"`
	Push *struct {
		Channel string `json:"channel"`
		Pub     *struct {
			Data json.RawMessage `json:"data"`
		} `json:"pub"`
	} `json:"push"`
}

// dialClient connects, sends the connect command and starts reading.
func dialClient(ctx context.Context, cf *centrifugo, channels []string, records int) (*wsClient, error) {
	token, err := clientToken(cf.secret, channels)
	if err != nil {
		return nil, err
	}
	dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
	defer dcancel()
	conn, _, err := websocket.Dial(dctx, "ws://127.0.0.1:"+strconv.Itoa(cf.port)+"/connection/websocket", nil)
	if err != nil {
		return nil, fmt.Errorf("cfbench: websocket dial: %w", err)
	}
	conn.SetReadLimit(64 << 20)
	cmd, _ := json.Marshal(map[string]any{"id": 1, "connect": map[string]any{"token": token, "name": "cfbench"}})
	if err := conn.Write(dctx, websocket.MessageText, cmd); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("cfbench: websocket connect command: %w", err)
	}
	// The first frame holds the connect reply.
	_, data, err := conn.Read(dctx)
	if err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("cfbench: websocket connect reply: %w", err)
	}
	var r reply
	line, _, _ := bytes.Cut(data, []byte("\n"))
	if err := json.Unmarshal(line, &r); err != nil || r.ID != 1 {
		conn.CloseNow()
		return nil, fmt.Errorf("cfbench: websocket connect reply %q", data)
	}
	if r.Error != nil || r.Connect == nil {
		conn.CloseNow()
		return nil, fmt.Errorf("cfbench: connect refused: %s", data)
	}
	if len(r.Connect.Subs) != len(channels) {
		conn.CloseNow()
		return nil, fmt.Errorf("cfbench: connected with %d server-side subscriptions, want %d", len(r.Connect.Subs), len(channels))
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &wsClient{conn: conn, cancel: cancel, recv: make([]atomic.Int64, records), done: make(chan struct{})}
	go c.readLoop(rctx, data)
	return c, nil
}

func (c *wsClient) readLoop(ctx context.Context, first []byte) {
	defer close(c.done)
	// Pushes sent along with the connect reply.
	if _, rest, ok := bytes.Cut(first, []byte("\n")); ok {
		c.handle(ctx, rest, mono())
	}
	for {
		_, data, err := c.conn.Read(ctx)
		if err != nil {
			if ctx.Err() == nil {
				c.fail(fmt.Errorf("cfbench: websocket read: %w", err))
			}
			return
		}
		c.handle(ctx, data, mono())
	}
}

// handle processes one frame: newline-separated replies and pushes.
func (c *wsClient) handle(ctx context.Context, data []byte, now int64) {
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if bytes.Equal(line, []byte("{}")) { // ping: answer with a pong
			_ = c.conn.Write(ctx, websocket.MessageText, []byte("{}"))
			continue
		}
		var r reply
		if err := json.Unmarshal(line, &r); err != nil {
			c.fail(fmt.Errorf("cfbench: bad frame %q: %w", line, err))
			continue
		}
		if r.Error != nil {
			c.fail(fmt.Errorf("cfbench: server error %d %s", r.Error.Code, r.Error.Message))
			continue
		}
		if r.Push == nil || r.Push.Pub == nil {
			continue
		}
		if r.Push.Channel == warmupChannel {
			c.warm.Add(1)
			continue
		}
		var d struct {
			N *int `json:"n"`
		}
		if err := json.Unmarshal(r.Push.Pub.Data, &d); err != nil || d.N == nil || *d.N < 0 || *d.N >= len(c.recv) {
			c.fail(fmt.Errorf("cfbench: unexpected publication %s", line))
			continue
		}
		if c.recv[*d.N].CompareAndSwap(0, now) {
			c.count.Add(1)
		} else {
			c.dups.Add(1)
		}
	}
}

func (c *wsClient) fail(err error) {
	c.errMu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.errMu.Unlock()
}

func (c *wsClient) failed() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

func (c *wsClient) close() {
	c.cancel()
	c.conn.CloseNow()
	<-c.done
}
