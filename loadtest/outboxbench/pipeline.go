package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/outboxfeed"
)

// recordingPublisher passes messages to the broker and notes when it
// accepted each one.
type recordingPublisher struct {
	next     outboxfeed.Publisher
	accepted atomic.Int64
	record   bool // keep per-id accept times

	mu         sync.Mutex
	acceptedAt map[string]time.Time // first accept per id
}

func (p *recordingPublisher) Publish(ctx context.Context, msg fanout.Message) (fanout.Publication, error) {
	pub, err := p.next.Publish(ctx, msg)
	if err != nil {
		return pub, err
	}
	now := time.Now()
	p.accepted.Add(1)
	if p.record {
		p.mu.Lock()
		if _, dup := p.acceptedAt[msg.ID]; !dup {
			p.acceptedAt[msg.ID] = now
		}
		p.mu.Unlock()
	}
	return pub, nil
}

// acceptTime returns when id was first accepted.
func (p *recordingPublisher) acceptTime(id string) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t, ok := p.acceptedAt[id]
	return t, ok
}

// pipeline is an in-process Worker publishing to a MemoryBroker wired to a
// Hub, through a recordingPublisher.
type pipeline struct {
	broker *fanout.MemoryBroker
	pub    *recordingPublisher
	worker *outboxfeed.Worker
	reg    *prometheus.Registry
}

// startPipeline starts the broker, the Hub and a Worker over store.
func startPipeline(ctx context.Context, store outboxfeed.Store, cfg config, record bool) (*pipeline, error) {
	broker, err := fanout.NewMemoryBroker(fanout.MemoryConfig{})
	if err != nil {
		return nil, err
	}
	hub, err := fanout.NewHub(broker, fanout.HubConfig{})
	if err != nil {
		return nil, err
	}
	if err := broker.Start(ctx, hub); err != nil {
		return nil, err
	}
	p := &pipeline{
		broker: broker,
		pub:    &recordingPublisher{next: broker, record: record, acceptedAt: map[string]time.Time{}},
		reg:    prometheus.NewRegistry(),
	}
	p.worker, err = outboxfeed.NewWorker(store, p.pub, outboxfeed.WorkerConfig{
		BatchSize: cfg.BatchSize, Concurrency: cfg.Concurrency, Lanes: cfg.Lanes, PollInterval: cfg.PollInterval, Registerer: p.reg,
	})
	if err != nil {
		broker.Stop()
		return nil, err
	}
	if err := p.worker.Start(ctx); err != nil {
		broker.Stop()
		return nil, err
	}
	return p, nil
}

// stop stops the Worker (giving back its leases), then the broker.
func (p *pipeline) stop() {
	p.worker.Stop()
	p.broker.Stop()
}

// completed is the Worker's count of records completed after the broker
// accepted them (herald_outbox_outcomes_total{result="success"}).
func (p *pipeline) completed() (int64, error) {
	mfs, err := p.reg.Gather()
	if err != nil {
		return 0, fmt.Errorf("outboxbench: gather worker metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "herald_outbox_outcomes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == outboxfeed.OutcomeSuccess {
					return int64(m.GetCounter().GetValue()), nil
				}
			}
		}
	}
	return 0, nil
}

// waitReady waits until the Worker has reached the store.
func (p *pipeline) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !p.worker.Ready() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("outboxbench: worker not ready: %w", context.Cause(ctx))
		case <-t.C:
		}
	}
	return nil
}
