#!/usr/bin/env python3
"""What one ordinary client can do to flow_serve: each attack against a fresh server, with what it
answered and its RSS before and after (and the peak, VmHWM). Python's standard library only.

    python3 bench/serving_attacks.py [--serve build/serving/flow_serve] [--repository model_repository]
                                     [--only NAME ...]

The repository needs the quickstart's fashion_mnist export (`build/examples/quickstart_graph
--epochs 1` writes it). Prints a Markdown table (docs/reliability.md, "Serving under attack").
"""
import argparse
import gzip
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

MODEL = "fashion_mnist"
IMAGE = 784  # floats per row


def rss_mib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class Server:
    def __init__(self, serve, repository, *flags):
        self.process = subprocess.Popen(
            [serve, "--model-repository", repository, "--address", "127.0.0.1", "--grpc-port", "0",
             "--http-port", "0", "--metrics-port", "0", "--repository-poll-secs", "0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        parts = line.replace(",", "").split()
        self.grpc_port, self.metrics_port, self.http_port = int(parts[3]), int(parts[6]), int(parts[9])

    def rss(self):
        return rss_mib(self.process.pid)

    def peak(self):
        return rss_mib(self.process.pid, "VmHWM")

    def stop(self, timeout=40):
        start = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = "killed"
        return code, time.monotonic() - start


def request(port, method, path, body=b"", headers=None, timeout=30):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    except (OSError, http.client.HTTPException) as error:
        return type(error).__name__, b""
    finally:
        connection.close()


def timed(function):
    start = time.monotonic()
    result = function()
    return result, time.monotonic() - start


def binary_infer(port, batch):
    """An inference with the binary tensor data extension: a JSON header, then the raw floats."""
    header = json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [batch, 1, 28, 28],
                                     "parameters": {"binary_data_size": batch * IMAGE * 4}}],
                         "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    body = header + bytes(batch * IMAGE * 4)
    return request(port, "POST", f"/v2/models/{MODEL}/infer", body,
                   {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"})


def json_infer_body(batch):
    values = ",".join(["0.5"] * (batch * IMAGE))
    return ('{"inputs": [{"name": "image", "datatype": "FP32", "shape": [%d, 1, 28, 28], "data": [%s]}]}'
            % (batch, values)).encode()


def attack_batch_sizes(args):
    server = Server(args.serve, args.repository)
    binary_infer(server.http_port, 64)
    before = server.rss()
    statuses = {}
    samples = []
    for i, batch in enumerate(range(65, 65 + args.batch_sizes)):
        status, _ = binary_infer(server.http_port, batch)
        statuses[status] = statuses.get(status, 0) + 1
        if i % 250 == 249:
            samples.append(f"{server.rss():.0f}")
    after = server.rss()
    server.stop()
    return (f"{args.batch_sizes} binary REST inferences, batch sizes 65..{64 + args.batch_sizes}",
            f"{statuses}; RSS every 250: {', '.join(samples)} MiB", before, after, None)


def chunked(port, total, chunk=1 << 20):
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                 "Content-Type: application/json\r\n\r\n".encode())
    sent = 0
    data = b"0" * chunk
    try:
        while sent < total:
            sock.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
            sent += len(data)
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass
    sock.settimeout(30)
    try:
        reply = sock.recv(200).split(b"\r\n")[0].decode()
    except OSError as error:
        reply = type(error).__name__
    sock.close()
    return reply, sent


def attack_chunked(args):
    server = Server(args.serve, args.repository, "--max-message-mb", "16")
    before = server.rss()
    (reply, sent), seconds = timed(lambda: chunked(server.http_port, 100 << 20))
    after, peak = server.rss(), server.peak()
    server.stop()
    return ("100 MiB chunked body, `--max-message-mb 16`",
            f"`{reply}` after {sent >> 20} MiB sent, {seconds:.2f} s", before, after, peak)


def attack_gzip(args):
    server = Server(args.serve, args.repository, "--max-message-mb", "16")
    body = gzip.compress(b"0" * (1 << 30), compresslevel=9)
    before = server.rss()
    (status, answer), seconds = timed(lambda: request(
        server.http_port, "POST", f"/v2/models/{MODEL}/infer", body,
        {"Content-Encoding": "gzip", "Content-Type": "application/json"}))
    after, peak = server.rss(), server.peak()
    server.stop()
    return (f"{len(body) >> 10} KiB gzip body inflating to 1 GiB, `--max-message-mb 16`",
            f"{status} {answer[:70].decode(errors='replace')} ({seconds:.2f} s)", before, after, peak)


def attack_json(args):
    server = Server(args.serve, args.repository, "--max-message-mb", "128")
    batch = args.json_batch
    body = json_infer_body(batch)
    binary_infer(server.http_port, batch)  # the program for this batch size exists before the peak is read
    before = server.rss()
    (status, _), seconds = timed(lambda: request(server.http_port, "POST", f"/v2/models/{MODEL}/infer", body,
                                                 {"Content-Type": "application/json"}, timeout=120))
    after, peak = server.rss(), server.peak()
    server.stop()
    return (f"{len(body) / (1 << 20):.0f} MiB JSON body (batch {batch}, values `0.5`)",
            f"{status} ({seconds:.1f} s); peak - before = {peak - before:.0f} MiB, "
            f"{(peak - before) / (len(body) / (1 << 20)):.1f}x the body", before, after, peak)


class Slowloris:
    """Connections that send a request head one byte every `interval` seconds."""

    def __init__(self, port, count, interval):
        self.sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
        self.closed = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, args=(interval,), daemon=True)
        self.thread.start()

    def run(self, interval):
        head = b"GET /v2/health/live HTTP/1.1\r\nX-Slow: " + b"a" * 100000
        for byte in head:
            for sock in list(self.sockets):
                try:
                    sock.send(bytes([byte]))
                except OSError:
                    self.sockets.remove(sock)
                    self.closed += 1
            if self.stop.wait(interval):
                return

    def count_closed(self):
        """Connections the server has closed (EOF or reset), without waiting."""
        closed = self.closed
        for sock in self.sockets:
            try:
                if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return closed

    def close(self):
        self.stop.set()
        self.thread.join()
        for sock in self.sockets:
            sock.close()


