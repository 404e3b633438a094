package admin

import (
	"time"

	"github.com/streamtier/streamtier/s3io"
)

// Prices is the price table the cost projection uses, in dollars. The defaults are AWS S3
// Standard's published prices (us-east-1): PUT, COPY, POST and LIST requests $0.005 per
// 1000, GET and every other request (HEAD among them) $0.0004 per 1000, DELETE free,
// storage $0.023 per GB-month (the first 50 TB; AWS's GB is 2^30 bytes).
type Prices struct {
	PutPer1000        float64
	ListPer1000       float64
	GetPer1000        float64 // also HEAD
	DeletePer1000     float64
	StoragePerGBMonth float64
}

// DefaultPrices are S3 Standard's published prices (see Prices).
var DefaultPrices = Prices{PutPer1000: 0.005, ListPer1000: 0.005, GetPer1000: 0.0004, StoragePerGBMonth: 0.023}

// month is the month of the projection: 30 days.
const month = 30 * 24 * time.Hour

// per1000 is the price of one request of kind k.
func (p Prices) per1000(k s3io.Kind) float64 {
	switch k {
	case s3io.KindPut:
		return p.PutPer1000
	case s3io.KindList:
		return p.ListPer1000
	case s3io.KindDelete:
		return p.DeletePer1000
	}
	return p.GetPer1000
}

// CostReport is a stream's (or the node's) S3 requests by kind since the node started,
// the bytes it stores, and the monthly cost they project to: the request rate seen so far
// kept up for 30 days, plus the bytes stored now for a month, at the configured prices.
type CostReport struct {
	Requests    map[string]uint64 `json:"requests"` // put, get, head, list, delete
	StoredBytes uint64            `json:"stored_bytes"`
	// Monthly projections in dollars.
	RequestsPerMonthUSD float64 `json:"requests_usd_per_month"`
	StoragePerMonthUSD  float64 `json:"storage_usd_per_month"`
	TotalPerMonthUSD    float64 `json:"total_usd_per_month"`
}

// cost projects requests seen over uptime and stored bytes to a month at prices.
func cost(r s3io.StreamRequests, stored uint64, uptime time.Duration, p Prices) *CostReport {
	c := &CostReport{Requests: map[string]uint64{}, StoredBytes: stored}
	for k := s3io.Kind(0); k < s3io.NumKinds; k++ {
		c.Requests[k.String()] = r[k]
	}
	c.RequestsPerMonthUSD, c.StoragePerMonthUSD = monthly(r, stored, uptime, p)
	c.TotalPerMonthUSD = c.RequestsPerMonthUSD + c.StoragePerMonthUSD
	return c
}

// monthly is the monthly cost in dollars of requests seen over uptime (kept up for 30
// days) and of stored bytes (kept for a month), at prices.
func monthly(r s3io.StreamRequests, stored uint64, uptime time.Duration, p Prices) (requestsUSD, storageUSD float64) {
	scale := 0.0
	if uptime > 0 {
		scale = float64(month) / float64(uptime)
	}
	for k := s3io.Kind(0); k < s3io.NumKinds; k++ {
		requestsUSD += float64(r[k]) * scale * p.per1000(k) / 1000
	}
	return requestsUSD, float64(stored) / (1 << 30) * p.StoragePerGBMonth
}
