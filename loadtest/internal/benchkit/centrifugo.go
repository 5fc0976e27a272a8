package benchkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
