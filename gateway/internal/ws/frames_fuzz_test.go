package ws

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/heraldgw/herald/internal/names"
)

// FuzzDecodeFrame: the client frame decoder never panics; it either
// returns a frame that satisfies its op's rules or a typed error whose
// reply is valid JSON with a documented code.
func FuzzDecodeFrame(f *testing.F) {
	for _, seed := range []string{
		`{"id":1,"op":"connect","token":"eyJ.x.y"}`,
		`{"id":2,"op":"subscribe","channel":"orders/1"}`,
		`{"id":3,"op":"subscribe","channel":"orders/1","since":{"offset":7,"epoch":"e1"},"token":"t"}`,
		`{"id":4,"op":"unsubscribe","channel":"orders/1"}`,
		`{"id":5,"op":"publish","channel":"rooms/lobby","type":"chat.message","schema_version":1,"data":{"text":"hi"}}`,
		`{"id":6,"op":"refresh","token":"t"}`,
		`{"id":7,"op":"ping"}`,
		`{"op":"pong"}`,
		`{"id":8,"op":"dance"}`,
		`{"id":"9","op":"ping"}`,
		`{"id":-1,"op":"ping"}`,
		`{"id":1e3,"op":"ping"}`,
		`{"id":18446744073709551616,"op":"ping"}`,
		`{"id":9007199254740991,"op":"ping"}`,
		`{"id":9007199254740992,"op":"ping"}`,
		`{"id":9007199254740993,"op":"subscribe","channel":"orders/1"}`,
		`{"id":18446744073709551615,"op":"ping"}`,
		`{"id":9007199254740992,"op":"dance"}`,
		`{"id":9007199254740992}`,
		`{"id":9007199254740992,"op":"subscribe","channel":7}`,
		`{"id":-9007199254740992,"op":"ping"}`,
		`{"id":-0,"op":"ping"}`,
		`{"id":1.5,"op":"ping"}`,
		`{"id":1.0,"op":"ping"}`,
		`{"id":9.007199254740992e15,"op":"ping"}`,
		`{"id":true,"op":"ping"}`,
		`{"id":null,"op":"ping"}`,
		`{"id":1,"op":"subscribe","channel":"a//b"}`,
		`{"id":1,"op":"subscribe","channel":"orders/1","since":{"offset":-1,"epoch":""}}`,
		`{"id":1,"op":"publish","channel":"x","type":"T","schema_version":0}`,
		`{"id":1,"op":"ping","op":"connect"}`,
		`[]`, `null`, `{}`, `{`, `"x"`, ``, "{\"id\":1,\"op\":\"ping\",\"x\":\"\xff\"}",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := decodeFrame(b)
		if err != nil {
			var fe *frameError
			if !errors.As(err, &fe) || !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v (%T) is not a *frameError wrapping ErrBadFrame", err, err)
			}
			if _, known := ErrorCodes[fe.code]; !known || fe.message == "" {
				t.Fatalf("error code %q message %q", fe.code, fe.message)
			}
			if fe.id > maxFrameID {
				t.Fatalf("error reply echoes id %d, which JavaScript cannot represent", fe.id)
			}
			if reply := encodeError(fe.id, fe.code, fe.message); !json.Valid(reply) {
				t.Fatalf("error reply is not JSON: %q", reply)
			}
			return
		}
		if fr.Op != OpPong && (fr.ID == 0 || fr.ID > maxFrameID) {
			t.Fatalf("frame %+v accepted with id %d, want 1 to 2^53-1", fr, fr.ID)
		}
		switch fr.Op {
		case OpConnect, OpPing, OpPong:
		case OpSubscribe, OpUnsubscribe:
			if names.ValidateChannel(fr.Channel) != nil {
				t.Fatalf("invalid channel %q accepted", fr.Channel)
			}
			if fr.Since != nil && (fr.Since.Epoch == "" || len(fr.Since.Epoch) > maxEpochBytes) {
				t.Fatalf("since %+v accepted", fr.Since)
			}
		case OpPublish:
			if names.ValidateChannel(fr.Channel) != nil || validateType(fr.Type) != nil ||
				fr.SchemaVersion < 1 || !json.Valid(fr.Data) {
				t.Fatalf("publish %+v accepted", fr)
			}
		case OpRefresh:
			if fr.Token == "" {
				t.Fatal("refresh without token accepted")
			}
		default:
			t.Fatalf("op %q accepted", fr.Op)
		}
	})
}

// TestDecodeFrameIDBound: request ids are positive integers below 2^53,
// the integers a JavaScript number holds exactly. Anything else is a
// bad_request error reply without an id (the client could not match an
// id it cannot represent), and the id is never echoed.
func TestDecodeFrameIDBound(t *testing.T) {
	if _, err := decodeFrame([]byte(`{"id":9007199254740991,"op":"ping"}`)); err != nil {
		t.Fatalf("2^53-1 refused: %v", err)
	}
	for _, frame := range []string{
		`{"id":9007199254740992,"op":"ping"}`,
		`{"id":9007199254740993,"op":"connect","token":"t"}`,
		`{"id":18446744073709551615,"op":"subscribe","channel":"orders/1"}`,
		`{"id":9007199254740992,"op":"dance"}`,
		`{"id":9007199254740992}`,
		`{"id":9007199254740992,"op":"subscribe","channel":7}`,
		`{"id":-1,"op":"ping"}`,
		`{"id":1.5,"op":"ping"}`,
		`{"id":1e3,"op":"ping"}`,
	} {
		_, err := decodeFrame([]byte(frame))
		var fe *frameError
		if !errors.As(err, &fe) || fe.code != CodeBadRequest || fe.id != 0 {
			t.Errorf("%s: got %v, want a bad_request error without id", frame, err)
		}
	}
	// A pong carries no id that matters: it is accepted whatever its id.
	if f, err := decodeFrame([]byte(`{"id":9007199254740992,"op":"pong"}`)); err != nil || f.ID != 0 {
		t.Errorf("pong: %+v, %v", f, err)
	}
}
