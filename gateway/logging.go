package gateway

import (
	"net/url"
)

// secretParams are query parameters whose values never reach a log.
var secretParams = []string{"access_token", "ticket", "token", "sub_token"}

// redactURL returns u as a string with secret query values replaced.
func redactURL(u *url.URL) string {
	if u.RawQuery == "" {
		return u.String()
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		c := *u
		c.RawQuery = "REDACTED-unparseable"
		return c.String()
	}
	changed := false
	for _, p := range secretParams {
		if vs, ok := q[p]; ok {
			for i := range vs {
				vs[i] = "REDACTED"
			}
			changed = true
		}
	}
	if !changed {
		return u.String()
	}
	c := *u
	c.RawQuery = q.Encode()
	return c.String()
}
