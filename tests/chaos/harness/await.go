package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// The harness asks the running node's admin endpoint POST /streams/{id}/await (plain HTTP:
// the soak judges the node from outside) at a few moments of each run, and hands every
// answer that says something about durability to the checker as an acknowledgement, next
// to the manifest records the etcd watch sees.

// awaitTimeout bounds one await during a cycle: short, the cycle's faults wait behind it.
const awaitTimeout = time.Second

// awaitAnswer is what the harness reads of an await answer.
type awaitAnswer struct {
	Offset        uint64  `json:"offset"`
	Persisted     bool    `json:"persisted"`
	PersistedNext uint64  `json:"persisted_next"`
	Nothing       bool    `json:"nothing_committed"`
	Waited        float64 `json:"waited_seconds"`
	Class         string  `json:"error_class"`
	Error         string  `json:"error"`
}

// awaitAll asks the node, for every stream at once, to await the offset pick chooses (an
// offset or "committed"; ok false: none for that stream), and records each answer.
func (w *world) awaitAll(ctx context.Context, pick func(i int) (string, bool), timeout time.Duration) {
	base := w.node.client.Base
	var wg sync.WaitGroup
	for i := range w.logs {
		off, ok := pick(i)
		if !ok {
			continue
		}
		wg.Add(1)
		go func(id string) { // ends with the answer (bounded by the HTTP client's timeout)
			defer wg.Done()
			w.await(ctx, base, id, off, timeout)
		}(w.streams[i])
	}
	wg.Wait()
}

// awaitActions are the cycle's durability questions to the node (their answers are
// acknowledgements): early, the last offset the log had before this cycle's appends (the
// earlier runs' data, mostly persisted by then); midway, halfway from there to where the
// live writer has written by then; late, everything committed (the node resolves it).
func (w *world) awaitActions(plan time.Duration) []action {
	before := make([]uint64, len(w.logs))
	for i, l := range w.logs {
		before[i] = l.end
	}
	at := func(i int, f func(b, e uint64) uint64) (string, bool) {
		b, e := before[i], w.logEnd(i)
		if b == 0 || e == 0 || b > e {
			return "", false
		}
		return fmt.Sprint(f(b, e)), true
	}
	ask := func(pick func(i int) (string, bool)) func(context.Context) error {
		return func(ctx context.Context) error {
			w.awaitAll(ctx, pick, awaitTimeout)
			return nil
		}
	}
	return []action{
		{plan * 35 / 100, "await the earlier end", ask(func(i int) (string, bool) { return at(i, func(b, _ uint64) uint64 { return b - 1 }) })},
		{plan * 65 / 100, "await halfway", ask(func(i int) (string, bool) { return at(i, func(b, e uint64) uint64 { return b - 1 + (e-b)/2 }) })},
		{plan * 9 / 10, "await committed", ask(func(int) (string, bool) { return "committed", true })},
	}
}

// await asks for one stream's offset and records the answer: persisted (an
// acknowledgement, judged against the record read from etcd right after it), in a declared
// gap (judged), or anything else (noted). It returns the answer (ok false: no answer).
func (w *world) await(ctx context.Context, base, id, offset string, timeout time.Duration) (awaitAnswer, bool) {
	q := url.Values{"offset": {offset}, "timeout": {timeout.String()}}
	hc := &http.Client{Timeout: timeout + 5*time.Second}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/streams/"+url.PathEscape(id)+"/await?"+q.Encode(), nil)
	if err != nil {
		w.note("await", id, "offset %s: %v", offset, err)
		return awaitAnswer{}, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		w.note("await", id, "offset %s: no answer: %v", offset, err)
		w.mu.Lock()
		w.awaits["no-answer"]++
		w.mu.Unlock()
		return awaitAnswer{}, false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	var a awaitAnswer
	if err == nil {
		err = json.Unmarshal(body, &a)
	}
	if err != nil {
		w.note("await", id, "offset %s: HTTP %d, answer not JSON: %v: %s", offset, resp.StatusCode, err, oneLine(string(body)))
		return awaitAnswer{}, false
	}
	outcome := a.Class
	if a.Persisted {
		outcome = "persisted"
	}
	w.mu.Lock()
	w.awaits[outcome]++
	w.mu.Unlock()
	switch {
	case resp.StatusCode == http.StatusOK && a.Persisted && a.Nothing:
		w.note("await", id, "offset %s: nothing committed", offset)
	case resp.StatusCode == http.StatusOK && a.Persisted:
		observed := w.observeRecord(ctx, id)
		w.note("await", id, "offset %s: persisted up to %d (persisted next %d, waited %.3fs; record read after: %t)", offset, a.Offset, a.PersistedNext, a.Waited, observed)
		w.chk.AwaitPersisted(id, a.Offset, observed)
	case resp.StatusCode == http.StatusConflict && a.Class == "in_gap":
		w.note("await", id, "offset %s: %d in a declared gap: %s", offset, a.Offset, a.Error)
		w.chk.AwaitInGap(id, a.Offset)
	default:
		w.note("await", id, "offset %s: HTTP %d %s: %s", offset, resp.StatusCode, a.Class, oneLine(a.Error))
	}
	return a, true
}

// observeRecord reads stream's manifest record from etcd once (linearizable, a short
// deadline: etcd may be down) and hands it to the checker; false when it could not.
func (w *world) observeRecord(ctx context.Context, stream string) bool {
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := w.cli.Get(gctx, etcdPrefix+"/streams/"+stream+"/manifest")
	if err != nil || len(resp.Kvs) == 0 {
		return false
	}
	w.chk.Observe(stream, resp.Kvs[0])
	return true
}

// finalAwaits asks, once every stream's lag is zero, for each log's last offset: each must
// answer persisted at once.
func (w *world) finalAwaits(ctx context.Context) {
	for i, l := range w.logs {
		if l.end == 0 {
			continue
		}
		id := w.streams[i]
		a, ok := w.await(ctx, w.node.client.Base, id, fmt.Sprint(l.end-1), 5*time.Second)
		if !ok || !a.Persisted {
			w.chk.Report(id, "await-not-persisted", "with the lag zero, await_offset %d (the log's last offset) answered %q: %s", l.end-1, a.Class, strings.TrimSpace(a.Error))
		}
	}
}
