#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_store_protocol (tests/fuzz/corpus/store/): the messages a
rank and the server exchange, encoded here from the format documented in
dist/store_protocol.hpp (a second implementation: tests/dist/test_store.cpp parses every seed
with brrr's parser and re-encodes it). Request streams are what one rank's connection sends
after its hello during init_process_group, a debug-mode collective check, a failure report and
Gloo's rendezvous; reply streams are what the server answers. Deterministic; regenerate with
    python3 tests/fuzz/make_store_seeds.py
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "store")

MAGIC, VERSION = 0x53525242, 1
HELLO, SET, GET, ADD, CHECK, WAIT, DELETE_KEY, COMPARE_SET = range(1, 9)
OK, VALUE, NUMBER, BOOLEAN, READY, TIMED_OUT, NOT_FOUND, ERROR = range(0, 8)


def string(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<I", len(b)) + b


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def hello():
    return frame(bytes([HELLO]) + struct.pack("<IB", MAGIC, VERSION))


def set_(k, v):
    return frame(bytes([SET]) + string(k) + string(v))


def get(k):
    return frame(bytes([GET]) + string(k))


def add(k, d):
    return frame(bytes([ADD]) + string(k) + struct.pack("<q", d))


def check(*ks):
    return frame(bytes([CHECK]) + struct.pack("<I", len(ks)) + b"".join(string(k) for k in ks))


def wait(ms, *ks):
    return frame(bytes([WAIT]) + struct.pack("<qI", ms, len(ks)) + b"".join(string(k) for k in ks))


def delete_key(k):
    return frame(bytes([DELETE_KEY]) + string(k))


def compare_set(k, expected, desired):
    return frame(bytes([COMPARE_SET]) + string(k) + string(expected) + string(desired))


def reply(status, body=b""):
    return frame(bytes([status]) + body)


SEEDS = {
    # init_process_group, rank 1 of 2 (dist/process_group.cpp): register, wait for "done".
    "rendezvous_rank1": add("init/arrived", 1) + compare_set("init/world_size", "", "2")
    + compare_set("init/rank/1", "", "host:4242") + add("init/joined", 1) + wait(300000, "init/done")
    + check("init/error") + add("init/acks", 1),
    # rank 0, the last to join, completes the rendezvous.
    "rendezvous_rank0": add("init/arrived", 1) + compare_set("init/world_size", "", "2")
    + compare_set("init/rank/0", "", "host:4241") + add("init/joined", 1) + compare_set("init/done", "", "ok")
    + wait(300000, "init/done") + add("init/acks", 0) + add("init/arrived", 0),
    # A rank that disagrees on WORLD_SIZE writes the error for everyone.
    "rendezvous_error": compare_set("init/world_size", "", "3") + compare_set("init/error", "", "WORLD_SIZE differs")
    + set_("init/done", "error") + get("init/error"),
    # BRRR_DIST_DEBUG=1: each rank publishes its collective's signature and reads the others'.
    "debug_signature": set_("g0/debug/7/0", "all_reduce sum f32 [4, 3]") + wait(1, "g0/debug/7/0", "g0/debug/7/1")
    + get("g0/debug/7/0") + get("g0/debug/7/1") + delete_key("g0/debug/7/0"),
    # A failure report and the check of the others'.
    "failure_report": set_("g0/fail/2", "7 all_reduce") + check("g0/fail/0") + check("g0/fail/1")
    + get("g0/fail/2"),
    # Gloo's rendezvous through the store (dist/gloo_comm.cpp): binary addresses.
    "gloo_connect": set_("gloo/g0/rank_1", bytes(range(40))) + wait(1, "gloo/g0/rank_0") + get("gloo/g0/rank_0"),
    # barrier keys, a counter near int64's edge, a second hello.
    "barrier_counters": set_("g0/barrier/3/1", "1") + wait(1, "g0/barrier/3/0", "g0/barrier/3/1")
    + add("n", 9223372036854775806) + add("n", 1) + add("n", 1) + hello(),
    # What the server answers (also parsed as replies by the target).
    "replies": reply(OK) + reply(NUMBER, struct.pack("<q", 2)) + reply(VALUE, string("2"))
    + reply(VALUE, string("")) + reply(READY) + reply(BOOLEAN, b"\x00") + reply(BOOLEAN, b"\x01")
    + reply(TIMED_OUT) + reply(NOT_FOUND) + reply(ERROR, string("add: key n would overflow int64")),
}


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(SEEDS)} seeds to {OUT}")


if __name__ == "__main__":
    main()
