package auth

import "errors"

var (
	// ErrInvalidToken wraps every verification failure; the message after it
	// names the check that failed and never contains the token.
	ErrInvalidToken = errors.New("invalid token")
	// ErrExpired is wrapped (with ErrInvalidToken) when exp has passed.
	ErrExpired = errors.New("token expired")
	// ErrNoKey means no key source is configured or no key matched.
	ErrNoKey = errors.New("no verification key")
)
