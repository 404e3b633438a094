#!/usr/bin/python3
"""Judge `node read --format records` output against what the publisher recorded.

Every confirmed sequence number must be in exactly one record; an unconfirmed one in at
most one; no other rmqtest record may exist; every record body must be the published
bytes (the header, then "x" padding to the size). Exits 1 with the findings otherwise.
"""
import argparse
import base64
import json
import re
import sys
from collections import Counter

MARK = re.compile(rb"rmqtest\|(\d+)\|(x*)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", required=True)
    ap.add_argument("--confirmed", required=True)
    ap.add_argument("--unconfirmed", required=True)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args()

    def seqs(path):
        with open(path) as f:
            return [int(l) for l in f if l.strip()]

    confirmed, unconfirmed = seqs(a.confirmed), set(seqs(a.unconfirmed))
    seen = Counter()
    records = bad = compressed = 0
    with open(a.records) as f:
        for line in f:
            r = json.loads(line)
            if "body_base64" in r:
                body = base64.b64decode(r["body_base64"])
            elif "body" in r:
                body = r["body"].encode()
            else:
                if "codec" in r or "compression" in r:
                    compressed += 1
                continue
            records += 1
            m = MARK.search(body)
            if not m:
                continue
            seq = int(m.group(1))
            head = b"rmqtest|%d|" % seq
            if len(head) + len(m.group(2)) != max(a.size, len(head)):
                bad += 1
                print(f"record at {r.get('offset')}: message {seq} has {len(m.group(2))} padding bytes", file=sys.stderr)
            seen[seq] += 1
    missing = [s for s in confirmed if seen[s] == 0]
    dup = [s for s, n in seen.items() if n > 1]
    unknown = [s for s in seen if s not in unconfirmed and s not in set(confirmed)]
    print(json.dumps({"records": records, "compressed_batches": compressed, "confirmed": len(confirmed),
                      "unconfirmed": len(unconfirmed), "unconfirmed_found": sum(1 for s in unconfirmed if seen[s]),
                      "missing": len(missing), "duplicated": len(dup), "unknown": len(unknown), "bad_bodies": bad,
                      "first_missing": missing[:10], "first_duplicated": dup[:10]}))
    sys.exit(1 if missing or dup or unknown or bad or compressed else 0)


if __name__ == "__main__":
    main()
