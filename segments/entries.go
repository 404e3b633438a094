package segments

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Compression is a sub-batch's codec id as osiris stores it in the entry header. The log
// never compresses or decompresses: callers supply compressed bytes and the id.
type Compression uint8

// Codec ids of sub-batch entries.
const (
	CompressionNone   Compression = 0
	CompressionGzip   Compression = 1
	CompressionSnappy Compression = 2
	CompressionLZ4    Compression = 3
	CompressionZstd   Compression = 4
	CompressionUser   Compression = 7
)

// Sizes of entry headers in the data section.
const (
	simpleEntryHeaderSize = 4
	subBatchHeaderSize    = 11
	maxSimpleBodyLen      = math.MaxInt32 // low 31 bits of the simple entry header
)

// Entry is one entry of a chunk's data section: a simple entry holding one record, or a
// sub-batch holding Records records, possibly compressed.
type Entry struct {
	SubBatch        bool
	Compression     Compression // sub-batch only
	Records         uint16      // sub-batch only: records (offsets) it holds
	UncompressedLen uint32      // sub-batch only: length of the records once decompressed
	Body            []byte      // simple: the record; sub-batch: the (compressed) records
}

// SimpleEntry is an entry holding one record.
func SimpleEntry(body []byte) Entry { return Entry{Body: body} }

// UncompressedSubBatch is a sub-batch entry holding records without compression: each record
// is laid out as a simple entry (u32 length, then the bytes), as RabbitMQ stream clients do.
// It refuses no records, more than 65535 and a record longer than 2^31-1 bytes.
func UncompressedSubBatch(records [][]byte) (Entry, error) {
	if len(records) == 0 || len(records) > math.MaxUint16 {
		return Entry{}, fmt.Errorf("sub-batch of %d records: want 1 to %d", len(records), math.MaxUint16)
	}
	n := 0
	for _, r := range records {
		n += simpleEntryHeaderSize + len(r)
	}
	body := make([]byte, 0, n)
	for i, r := range records {
		if len(r) > maxSimpleBodyLen {
			return Entry{}, fmt.Errorf("sub-batch record %d: %d bytes, limit is %d", i, len(r), maxSimpleBodyLen)
		}
		body = binary.BigEndian.AppendUint32(body, uint32(len(r)))
		body = append(body, r...)
	}
	return Entry{SubBatch: true, Compression: CompressionNone, Records: uint16(len(records)),
		UncompressedLen: uint32(len(body)), Body: body}, nil
}

// CompressedSubBatch is a sub-batch entry whose body the caller compressed with codec c.
func CompressedSubBatch(c Compression, records uint16, uncompressedLen uint32, body []byte) Entry {
	return Entry{SubBatch: true, Compression: c, Records: records, UncompressedLen: uncompressedLen, Body: body}
}

// RecordCount is the number of offsets the entry uses.
func (e Entry) RecordCount() uint32 {
	if e.SubBatch {
		return uint32(e.Records)
	}
	return 1
}

// EncodedLen is the entry's size in the data section.
func (e Entry) EncodedLen() int {
	if e.SubBatch {
		return subBatchHeaderSize + len(e.Body)
	}
	return simpleEntryHeaderSize + len(e.Body)
}

// check says what makes the entry impossible to encode, or nil.
func (e Entry) check() error {
	if !e.SubBatch {
		if len(e.Body) > maxSimpleBodyLen {
			return fmt.Errorf("simple entry of %d bytes: limit is %d", len(e.Body), maxSimpleBodyLen)
		}
		return nil
	}
	if e.Compression > 7 {
		return fmt.Errorf("sub-batch compression %d: the field has 3 bits", e.Compression)
	}
	if e.Records == 0 {
		return fmt.Errorf("sub-batch with zero records")
	}
	if uint64(len(e.Body)) > math.MaxUint32 {
		return fmt.Errorf("sub-batch of %d bytes: limit is %d", len(e.Body), uint32(math.MaxUint32))
	}
	return nil
}

// AppendEntry appends the encoding of e to dst.
func AppendEntry(dst []byte, e Entry) ([]byte, error) {
	if err := e.check(); err != nil {
		return dst, err
	}
	if !e.SubBatch {
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Body)))
		return append(dst, e.Body...), nil
	}
	dst = append(dst, 0x80|byte(e.Compression)<<4)
	dst = binary.BigEndian.AppendUint16(dst, e.Records)
	dst = binary.BigEndian.AppendUint32(dst, e.UncompressedLen)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(e.Body)))
	return append(dst, e.Body...), nil
}

// AppendData appends the data section holding entries to dst and returns the number of
// records (offsets) they use. It refuses more entries than the header's u16 can count.
func AppendData(dst []byte, entries []Entry) ([]byte, uint32, error) {
	if len(entries) > math.MaxUint16 {
		return dst, 0, fmt.Errorf("data section: %d entries, limit is %d", len(entries), math.MaxUint16)
	}
	var records uint32
	for i, e := range entries {
		var err error
		if dst, err = AppendEntry(dst, e); err != nil {
			return dst, 0, fmt.Errorf("data section entry %d: %w", i, err)
		}
		records += e.RecordCount()
	}
	return dst, records, nil
}

// DecodeEntries splits a data section into its entries (bodies alias data) and counts the
// records. It refuses truncated entries and non-zero reserved bits, naming the byte.
func DecodeEntries(data []byte) ([]Entry, uint32, error) {
	var entries []Entry
	var records uint32
	for pos := 0; pos < len(data); {
		if data[pos]&0x80 == 0 {
			if len(data)-pos < simpleEntryHeaderSize {
				return nil, 0, fmt.Errorf("data section byte %d: simple entry header truncated", pos)
			}
			n := int(binary.BigEndian.Uint32(data[pos:]))
			body := pos + simpleEntryHeaderSize
			if n > len(data)-body {
				return nil, 0, fmt.Errorf("data section byte %d: simple entry of %d bytes, %d left", pos, n, len(data)-body)
			}
			entries = append(entries, Entry{Body: data[body : body+n : body+n]})
			records++
			pos = body + n
			continue
		}
		if len(data)-pos < subBatchHeaderSize {
			return nil, 0, fmt.Errorf("data section byte %d: sub-batch header truncated", pos)
		}
		if data[pos]&0x0f != 0 {
			return nil, 0, fmt.Errorf("data section byte %d: sub-batch reserved bits 0x%x not zero", pos, data[pos]&0x0f)
		}
		e := Entry{
			SubBatch:        true,
			Compression:     Compression(data[pos]>>4) & 0x7,
			Records:         binary.BigEndian.Uint16(data[pos+1:]),
			UncompressedLen: binary.BigEndian.Uint32(data[pos+3:]),
		}
		n := uint64(binary.BigEndian.Uint32(data[pos+7:]))
		body := pos + subBatchHeaderSize
		if n > uint64(len(data)-body) {
			return nil, 0, fmt.Errorf("data section byte %d: sub-batch of %d bytes, %d left", pos, n, len(data)-body)
		}
		if e.Records == 0 {
			return nil, 0, fmt.Errorf("data section byte %d: sub-batch with zero records", pos)
		}
		e.Body = data[body : body+int(n) : body+int(n)]
		entries = append(entries, e)
		records += uint32(e.Records)
		pos = body + int(n)
	}
	return entries, records, nil
}
