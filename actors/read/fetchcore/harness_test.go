package fetchcore

import (
	"encoding/binary"
	"hash/crc32"
	"math/rand/v2"

	"github.com/streamtier/streamtier/chunk"
	"github.com/streamtier/streamtier/fragment"
)

// testObject is a fragment object built for tests: chunks of given data sizes, one record
// each, ids from first on.
type testObject struct {
	key     string
	first   uint64
	end     uint64
	bytes   []byte // the whole object: header, chunk region, index
	size    uint64 // chunk region
	records []fragment.IndexRecord
	chunks  [][]byte
}

// buildObject lays out an object whose chunks carry dataSizes bytes of data each (and a
// few bloom and trailer bytes when extras is set).
func buildObject(key string, first uint64, dataSizes []int, seed uint64) *testObject {
	rnd := rand.New(rand.NewPCG(seed, 7))
	o := &testObject{key: key, first: first}
	b := fragment.AppendObjectHeader(nil)
	id := first
	for i, n := range dataSizes {
		bloom, trailer := uint8(0), uint32(0)
		if i%3 == 1 {
			bloom, trailer = 16, 8
		}
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(rnd.Uint32())
		}
		h := chunk.Header{Type: chunk.TypeUser, Entries: 1, Records: 1 + uint32(i%2), Timestamp: int64(id), Epoch: 1, ChunkID: id,
			DataCRC: crc32.ChecksumIEEE(data), DataLen: uint32(n), TrailerLen: trailer, BloomSize: bloom}
		pos := len(b)
		o.records = append(o.records, fragment.IndexRecord{ChunkID: id, Timestamp: int64(id), Position: uint32(pos)})
		b = chunk.AppendHeader(b, h)
		b = append(b, make([]byte, bloom)...)
		b = append(b, data...)
		b = append(b, make([]byte, trailer)...)
		o.chunks = append(o.chunks, b[pos:])
		id = h.NextID()
	}
	o.size = uint64(len(b) - fragment.ObjectHeaderSize)
	for _, r := range o.records {
		b = fragment.AppendIndexRecord(b, r)
	}
	o.bytes = b
	for i := range o.chunks { // re-slice from the final buffer
		pos := int(o.records[i].Position)
		o.chunks[i] = b[pos : pos+len(o.chunks[i])]
	}
	o.end = id
	return o
}

func (o *testObject) leaf() Leaf {
	return Leaf{First: o.first, End: o.end, Key: o.key, Size: o.size}
}

// corrupt flips a data byte of chunk i.
func (o *testObject) corrupt(i int) {
	pos := int(o.records[i].Position)
	h, _ := chunk.ParseHeader(o.bytes[pos:])
	at := pos + chunk.HeaderSize + int(h.BloomSize) + int(h.DataLen)/2
	o.bytes[at] ^= 0x40
}

// corruptTimestamp flips a bit of chunk i's header timestamp: the data CRC still holds,
// the index record disagrees.
func (o *testObject) corruptTimestamp(i int) {
	o.bytes[int(o.records[i].Position)+8+7] ^= 0x01
}

// corruptHeader flips a bit of byte at of chunk i's header: 7 is the low byte of the
// record count (the chunk then ends at another offset), 43 the low byte of the trailer's
// length (it ends at another position); the data CRC holds either way.
func (o *testObject) corruptHeader(i, at int) {
	o.bytes[int(o.records[i].Position)+at] ^= 0x02
}

// corruptIndex flips a bit of index record i's timestamp: the chunk is intact, the object's
// index disagrees with it.
func (o *testObject) corruptIndex(i int) {
	at := fragment.ObjectHeaderSize + int(o.size) + i*fragment.IndexRecordSize + 8 + 7
	o.bytes[at] ^= 0x01
	o.records[i].Timestamp ^= 0x01 // the records a fetch returns are the parsed index
}

var _ = binary.BigEndian
