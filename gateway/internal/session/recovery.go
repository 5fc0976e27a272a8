package session

import "github.com/heraldgw/herald/fanout"

// RecoveryReason says why a subscription did not recover (recovered:
// false): the "reason" of a subscribe result and of an SSE subscribed
// event. Every one is declared once, below, with what a client learns
// from it; docs/protocol.md's table and the JS client's fixture are
// generated from this table (the gateway's TestVocabulary* tests).
type RecoveryReason struct {
	Code string
	// Doc is what docs/protocol.md says of it.
	Doc string
}

// The reasons a subscription starts without recovering.
var (
	RecoveryNoPosition = RecoveryReason{"no_position",
		"no position was given (`since` left out; on SSE, a cursor that does not cover the channel, such as one of two channels of the stream whose names share the cursor's hash: see The cursor): the subscription starts live, there was nothing to recover"}
	RecoveryEpochChanged = RecoveryReason{"epoch_changed",
		"the channel's history was lost or replaced since the position was taken (its `epoch` changed: the channel went without publications longer than the history TTL, or the broker lost its data); offsets of the old epoch mean nothing"}
	RecoveryHistoryExceeded = RecoveryReason{"history_exceeded",
		"more publications were made after the position than the channel's history holds (`history.size` in the `connect` reply): the oldest missing ones are gone"}
	RecoveryPositionAhead = RecoveryReason{"position_ahead",
		"the position's offset is ahead of the channel's last publication in the same epoch: the server never published it (a position of another channel, tenant or server, or one made up)"}
)

// recoveryReasons lists every recoveryReason in the order docs/protocol.md
// shows them.
var RecoveryReasons = []RecoveryReason{
	RecoveryNoPosition, RecoveryEpochChanged, RecoveryHistoryExceeded, RecoveryPositionAhead,
}

// notRecovered says why a subscription asked to resume from since (nil:
// live) did not recover, given the broker's answer rec.
func notRecovered(since *fanout.Position, rec fanout.Recovery) RecoveryReason {
	switch {
	case since == nil:
		return RecoveryNoPosition
	case since.Epoch != rec.Top.Epoch:
		return RecoveryEpochChanged
	case since.Offset > rec.Top.Offset:
		return RecoveryPositionAhead
	}
	return RecoveryHistoryExceeded
}
