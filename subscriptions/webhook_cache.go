package subscriptions

import (
	"sync"
	"time"
)

// webhookKey identifies one cached webhook answer. The tenant is part of
// the key, so an answer for one tenant never serves another.
type webhookKey struct {
	tenant, subject, channel string
	// sid and jti of the connection token: sent to the webhook, so its
	// answer may depend on them, and part of the key for that reason.
	sid, jti string
}

// webhookAnswer is a decoded webhook answer.
type webhookAnswer struct {
	allow  bool
	ttl    time.Duration
	reason string
}

type cachedAnswer struct {
	webhookAnswer
	expires time.Time
}

// answerCache is a bounded map of answers with expiry. When full, it drops
// expired entries it comes across and, failing that, an arbitrary one.
type answerCache struct {
	mu   sync.Mutex
	max  int
	byID map[webhookKey]cachedAnswer
}

func newAnswerCache(max int) *answerCache {
	return &answerCache{max: max, byID: make(map[webhookKey]cachedAnswer)}
}

// get returns the live answer for k and when it expires.
func (c *answerCache) get(k webhookKey, now time.Time) (cachedAnswer, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.byID[k]
	if !ok {
		return cachedAnswer{}, false
	}
	if !now.Before(a.expires) {
		delete(c.byID, k)
		return cachedAnswer{}, false
	}
	return a, true
}

// evictScan bounds how many entries put inspects for expired ones.
const evictScan = 64

// maxCachedSubject bounds the length of the subject, sid and jti of
// cached answers together, so the
// cache's memory stays bounded by WebhookCacheSize times a small constant.
const maxCachedSubject = 512

// put stores a for k (unless k's subject is too long to cache) and returns
// it with its expiry.
func (c *answerCache) put(k webhookKey, a webhookAnswer, now time.Time) cachedAnswer {
	ca := cachedAnswer{webhookAnswer: a, expires: now.Add(a.ttl)}
	if len(k.subject)+len(k.sid)+len(k.jti) > maxCachedSubject {
		return ca
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[k]; !ok && len(c.byID) >= c.max {
		var victim webhookKey
		found, scanned := false, 0
		for key, v := range c.byID {
			if !found {
				victim, found = key, true
			}
			if !now.Before(v.expires) {
				delete(c.byID, key)
			}
			if scanned++; scanned >= evictScan {
				break
			}
		}
		if len(c.byID) >= c.max {
			delete(c.byID, victim)
		}
	}
	c.byID[k] = ca
	return ca
}

func (c *answerCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}