def attack_slowloris(args, count, interval, label):
    server = Server(args.serve, args.repository)
    before = server.rss()
    slow = [Slowloris(server.http_port, count, interval), Slowloris(server.metrics_port, count, interval)]
    time.sleep(1)
    (infer, infer_s) = timed(lambda: binary_infer(server.http_port, 1)[0])
    (live, live_s) = timed(lambda: request(server.http_port, "GET", "/v2/health/live", timeout=10)[0])
    (scrape, scrape_s) = timed(lambda: request(server.metrics_port, "GET", "/metrics", timeout=10)[0])
    time.sleep(7)  # past the 5 s head timeout
    dropped = sum(s.count_closed() for s in slow)
    after = server.rss()
    code, seconds = server.stop()
    for s in slow:
        s.close()
    return (label,
            f"infer {infer} in {infer_s * 1000:.0f} ms, live {live} in {live_s * 1000:.0f} ms, metrics {scrape} in "
            f"{scrape_s * 1000:.0f} ms; {dropped} of {2 * count} slow connections dropped within 8 s; "
            f"SIGTERM: exit {code} in {seconds:.2f} s", before, after, None)


def attack_half_line(args):
    server = Server(args.serve, args.repository)
    sock = socket.create_connection(("127.0.0.1", server.http_port))
    sock.sendall(b"GET /v2/hea")
    sock.settimeout(30)
    start = time.monotonic()
    try:
        sock.recv(100)
    except OSError:
        pass
    held = time.monotonic() - start
    code, seconds = server.stop()
    return ("half a request line, then nothing", f"closed after {held:.1f} s; SIGTERM: exit {code} in {seconds:.2f} s",
            None, None, None)


ATTACKS = {
    "batch_sizes": attack_batch_sizes,
    "chunked": attack_chunked,
    "gzip": attack_gzip,
    "json": attack_json,
    "slowloris8": lambda args: attack_slowloris(args, 8, 2.0, "8 slowloris connections per HTTP port (1 byte / 2 s)"),
    "slowloris100": lambda args: attack_slowloris(args, 100, 0.2, "100 slow connections per HTTP port (1 byte / 0.2 s)"),
    "half_line": attack_half_line,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", default="build/serving/flow_serve")
    parser.add_argument("--repository", default="model_repository")
    parser.add_argument("--batch-sizes", type=int, default=1000)
    parser.add_argument("--json-batch", type=int, default=8000)
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS))
    args = parser.parse_args()
    print("| attack | answer | RSS before | RSS after | peak |")
    print("|---|---|---|---|---|")
    for name in args.only or ATTACKS:
        label, answer, before, after, peak = ATTACKS[name](args)
        cell = lambda v: "" if v is None else f"{v:.0f} MiB"
        print(f"| {label} | {answer} | {cell(before)} | {cell(after)} | {cell(peak)} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
