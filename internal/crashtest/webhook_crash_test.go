package crashtest

import (
	"cmp"
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	hookCrashRecords    = 2000
	hookCrashChannels   = 50
	hookCrashProducers  = 5
	hookCrashKills      = 4
	hookCrashPartitions = 16
	// hookCrashPace is the time between two records of one producer: the
	// records are staged over about hookCrashRecords / hookCrashProducers ×
	// hookCrashPace = 10s, long enough for every kill to land mid-batch.
	hookCrashPace = 25 * time.Millisecond
	// hookCrashKillGap spaces the kills: kill k comes no sooner than
	// k × hookCrashKillGap after staging began, so they spread over it.
	hookCrashKillGap = 2 * time.Second
	// hookCrashAnswer is how long the receiver takes to answer: batches
	// stay in flight long enough to be caught half delivered.
	hookCrashAnswer = 10 * time.Millisecond
)

// hookChannel is the name of channel i of the webhook crash test.
func hookChannel(i int) string { return fmt.Sprintf("hooks/c%02d", i) }

// TestFeedSIGKILLWebhook runs two `herald feed` processes with a webhook
// handler over one outbox while records are staged across 50 channels,
// and kills one of them with SIGKILL four times, each time while it holds
// a claimed batch of the webhook handler some of whose records the
// receiver already has, restarting it after each kill. Every record must
// reach the receiver, each channel's first arrivals in staging order,
// every copy with the same webhook-id and body and a valid signature, and
// the duplicates only the records the killed processes held.
func TestFeedSIGKILLWebhook(t *testing.T) {
	ctx, dbURL, redisURL, prefix := crashSetup(t)
	rc := newHookReceiver(hookCrashAnswer)
	srv := httptest.NewServer(rc)
	defer srv.Close()
	// A killed process's batches wait out the 2s lease (crashLease): with
	// more partitions than the default 4, the other channels keep flowing
	// to both processes meanwhile.
	runHerald(t, time.Minute, "outbox", "partitions", "--database-url", dbURL, "--set", strconv.Itoa(hookCrashPartitions))
	args := feedArgs(dbURL, redisURL, prefix, "--handlers", hookHandlers(srv.URL+"/hook", "1s"))
	survivor := startFeed(t, "feed-0", args)
	victim := startFeed(t, "feed-1", args)

	pool := openPool(t, dbURL, hookCrashProducers+2)
	log := newStagedLog()
	start := time.Now()
	staged := make(chan error, hookCrashProducers)
	var producers sync.WaitGroup
	pctx, pcancel := context.WithCancel(ctx)
	for p := range hookCrashProducers {
		producers.Go(func() { staged <- produceHookRecords(pctx, pool, p, log) })
	}
	t.Cleanup(func() { pcancel(); producers.Wait() })

	// Each kill: freeze the victim's process group with SIGSTOP, read the
	// webhook handler's records it holds claimed, and kill it with SIGKILL
	// if the receiver already has some but not all of them (the batch is
	// half delivered: its completion cannot have been written, so the kill
	// must cause duplicates) — or, after hookCrashKillGap/2 of trying, all
	// of them; otherwise SIGCONT and look again.
	var held [][]string // per kill, the records the victim held
	for k := range hookCrashKills {
		var hs []string
		var trying time.Time
		waitUntil(t, 60*time.Second, 3*time.Millisecond, fmt.Sprintf("kill %d: %s holding a half-delivered batch", k+1, victim.p.name), func() (bool, error) {
			select {
			case err := <-staged:
				if err != nil {
					t.Fatalf("producer: %v", err)
				}
				staged <- nil
			default:
			}
			if time.Since(start) < time.Duration(k+1)*hookCrashKillGap {
				return false, nil
			}
			if trying.IsZero() {
				trying = time.Now()
			}
			ids, err := hookHeld(ctx, pool, victim.owner)
			if err != nil || len(ids) == 0 {
				return false, cmp.Or(err, fmt.Errorf("%s holds nothing", victim.p.name))
			}
			victim.p.signal(t, syscall.SIGSTOP)
			ids, err = hookHeld(ctx, pool, victim.owner)
			got := rc.received(ids)
			if err != nil || got == 0 || (got == len(ids) && time.Since(trying) < hookCrashKillGap/2) {
				victim.p.signal(t, syscall.SIGCONT)
				return false, cmp.Or(err, fmt.Errorf("%s frozen holding %d records, %d received", victim.p.name, len(ids), got))
			}
			victim.p.kill(t)
			hs = ids
			return true, nil
		})
		held = append(held, hs)
		t.Logf("kill %d: SIGKILLed %s (%s) %v after staging began, holding %d claimed records of which the receiver had %d; %d staged so far",
			k+1, victim.p.name, victim.owner, time.Since(start).Round(time.Millisecond), len(hs), rc.received(hs), log.count())
		victim = startFeed(t, fmt.Sprintf("feed-1-restart%d", k+1), args)
	}

	producers.Wait()
	stagedIn := log.lastAt.Sub(start)
	close(staged)
	for err := range staged {
		if err != nil {
			t.Fatalf("producer: %v", err)
		}
	}
	if n := log.count(); n != hookCrashRecords {
		t.Fatalf("staged %d records, want %d", n, hookCrashRecords)
	}
	t.Logf("staged %d records over %d channels in %v", hookCrashRecords, hookCrashChannels, stagedIn.Round(time.Millisecond))

	waitUntil(t, 2*time.Minute, 50*time.Millisecond, "every record dispatched by the webhook handler", func() (bool, error) {
		var dispatched, dead int
		err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'dispatched'), count(*) FILTER (WHERE state = 'dead_letter')
			FROM herald.outbox_records WHERE handler = 'hooks'`).Scan(&dispatched, &dead)
		if err != nil {
			return false, err
		}
		if dead > 0 {
			t.Fatalf("%d records dead-lettered for the webhook handler", dead)
		}
		return dispatched == hookCrashRecords, fmt.Errorf("%d dispatched", dispatched)
	})
	t.Logf("all %d records dispatched to the webhook %v after staging began", hookCrashRecords, time.Since(start).Round(time.Millisecond))
	for _, f := range []feedNode{survivor, victim} {
		if !f.p.running() {
			t.Fatalf("%s exited: %v", f.p.name, f.p.err)
		}
	}
	var parts int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM herald.outbox_partition WHERE handler = 'hooks' AND state = 'active'`).Scan(&parts); err != nil || parts != hookCrashPartitions {
		t.Fatalf("the webhook handler has %d active partitions (%v), want %d", parts, err, hookCrashPartitions)
	}
	checkHookLog(t, rc, log, held)
}

