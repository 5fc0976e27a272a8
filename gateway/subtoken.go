package gateway

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/heraldgw/herald/auth"
)

// subTokenChannel reads the channel a subscription token names
// (herald.channel) without verifying it, only to pair each sub_token
// query parameter with its channel; the Authorizer verifies the token
// before it allows anything. Errors never contain the token.
func subTokenChannel(token string) (string, error) {
	if len(token) > auth.MaxTokenBytes {
		return "", fmt.Errorf("longer than %d bytes", auth.MaxTokenBytes)
	}
	_, rest, ok := strings.Cut(token, ".")
	payload, sig, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || strings.Contains(sig, ".") {
		return "", errors.New("not a JWT (three dot-separated parts)")
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return "", errors.New("the payload is not base64url")
	}
	var c struct {
		Herald *struct {
			Channel string `json:"channel"`
		} `json:"herald"`
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		return "", errors.New("the payload is not a JSON object with a herald claim")
	}
	if c.Herald == nil || c.Herald.Channel == "" {
		return "", errors.New("it names no channel (herald.channel): not a subscription token")
	}
	return c.Herald.Channel, nil
}
