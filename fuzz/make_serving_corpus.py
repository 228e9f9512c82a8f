#!/usr/bin/env python3
"""Writes the seeds of the REST and HTTP fuzz targets: fuzz/corpus/rest_request/ and
fuzz/corpus/http_request/. Usage: python3 fuzz/make_serving_corpus.py [fuzz]

The requests are for the real exports in fuzz/data: "cnn" (input "image", FP32 (-1,1,28,28),
output "logits") with the FashionMNIST image of fuzz/corpus/infer_request/cnn_raw_one_image.pb
(written by flow_fuzz_make_corpus), and "dtypes" (one (-1,2) input per KServe datatype, named
after it in lower case, identity to "<name>_out").

rest_request inputs: a body, or, when it starts with a digit, an Inference-Header-Content-Length
value, '\\n', then the body (fuzz/rest_request_fuzz.cpp). http_request inputs: the raw bytes of
one or more HTTP requests (fuzz/http_request_fuzz.cpp).
"""
import gzip
import json
import os
import struct
import sys
import zlib

fuzz = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))

DATATYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "BF16", "FP32", "FP64"]


def image():
    with open(os.path.join(fuzz, "corpus", "infer_request", "cnn_raw_one_image.pb"), "rb") as f:
        raw = f.read()[-784 * 4:]
    return raw, list(struct.unpack("<784f", raw))


def compact(value):
    return json.dumps(value, separators=(",", ":"))


def short_floats(values):
    return [float("%.4g" % v) for v in values]


