#!/usr/bin/python3
"""Publish to a RabbitMQ stream queue with publisher confirms, through broker restarts.

Every message body starts with "rmqtest|<seq>|" and is padded to --size bytes. Each
message is published once with a fresh sequence number (a publish that failed is never
retried under the same number, so a message the broker stored without confirming cannot
show up twice under one number). The sequence numbers the broker confirmed are appended to
--confirmed, those published without a confirm (the connection dropped) to --unconfirmed.
It stops after --duration seconds or when --stop-file appears.
"""
import argparse
import os
import sys
import time

import pika


def connect(port):
    params = pika.ConnectionParameters(host="127.0.0.1", port=port, heartbeat=10,
                                       blocked_connection_timeout=30)
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.confirm_delivery()
    return conn, ch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--rate", type=float, default=600)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--confirmed", required=True)
    ap.add_argument("--unconfirmed", required=True)
    ap.add_argument("--stop-file", default="")
    a = ap.parse_args()

    confirmed = open(a.confirmed, "a", buffering=1)
    unconfirmed = open(a.unconfirmed, "a", buffering=1)
    seq = 0
    start = time.monotonic()
    conn = ch = None
    outages = 0
    while time.monotonic() - start < a.duration:
        if a.stop_file and os.path.exists(a.stop_file):
            break
        if ch is None:
            try:
                conn, ch = connect(a.port)
            except Exception as e:  # the broker is restarting
                print(f"publish: connect: {e!r}", file=sys.stderr)
                time.sleep(0.5)
                continue
        due = start + seq / a.rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        seq += 1
        head = f"rmqtest|{seq}|".encode()
        body = head + b"x" * max(0, a.size - len(head))
        try:
            ch.basic_publish(exchange="", routing_key=a.queue, body=body,
                             properties=pika.BasicProperties(delivery_mode=2), mandatory=True)
            confirmed.write(f"{seq}\n")
        except pika.exceptions.UnroutableError:
            unconfirmed.write(f"{seq}\n")
        except pika.exceptions.NackError:
            unconfirmed.write(f"{seq}\n")
        except Exception as e:  # connection lost mid-publish: the outcome is unknown
            unconfirmed.write(f"{seq}\n")
            outages += 1
            print(f"publish: seq {seq}: {e!r}; reconnecting", file=sys.stderr)
            try:
                conn.close()
            except Exception:
                pass
            conn = ch = None
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass
    print(f"publish: {seq} published, outages {outages}", file=sys.stderr)


if __name__ == "__main__":
    main()
