package ws

import (
	"fmt"
	"slices"
)

// Requests in flight: the async ops (subscribe, publish, refresh) from the
// moment the reader hands them off until their reply is queued. At most
// MaxInflight run at once, and no two share an id, so every reply names
// one request. An idle connection holds no list.

// startRequest counts a request of id in flight; it reports false when
// MaxInflight are running already.
func (w *Conn) startRequest(id uint64) bool {
	if w.inflight.Add(1) > int32(w.c.Bounds().MaxInflight) {
		w.inflight.Add(-1)
		return false
	}
	w.idsMu.Lock()
	w.ids = append(w.ids, id)
	w.idsMu.Unlock()
	return true
}

// requestDone ends the request of id, once its reply is queued.
func (w *Conn) requestDone(id uint64) {
	w.idsMu.Lock()
	for i, v := range w.ids {
		if v == id {
			w.ids[i] = w.ids[len(w.ids)-1]
			w.ids = w.ids[:len(w.ids)-1]
			break
		}
	}
	if len(w.ids) == 0 {
		w.ids = nil
	}
	w.idsMu.Unlock()
	w.inflight.Add(-1)
}

// idInFlight reports whether a request of id is in flight.
func (w *Conn) idInFlight(id uint64) bool {
	w.idsMu.Lock()
	defer w.idsMu.Unlock()
	return slices.Contains(w.ids, id)
}

// refuseDuplicateID answers a request whose id is that of one in flight.
func (w *Conn) refuseDuplicateID(f *ClientFrame) {
	w.replyError(f.ID, f.Op, CodeDuplicateID, fmt.Sprintf(
		"request %d is still in flight: give every request an id of its own (its reply follows)", f.ID))
}
