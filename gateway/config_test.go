package gateway

import (
	"errors"
	"math"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/heraldgw/herald/auth"
	"github.com/heraldgw/herald/fanout"
	"github.com/heraldgw/herald/fanout/fanouttest"
	"github.com/heraldgw/herald/subscriptions"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	want := Config{
		Listen: "127.0.0.1:8080", HeaderTimeout: 10 * time.Second, MaxConnections: 10000, MaxSubscriptions: 128,
		QueueMaxBytes: 1 << 20, QueueMaxMessages: 1024, WriteTimeout: 10 * time.Second,
		HeartbeatInterval: 15 * time.Second, SSERetry: 2 * time.Second, ClientTimeout: time.Minute,
		CookieName: "herald_token", ShutdownReconnectDelay: 5 * time.Second, ShutdownTimeout: 10 * time.Second,
		MaxMessageSize: 64 << 10, MaxInflight: 16, ConnectTimeout: 10 * time.Second,
		ConnectAttemptsPerIP: 20, ConnectAttemptsBurst: 40,
		MaxConnectionsPerUser: 100, RevalidateInterval: 10 * time.Second, RefreshAhead: time.Minute,
		ExpiryGrace: 5 * time.Second, Version: "dev",
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("defaults = %+v\nwant %+v", c, want)
	}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := map[string]struct {
		cfg  Config
		want string
	}{
		"listen":          {Config{Listen: "8080"}, "Listen"},
		"max connections": {Config{MaxConnections: -1}, "MaxConnections must be positive"},
		"subscriptions":   {Config{MaxSubscriptions: -5}, "MaxSubscriptions"},
		"queue bytes":     {Config{QueueMaxBytes: 100}, "QueueMaxBytes must be at least 1024"},
		"queue messages":  {Config{QueueMaxMessages: -1}, "QueueMaxMessages"},
		"write timeout":   {Config{WriteTimeout: -time.Second}, "WriteTimeout"},
		"header timeout":  {Config{HeaderTimeout: -time.Second}, "HeaderTimeout must be positive"},
		"client timeout":  {Config{ClientTimeout: 10 * time.Second, HeartbeatInterval: 10 * time.Second}, "ClientTimeout (10s) must exceed HeartbeatInterval (10s)"},
		"retry":           {Config{SSERetry: time.Microsecond}, "SSERetry"},
		"cookie":          {Config{CookieName: "a b"}, "CookieName"},
		"shutdown delay":  {Config{ShutdownReconnectDelay: -1}, "ShutdownReconnectDelay"},
		"message size":    {Config{MaxMessageSize: 100}, "MaxMessageSize must be at least 1024"},
		"inflight":        {Config{MaxInflight: -1}, "MaxInflight must be positive"},
		"connect timeout": {Config{ConnectTimeout: -time.Second}, "ConnectTimeout"},
		"attempts burst":  {Config{ConnectAttemptsBurst: -2}, "ConnectAttemptsBurst"},
		"attempts rate":   {Config{ConnectAttemptsPerIP: math.Inf(1)}, "ConnectAttemptsPerIP must be a finite number"},
		"revalidate":      {Config{RevalidateInterval: time.Millisecond}, "RevalidateInterval must be at least 10ms"},
		"revalidate neg":  {Config{RevalidateInterval: -time.Second}, "RevalidateInterval must be positive"},
		"refresh ahead":   {Config{RefreshAhead: 400 * time.Millisecond}, "RefreshAhead (400ms) must exceed 500ms"},
		"refresh neg":     {Config{RefreshAhead: -time.Second}, "RefreshAhead must be positive"},
		"grace":           {Config{ExpiryGrace: -time.Second}, "ExpiryGrace must be positive"},
		"origin empty":    {Config{AllowedOrigins: []string{""}}, "AllowedOrigins[0] is empty"},
		"origin pattern":  {Config{AllowedOrigins: []string{"ok.example", "[bad"}}, "AllowedOrigins[1] \"[bad\" is not a valid pattern"},
		"trusted proxies": {Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), {}}}, "TrustedProxies[1] is not a valid prefix"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.cfg.withDefaults().validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("validate = %v, want ErrInvalidConfig mentioning %q", err, c.want)
			}
		})
	}
}

func TestNewRejectsMissingDeps(t *testing.T) {
	broker, err := newTestBroker(t, envOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hub := fanouttest.StartHub(t, broker, fanout.HubConfig{})
	full := Deps{Verifier: auth.NewHMACVerifier(testSecret, 0), Authorizer: &subscriptions.Authorizer{}, Broker: broker, Hub: hub}
	cases := map[string]func(*Deps){
		"Verifier":    func(d *Deps) { d.Verifier = nil },
		"Authorizer":  func(d *Deps) { d.Authorizer = nil },
		"Broker":      func(d *Deps) { d.Broker = nil },
		"Hub":         func(d *Deps) { d.Hub = nil },
		"ReadyChecks": func(d *Deps) { d.ReadyChecks = []ReadyCheck{{Name: "x"}} },
	}
	for name, mutate := range cases {
		d := full
		mutate(&d)
		if _, err := New(Config{}, d); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: New = %v", name, err)
		}
	}
	if _, err := New(Config{QueueMaxBytes: 10}, full); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("bad config: New = %v", err)
	}
	// One registry cannot hold two servers' metrics.
	reg := newRegistry()
	full.Registerer = reg
	if _, err := New(Config{}, full); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{}, full); err == nil || !strings.Contains(err.Error(), "one Registerer per Server") {
		t.Errorf("second registration: %v", err)
	}
}