def typed_values(datatype, values):
    """The values 0..3 (BOOL: odd ones true; signed: minus 2) as JSON data and as raw bytes."""
    if datatype == "BOOL":
        data = [v % 2 == 1 for v in values]
        return data, bytes(int(b) for b in data)
    if datatype.startswith("UINT"):
        bits = int(datatype[4:])
        fmt = {8: "B", 16: "H", 32: "I", 64: "Q"}[bits]
        return values, struct.pack("<%d%s" % (len(values), fmt), *values)
    if datatype.startswith("INT"):
        bits = int(datatype[3:])
        fmt = {8: "b", 16: "h", 32: "i", 64: "q"}[bits]
        data = [v - 2 for v in values]
        return data, struct.pack("<%d%s" % (len(data), fmt), *data)
    data = [0.5 * v for v in values]
    if datatype == "FP16":
        return data, struct.pack("<%de" % len(data), *data)
    if datatype == "BF16":
        return data, b"".join(struct.pack("<f", v)[2:] for v in data)
    if datatype == "FP32":
        return data, struct.pack("<%df" % len(data), *data)
    return data, struct.pack("<%dd" % len(data), *data)


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def rest_seeds():
    raw, floats = image()
    pixels = short_floats(floats)
    seeds = {}
    # cnn: JSON data, flat, with an id and the output by name.
    seeds["cnn_json_flat.json"] = compact({"id": "flat-1", "inputs": [
        {"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": pixels}],
        "outputs": [{"name": "logits"}]})
    # cnn: JSON data nested as the shape, batch 2 (the image and its mirror), every output.
    rows = [pixels[r * 28:(r + 1) * 28] for r in range(28)]
    seeds["cnn_json_nested_batch2.json"] = compact({"inputs": [
        {"name": "image", "datatype": "FP32", "shape": [2, 1, 28, 28],
         "data": [[rows], [[row[::-1] for row in rows]]]}]})
    # cnn: binary input, binary output asked for by name.
    header = compact({"id": "binary-1", "inputs": [
        {"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28], "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    seeds["cnn_binary_in_binary_out.bin"] = b"%d\n" % len(header) + header + raw
    # cnn: binary input, every output in binary (binary_data_output).
    header = compact({"inputs": [
        {"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28], "parameters": {"binary_data_size": len(raw)}}],
        "parameters": {"binary_data_output": True}}).encode()
    seeds["cnn_binary_data_output.bin"] = b"%d\n" % len(header) + header + raw

    # dtypes: every input as JSON data, batch 2; some outputs asked for in binary, some in JSON.
    inputs, binary_inputs, binary = [], [], b""
    for datatype in DATATYPES:
        data, packed = typed_values(datatype, [0, 1, 2, 3])
        nested = [data[:2], data[2:]]
        inputs.append({"name": datatype.lower(), "datatype": datatype, "shape": [2, 2], "data": nested})
        binary_inputs.append({"name": datatype.lower(), "datatype": datatype, "shape": [2, 2],
                              "parameters": {"binary_data_size": len(packed)}})
        binary += packed
    outputs = [{"name": d.lower() + "_out", "parameters": {"binary_data": i % 2 == 0}}
               for i, d in enumerate(DATATYPES)]
    seeds["dtypes_json_all.json"] = compact({"id": "dtypes-json", "inputs": inputs, "outputs": outputs})
    # dtypes: every input binary, every output in JSON.
    header = compact({"inputs": binary_inputs, "outputs": [{"name": d.lower() + "_out"} for d in DATATYPES]}).encode()
    seeds["dtypes_binary_all.bin"] = b"%d\n" % len(header) + header + binary
    # dtypes: half the inputs binary, half JSON, batch 1, binary_data_output with two outputs
    # overriding it.
    mixed, mixed_binary = [], b""
    for i, datatype in enumerate(DATATYPES):
        data, packed = typed_values(datatype, [1, 2])
        if i % 2:
            mixed.append({"name": datatype.lower(), "datatype": datatype, "shape": [1, 2],
                          "parameters": {"binary_data_size": len(packed)}})
            mixed_binary += packed
        else:
            mixed.append({"name": datatype.lower(), "datatype": datatype, "shape": [1, 2], "data": data})
    header = compact({"inputs": mixed, "parameters": {"binary_data_output": True},
                      "outputs": [{"name": "fp16_out", "parameters": {"binary_data": False}}, {"name": "int64_out"},
                                  {"name": "bool_out", "parameters": {"binary_data": True}}]}).encode()
    seeds["dtypes_mixed.bin"] = b"%d\n" % len(header) + header + mixed_binary
    # Rejections: a header length past the body, and a body that is not an inference request.
    seeds["reject_header_length_past_body.bin"] = b"99999\n" + header
    seeds["reject_not_a_request.json"] = compact({"inputs": {"name": "image"}})
    return seeds


def http(method, target, body=b"", headers=(), length=True):
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1"]
    lines += ["%s: %s" % h for h in headers]
    if length and (body or method == "POST"):
        lines.append("Content-Length: %d" % len(body))
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def chunked(body, size=1000):
    out = b""
    for i in range(0, len(body), size):
        piece = body[i:i + size]
        out += b"%x\r\n" % len(piece) + piece + b"\r\n"
    return out + b"0\r\n\r\n"


def http_seeds():
    raw, floats = image()
    infer_json = compact({"id": "h", "inputs": [
        {"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28], "data": short_floats(floats)}],
        "outputs": [{"name": "logits"}]}).encode()
    header = compact({"inputs": [
        {"name": "image", "datatype": "FP32", "shape": [1, 1, 28, 28], "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "logits", "parameters": {"binary_data": True}}]}).encode()
    infer_binary = header + raw
    path = "/v2/models/cnn/versions/1/infer"
    json_type = ("Content-Type", "application/json")
    seeds = {
        "health_live.http": http("GET", "/v2/health/live"),
        "health_ready_keepalive_pipelined.http": http("GET", "/v2/health/ready") + http("GET", "/v2")
        + http("GET", "/v2/models/cnn/ready", headers=[("Connection", "close")]),
        "model_metadata.http": http("GET", "/v2/models/cnn"),
        "model_version_metadata_head.http": http("HEAD", "/v2/models/cnn/versions/1"),
        "infer_json.http": http("POST", "/v2/models/cnn/infer", infer_json, [json_type]),
        "infer_binary.http": http("POST", path, infer_binary,
                                  [("Content-Type", "application/octet-stream"),
                                   ("Inference-Header-Content-Length", str(len(header)))]),
        "infer_chunked.http": http("POST", path, chunked(infer_json),
                                   [json_type, ("Transfer-Encoding", "chunked")], length=False),
        "infer_gzip.http": http("POST", path, gzip.compress(infer_json, mtime=0),
                                [json_type, ("Content-Encoding", "gzip")]),
        "infer_deflate_chunked.http": http("POST", path, chunked(zlib.compress(infer_binary), 512),
                                           [("Content-Encoding", "deflate"), ("Transfer-Encoding", "chunked"),
                                            ("Inference-Header-Content-Length", str(len(header)))], length=False),
        "infer_expect_continue.http": http("POST", path, infer_json, [json_type, ("Expect", "100-continue")]),
        # Malformed or over the limits.
        "bad_request_line.http": b"GET\r\n\r\n",
        "http10_no_host.http": b"GET /v2/health/live HTTP/1.0\r\n\r\n",
        "unknown_path.http": http("GET", "/v2/models/cnn/nothing"),
        "wrong_method.http": http("PUT", "/v2/health/live"),
        "unknown_model.http": http("POST", "/v2/models/none/infer", b"{}"),
        "short_body.http": http("POST", path, infer_json[:100], [("Content-Length", "5000")], length=False),
        "huge_content_length.http": http("POST", path, b"{}", [("Content-Length", "99999999999999999999")],
                                         length=False),
        "two_content_lengths.http": http("POST", path, b"{}", [("Content-Length", "2"), ("Content-Length", "3")],
                                         length=False),
        "chunked_bad_size.http": http("POST", path, b"fffffffffffffffff\r\n{}\r\n0\r\n\r\n",
                                      [("Transfer-Encoding", "chunked")], length=False),
        "chunked_over_limit.http": http("POST", path, b"10001\r\n" + b"x" * 0x10001 + b"\r\n0\r\n\r\n",
                                        [("Transfer-Encoding", "chunked")], length=False)[:2048],
        "gzip_bomb.http": http("POST", path, gzip.compress(b" " * (1 << 20), mtime=0),
                               [json_type, ("Content-Encoding", "gzip")]),
        "gzip_garbage.http": http("POST", path, b"\x1f\x8b\x08\x00garbage", [("Content-Encoding", "gzip")]),
        "unknown_encoding.http": http("POST", path, infer_json[:64], [("Content-Encoding", "br")]),
        "header_length_past_body.http": http("POST", path, b"{}", [("Inference-Header-Content-Length", "99")]),
        "bare_lf_head.http": b"GET /v2/health/live HTTP/1.1\nHost: x\n\n",
    }
    return seeds


for name, data in rest_seeds().items():
    write(os.path.join(fuzz, "corpus", "rest_request"), name, data)
for name, data in http_seeds().items():
    write(os.path.join(fuzz, "corpus", "http_request"), name, data)
