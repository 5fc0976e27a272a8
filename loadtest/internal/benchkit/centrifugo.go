package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/heraldgw/herald/loadtest/internal/cfoutbox"
)

// CentrifugoAPI calls method of the server API of the Centrifugo at base
// (http://host:port) with body, authenticated by apiKey, and decodes its
// result into out (nil: the result is not read). An error answer is an
// error.
func CentrifugoAPI(ctx context.Context, hc *http.Client, base, apiKey, method string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/"+method, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("X-API-Key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("centrifugo API %s: %w", method, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var reply struct {
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		Result json.RawMessage `json:"result"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(rb, &reply) != nil {
		return fmt.Errorf("centrifugo API %s: %s: %s", method, resp.Status, rb)
	}
	if reply.Error != nil {
		return fmt.Errorf("centrifugo API %s: %d %s", method, reply.Error.Code, reply.Error.Message)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(reply.Result, out)
}

// CentrifugoConfig is the part of Centrifugo v6's JSON config the load
// tests write (key names as in v6.9.1's internal/config and
// internal/configtypes); NewCentrifugoConfig fills it.
type CentrifugoConfig struct {
	HTTPServer struct {
		Address string `json:"address"`
		Port    int    `json:"port"`
	} `json:"http_server"`
	Log struct {
		Level string `json:"level"`
	} `json:"log"`
	UsageStats struct {
		Disabled bool `json:"disabled"`
	} `json:"usage_stats"`
	Health struct {
		Enabled bool `json:"enabled"`
	} `json:"health"`
	// Prometheus serves /metrics on the client port.
	Prometheus struct {
		Enabled bool `json:"enabled"`
	} `json:"prometheus"`
	HTTPAPI struct {
		Key string `json:"key"`
	} `json:"http_api"`
	Client struct {
		Token struct {
			HMACSecretKey string `json:"hmac_secret_key"`
		} `json:"token"`
		// ChannelLimit bounds a connection's subscriptions (0: Centrifugo's
		// default, 128).
		ChannelLimit int `json:"channel_limit,omitempty"`
	} `json:"client"`
	Channel struct {
		Namespaces []CentrifugoNamespace `json:"namespaces"`
	} `json:"channel"`
	Consumers []cfoutbox.ConsumerConfig `json:"consumers,omitempty"`
}

// CentrifugoNamespace is one of the config's channel namespaces.
type CentrifugoNamespace struct {
	Name                    string `json:"name"`
	HistorySize             int    `json:"history_size"`
	HistoryTTL              string `json:"history_ttl"`
	AllowSubscribeForClient bool   `json:"allow_subscribe_for_client"`
}

// NewCentrifugoConfig is the config of a Centrifugo serving on
// 127.0.0.1:port with /health and no usage stats, logging at level, its
// server API behind apiKey, HS256 client tokens signed with hmacSecret,
// and one namespace ns whose channels clients subscribe to themselves,
// each keeping its last history publications for 300 s (so that every
// publication carries its offset, as Herald's do).
func NewCentrifugoConfig(port int, level, apiKey, hmacSecret, ns string, history int) *CentrifugoConfig {
	c := &CentrifugoConfig{}
	c.HTTPServer.Address, c.HTTPServer.Port = "127.0.0.1", port
	c.Log.Level = level
	c.UsageStats.Disabled = true
	c.Health.Enabled = true
	c.HTTPAPI.Key = apiKey
	c.Client.Token.HMACSecretKey = hmacSecret
	c.Channel.Namespaces = []CentrifugoNamespace{{Name: ns, HistorySize: history, HistoryTTL: "300s", AllowSubscribeForClient: true}}
	return c
}

// JSON is the config as Centrifugo reads it from its config file.
func (c *CentrifugoConfig) JSON() ([]byte, error) { return json.MarshalIndent(c, "", "  ") }
