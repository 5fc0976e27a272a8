package outboxfeed

import (
	"errors"
	"strings"
	"testing"
)

func TestRoutesMatch(t *testing.T) {
	rec := func(kind, typ, tenant, channel string) *Record {
		return &Record{Kind: kind, Type: typ, TenantID: tenant, Channel: channel}
	}
	cases := []struct {
		name   string
		routes []Route
		r      *Record
		want   bool
	}{
		{"no routes: all", nil, rec("", "a", "t", "c"), true},
		{"kind", []Route{{Kind: "integration_event"}}, rec("integration_event", "a", "t", "c"), true},
		{"kind other", []Route{{Kind: "integration_event"}}, rec("notification", "a", "t", "c"), false},
		{"empty kind is notification", []Route{{Kind: "notification"}}, rec("", "a", "t", "c"), true},
		{"type star", []Route{{Type: "invoice.*"}}, rec("", "invoice.paid", "t", "c"), true},
		{"type star one part only", []Route{{Type: "invoice.*"}}, rec("", "invoice.paid.late", "t", "c"), false},
		{"type star needs a part", []Route{{Type: "invoice.*"}}, rec("", "invoice", "t", "c"), false},
		{"type double star", []Route{{Type: "invoice.**"}}, rec("", "invoice.paid.late", "t", "c"), true},
		{"type double star needs a part", []Route{{Type: "invoice.**"}}, rec("", "invoice", "t", "c"), false},
		{"type literal", []Route{{Type: "invoice.paid"}}, rec("", "invoice.paid", "t", "c"), true},
		{"type literal other", []Route{{Type: "invoice.paid"}}, rec("", "invoice.void", "t", "c"), false},
		{"type prefix is not a match", []Route{{Type: "invoice"}}, rec("", "invoice.paid", "t", "c"), false},
		{"tenant", []Route{{Tenant: "acme"}}, rec("", "a", "acme", "c"), true},
		{"tenant other", []Route{{Tenant: "acme"}}, rec("", "a", "globex", "c"), false},
		{"channel", []Route{{Channel: "billing/**"}}, rec("", "a", "t", "billing/invoices/7"), true},
		{"channel other", []Route{{Channel: "billing/*"}}, rec("", "a", "t", "billing/invoices/7"), false},
		{"all keys", []Route{{Kind: "integration_event", Type: "invoice.*", Tenant: "acme", Channel: "billing/**"}},
			rec("integration_event", "invoice.paid", "acme", "billing/x"), true},
		{"all keys one misses", []Route{{Kind: "integration_event", Type: "invoice.*", Tenant: "acme", Channel: "billing/**"}},
			rec("integration_event", "invoice.paid", "globex", "billing/x"), false},
		{"any route", []Route{{Tenant: "acme"}, {Tenant: "globex"}}, rec("", "a", "globex", "c"), true},
	}
	for _, c := range cases {
		rs, err := CompileRoutes(c.routes)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := rs.Match(c.r); got != c.want {
			t.Errorf("%s: Match = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestCompileRoutesRefuses(t *testing.T) {
	for _, r := range []Route{
		{Kind: "event"},
		{Type: "invoice.*.**.x"},
		{Type: "invoice..paid"},
		{Type: "Invoice.paid"},
		{Type: "inv*"},
		{Tenant: "ac*"},
		{Channel: "billing/**/x"},
		{Channel: "private/{sub}"},
		{Channel: "a//b"},
	} {
		_, err := CompileRoutes([]Route{{}, r})
		if !errors.Is(err, ErrInvalidRoute) {
			t.Errorf("%+v: err = %v, want ErrInvalidRoute", r, err)
			continue
		}
		if want := "routes[1]"; !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %q does not name %s", r, err, want)
		}
	}
}
