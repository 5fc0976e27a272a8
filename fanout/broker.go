package fanout

import "context"

// Handler receives every publication of the channels a node subscribed to,
// in offset order per channel. It must not block.
type Handler interface {
	HandlePublication(p Publication)
}

// Recovery is the answer to a resume request.
type Recovery struct {
	// Publications after the asked position, in order, when Recovered
	// (the first Recover's limit of them, when it was given one).
	Publications []Publication
	// Top is the channel's current position (offset 0 when empty).
	Top Position
	// Recovered is false when the history no longer holds everything after
	// the asked position or the epoch changed; then Publications is empty
	// and the client must refresh authoritative state.
	Recovered bool
}

// Broker is the contract between the outbox Worker, the gateway and a
// message transport (in-memory for one node, Redis for many).
type Broker interface {
	// Publish appends msg to its channel's history and fans it out to every
	// node's handler. It returns once the broker accepted the message.
	// Publish is idempotent by message ID: a msg whose ID is still in the
	// channel's retained history (HistorySize, HistoryTTL) appends and fans
	// out nothing, and is answered with the publication already there (its
	// position and stored message), so a publish retried after its answer
	// was lost leaves one entry. Once the ID has left the history it is
	// appended again, at a new offset. A fenced message (see Fence) may be
	// refused with ErrStaleFence before that check.
	Publish(ctx context.Context, msg Message) (Publication, error)
	// Recover returns what was published on key after since: all of it,
	// or with limit > 0 at most the first limit publications (a page; ask
	// again from the last one for the next). Recovered says whether the
	// history still holds everything after since.
	Recover(ctx context.Context, key Key, since Position, limit int) (Recovery, error)
	// Subscribe and Unsubscribe declare this node's interest in a channel,
	// so multi-node brokers only carry what the node needs. The Hub calls
	// them on its first and last local subscriber.
	Subscribe(ctx context.Context, key Key) error
	Unsubscribe(ctx context.Context, key Key) error
	// Ping reports whether the broker answers (for /readyz).
	Ping(ctx context.Context) error
	// Start begins handing this node's publications to h (normally the
	// Hub) until ctx ends or Stop is called. Publish works before Start:
	// it still appends to the history. A second Start fails.
	Start(ctx context.Context, h Handler) error
	// Stop ends the broker's background work and releases its resources.
	// It is safe to call twice and before Start.
	Stop()
}

// PreparedHandler is implemented by a Handler that can take a publication
// whose envelope is already encoded (the Hub does). A broker that receives
// envelopes from elsewhere (redisbroker.Broker) hands them over with
// HandlePrepared, so the envelope is encoded once per cluster rather than
// once per node. It must not block.
type PreparedHandler interface {
	HandlePrepared(p *Prepared)
}

// RunPublisher is implemented by a Broker that can publish a run of one
// channel's messages at once (MemoryBroker): each as Publish would, in
// order, with the run handed to the node's handler together (RunHandler),
// so that a subscriber that takes runs (RunSubscriber) writes them to its
// client in one write rather than one write each. A publisher with
// several messages of one channel ready (the outbox Worker's batch) may
// use it in place of calling Publish for each.
type RunPublisher interface {
	// PublishRun publishes msgs, which must all have the same Key, in
	// order, writing each one's publication to out[i] (len(out) ≥
	// len(msgs)); a message whose ID is still in the channel's history is
	// answered with the publication already there, as by Publish. It stops
	// at the first message that fails and returns how many came before it
	// and its error: none after it is published. A message of another
	// channel than msgs[0] fails with ErrInvalidMessage.
	PublishRun(ctx context.Context, msgs []Message, out []Publication) (int, error)
}

// RunHandler is implemented by a Handler that can take a run of one
// channel's publications at once, in offset order (the Hub does). It must
// not block.
type RunHandler interface {
	HandlePublications(ps []Publication)
}

// Resyncer is implemented by a Handler that wants to know when the broker
// may have lost publications of a channel in transit to this node: after
// redisbroker.Broker's pub/sub connection was lost and re-established, it calls
// HandleResync once for every channel this node is subscribed to, after the
// new subscription is confirmed. The publications are not lost from the
// history: a receiver resumes with Recover from the last position it
// delivered (the Hub forwards the call to subscribers that implement
// ResyncSubscriber). It must not block. The in-memory broker never calls it.
type Resyncer interface {
	HandleResync(key Key)
}
