package auth

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldgw/herald/internal/promreg"
)

// authMetrics holds the auth collectors; a nil *authMetrics records nothing.
type authMetrics struct {
	verifyOK, verifyExpired, verifyInvalid prometheus.Counter
	jwksOK, jwksError                      prometheus.Counter
	jwksKeys                               prometheus.Gauge
}

// newAuthMetrics registers the collectors with reg; nil reg gives nil.
// Collectors already registered by another Verifier are shared.
func newAuthMetrics(reg prometheus.Registerer) (*authMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	verify := promreg.CounterVec("herald_auth_token_verifications_total", "Token verifications by result (ok, expired, invalid).", "result")
	reloads := promreg.CounterVec("herald_auth_jwks_reloads_total", "JWKS loads by result (ok, error).", "result")
	keys := promreg.Gauge("herald_auth_jwks_keys", "Usable keys in the last JWKS loaded.")
	r := promreg.NewRegistrar(reg, "auth")
	verify, reloads, keys = promreg.Add(r, verify), promreg.Add(r, reloads), promreg.Add(r, keys)
	if err := r.Err(); err != nil {
		return nil, err
	}
	return &authMetrics{
		verifyOK:      verify.WithLabelValues("ok"),
		verifyExpired: verify.WithLabelValues("expired"),
		verifyInvalid: verify.WithLabelValues("invalid"),
		jwksOK:        reloads.WithLabelValues("ok"),
		jwksError:     reloads.WithLabelValues("error"),
		jwksKeys:      keys,
	}, nil
}

func (m *authMetrics) verifyResult(err error) {
	if m == nil {
		return
	}
	switch {
	case err == nil:
		m.verifyOK.Inc()
	case errors.Is(err, ErrExpired):
		m.verifyExpired.Inc()
	default:
		m.verifyInvalid.Inc()
	}
}

func (m *authMetrics) jwksResult(ok bool, keys int) {
	if m == nil {
		return
	}
	if ok {
		m.jwksOK.Inc()
		m.jwksKeys.Set(float64(keys))
		return
	}
	m.jwksError.Inc()
}
