package manifest

import "hash/crc64"

// Digest is a CRC-64 (ECMA) of the manifest's root encoding: equal manifests have equal
// digests, so a replica and its writer can be compared from their status alone.
func Digest(m Manifest) uint64 {
	return crc64.Checksum(EncodeRoot(m), digestTable)
}

var digestTable = crc64.MakeTable(crc64.ECMA)
