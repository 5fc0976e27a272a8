// Package promreg makes Herald's Prometheus collectors from a name and a
// help text, and registers them so that two components sharing a registry
// (or one component built twice) share one collector.
package promreg

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg, or returns the collector already registered
// under the same description when it has c's type.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// Registrar registers one component's collectors on a registry (see
// Register). After the first failure it registers nothing more; Err
// returns that failure, naming the component.
type Registrar struct {
	reg       prometheus.Registerer
	component string
	err       error
}

// NewRegistrar returns a Registrar of component's collectors on reg.
func NewRegistrar(reg prometheus.Registerer, component string) *Registrar {
	return &Registrar{reg: reg, component: component}
}

// Add registers c with r and returns the collector to use: c, or the one
// already registered under its description.
func Add[C prometheus.Collector](r *Registrar, c C) C {
	if r.err != nil {
		return c
	}
	c, err := Register(r.reg, c)
	if err != nil {
		r.err = fmt.Errorf("%s: register metrics: %w", r.component, err)
	}
	return c
}

// Err is the first registration failure, or nil.
func (r *Registrar) Err() error { return r.err }

// Counter makes an unlabelled counter.
func Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// CounterVec makes a counter with the given labels.
func CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Gauge makes an unlabelled gauge.
func Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// GaugeFunc makes an unlabelled gauge whose value f reads at each scrape.
func GaugeFunc(name, help string, f func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
}

// Histogram makes an unlabelled histogram with the given bucket bounds.
func Histogram(name, help string, buckets ...float64) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
}