// hookHeld returns the ids of the webhook handler's records a Worker of
// the process that printed owner holds claimed. Each Worker of a process
// has an owner of its own, "<hostname>-<pid>-<random>" (and "/<lane>" for
// its later lanes): the process's are those that share the banner owner's
// "<hostname>-<pid>-".
func hookHeld(ctx context.Context, pool *pgxpool.Pool, owner string) ([]string, error) {
	prefix := owner[:strings.LastIndex(owner, "-")+1]
	rows, err := pool.Query(ctx, `SELECT id::text FROM herald.outbox_records
		WHERE handler = 'hooks' AND state = 'processing' AND starts_with(lease_owner, $1)`, prefix)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// checkHookLog checks the receiver's log against the staged records and
// the records each killed process held.
//
// The bound on duplicates: a process hands a record to the endpoint only
// while it holds the record's batch claimed, and a batch it completed is
// never claimed again. A record is therefore sent twice only when the
// process that sent it died before completing its batch: it was among the
// records that process held when it was killed (held[k], read while the
// process was frozen with SIGSTOP, so it could claim nothing more before
// the SIGKILL). So each record's extra copies are at most the number of
// kills whose held set contains it, and the duplicates in all at most the
// sum of the held sets' sizes.
func checkHookLog(t *testing.T, rc *hookReceiver, log *stagedLog, held [][]string) {
	t.Helper()
	reqs, byID := rc.snapshot()
	heldBy := map[string]int{} // record id → kills whose held set has it
	bound := 0
	for _, hs := range held {
		bound += len(hs)
		for _, id := range hs {
			heldBy[id]++
		}
	}
	dups, dupRecords := 0, 0
	for id, xs := range byID {
		first := reqs[xs[0]]
		for _, x := range xs {
			r := reqs[x]
			if r.bodyID != id || r.body != first.body {
				t.Fatalf("copy %d of %s: body id %q, body %s; first copy's body %s", r.seq, id, r.bodyID, r.body, first.body)
			}
			if !r.signed {
				t.Fatalf("copy %d of %s: the signature does not verify with the secret", r.seq, id)
			}
		}
		if extra := len(xs) - 1; extra > 0 {
			dups += extra
			dupRecords++
			if extra > heldBy[id] {
				t.Fatalf("record %s reached the receiver %d times but was held by %d killed processes: a duplicate away from the kills",
					id, len(xs), heldBy[id])
			}
		}
	}
	for ch, recs := range log.byChannel {
		var firsts []stagedRecord // ordered by first arrival
		for _, r := range recs {
			if len(byID[r.ID]) == 0 {
				t.Fatalf("channel %s: record seq %d (%s) never reached the receiver", ch, r.Seq, r.ID)
			}
			if got := reqs[byID[r.ID][0]].channel; got != ch {
				t.Fatalf("record %s arrived with channel %q, staged on %q", r.ID, got, ch)
			}
			firsts = append(firsts, r)
		}
		slices.SortFunc(firsts, func(a, b stagedRecord) int { return cmp.Compare(byID[a.ID][0], byID[b.ID][0]) })
		for i, r := range firsts {
			if r.Seq != recs[i].Seq {
				t.Fatalf("channel %s: first arrivals out of staging order at position %d: seq %d arrived before seq %d",
					ch, i, r.Seq, recs[i].Seq)
			}
		}
	}
	if len(byID) != hookCrashRecords {
		t.Fatalf("the receiver has %d distinct webhook-ids, want %d", len(byID), hookCrashRecords)
	}
	if dups > bound {
		t.Fatalf("%d duplicates, more than the %d records the killed processes held", dups, bound)
	}
	t.Logf("%d requests for %d records: %d duplicates of %d records, all among the %d records the %d killed processes held; every copy signed, same webhook-id and body",
		len(reqs), len(byID), dups, dupRecords, bound, len(held))
}

// produceHookRecords stages producer p's share: the channels c with
// c % hookCrashProducers == p, their records one after another, in
// transactions of one to four records, one record per hookCrashPace.
func produceHookRecords(ctx context.Context, pool *pgxpool.Pool, p int, log *stagedLog) error {
	var mine []string
	for c := p; c < hookCrashChannels; c += hookCrashProducers {
		mine = append(mine, hookChannel(c))
	}
	return stageShare(ctx, pool, p, log, mine, hookCrashRecords/hookCrashChannels, hookCrashPace)
}
