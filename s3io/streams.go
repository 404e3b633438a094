package s3io

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/streamtier/streamtier/manifest"
)

// Kind is an S3 request kind as S3 bills it: PUT, GET, HEAD, LIST and DELETE requests are
// priced differently (DELETE is free, HEAD costs as a GET).
type Kind int

// Request kinds.
const (
	KindPut Kind = iota
	KindGet
	KindHead
	KindList
	KindDelete
	// NumKinds counts the kinds; it sizes per-kind arrays.
	NumKinds
)

// String names the kind as a metric label.
func (k Kind) String() string {
	switch k {
	case KindPut:
		return "put"
	case KindGet:
		return "get"
	case KindHead:
		return "head"
	case KindList:
		return "list"
	case KindDelete:
		return "delete"
	}
	return "unknown"
}

// kindOf is the request kind of one request of op.
func kindOf(op Op) Kind {
	switch op {
	case OpPutFragment, OpPutObject:
		return KindPut
	case OpGetObject, OpGetRange:
		return KindGet
	case OpHead, OpEnsureBucket: // HeadBucket (a CreateBucket is counted as one too: rare)
		return KindHead
	case OpDeleteObjects:
		return KindDelete
	}
	return KindList // OpList, OpProbe
}

// StreamRequests counts one stream's S3 requests by kind.
type StreamRequests [NumKinds]uint64

// streamTally counts requests per stream. A request is the stream's when its key (or list
// prefix) lies under the stream's prefix <key_prefix>/<h4>/<stream>/ (with the right h4);
// requests of no stream (the bucket probe, a listing of every stream, a delete batch
// spanning streams) are counted under "".
type streamTally struct {
	keyPrefix string
	m         sync.Map // stream -> *[NumKinds]atomic.Uint64
}

func (t *streamTally) add(key string, op Op) {
	stream := streamOf(t.keyPrefix, key)
	v, ok := t.m.Load(stream)
	if !ok {
		v, _ = t.m.LoadOrStore(stream, new([NumKinds]atomic.Uint64))
	}
	v.(*[NumKinds]atomic.Uint64)[kindOf(op)].Add(1)
}

func (t *streamTally) snapshot() map[string]StreamRequests {
	out := map[string]StreamRequests{}
	t.m.Range(func(k, v any) bool {
		var r StreamRequests
		for i := range r {
			r[i] = v.(*[NumKinds]atomic.Uint64)[i].Load()
		}
		out[k.(string)] = r
		return true
	})
	return out
}

// streamOf is the stream whose prefix key (an object key or a list prefix) lies under, ""
// for none.
func streamOf(keyPrefix, key string) string {
	if keyPrefix == "" {
		keyPrefix = manifest.DefaultKeyPrefix
	}
	rest, ok := strings.CutPrefix(key, keyPrefix+"/")
	if !ok {
		return ""
	}
	h4, rest, ok := strings.Cut(rest, "/")
	if !ok || len(h4) != 4 {
		return ""
	}
	stream, _, ok := strings.Cut(rest, "/")
	if !ok || stream == "" {
		return "" // "<prefix>/<h4>/" or "<prefix>/<h4>/partial": several streams may match
	}
	sum := sha256.Sum256([]byte(stream))
	if hex.EncodeToString(sum[:2]) != h4 {
		return ""
	}
	return stream
}

// batchKey is a key standing for a delete batch: its first key when every key of the batch
// is of one stream, else "" (no stream).
func batchKey(keyPrefix string, objs []types.ObjectIdentifier) string {
	if len(objs) == 0 || objs[0].Key == nil {
		return ""
	}
	first := *objs[0].Key
	stream := streamOf(keyPrefix, first)
	for _, o := range objs[1:] {
		if o.Key == nil || streamOf(keyPrefix, *o.Key) != stream {
			return ""
		}
	}
	return first
}
