#!/usr/bin/env python3
"""The KServe v2 REST protocol against a running flow_serve, with nothing but the standard
library (urllib) and curl, as a user's scripts would call it.

Usage: rest_client.py HTTP_PORT METRICS_PORT
The server serves model "affine": input "x" (-1, 4) FP32, output "y" = 3 * x.
Exits 1 at the first failed check, naming it."""
import json
import shutil
import struct
import subprocess
import sys
import urllib.error
import urllib.request

TIMEOUT = 30  # seconds, for every call


def call(method, url, body=None, headers=None):
    """(status, headers, body) of one request; HTTP errors are answers, not exceptions."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def curl(*args):
    """curl's output; its last line is the HTTP status (-w)."""
    done = subprocess.run(["curl", "-s", "--max-time", str(TIMEOUT), "-w", "\n%{http_code}", *args],
                          capture_output=True, text=True, timeout=TIMEOUT + 5, check=True)
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def check(condition, what):
    if not condition:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("ok:", what)


def main():
    http = f"http://127.0.0.1:{sys.argv[1]}"
    metrics = f"http://127.0.0.1:{sys.argv[2]}/metrics"
    infer = f"{http}/v2/models/affine/infer"
    as_json = {"Content-Type": "application/json"}

    check(call("GET", f"{http}/v2/health/live")[0] == 200, "live")
    check(call("GET", f"{http}/v2/health/ready")[0] == 200, "ready")
    status, _, body = call("GET", f"{http}/v2")
    check(status == 200 and json.loads(body)["name"] == "flow", "server metadata")
    status, _, body = call("GET", f"{http}/v2/models/affine")
    check(status == 200 and json.loads(body)["inputs"][0]["shape"] == [-1, 4], "model metadata")
    check(call("GET", f"{http}/v2/models/affine/versions/1/ready")[0] == 200, "model ready")

    request = {"id": "py", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}]}
    status, _, body = call("POST", infer, json.dumps(request).encode(), as_json)
    answer = json.loads(body)
    check(status == 200 and answer["id"] == "py" and answer["outputs"][0]["data"] == [3, 6, 9, 12],
          "JSON inference")

    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 4],
                                     "parameters": {"binary_data_size": 32}}],
                         "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    status, headers, body = call("POST", infer, header + struct.pack("<8f", *range(8)),
                                 {"Content-Type": "application/octet-stream",
                                  "Inference-Header-Content-Length": str(len(header))})
    length = int(headers["Inference-Header-Content-Length"])
    check(status == 200 and json.loads(body[:length])["outputs"][0]["parameters"]["binary_data_size"] == 32
          and list(struct.unpack("<8f", body[length:])) == [3.0 * v for v in range(8)], "binary inference")

    request["inputs"][0]["shape"] = [1, 5]
    status, _, body = call("POST", infer, json.dumps(request).encode(), as_json)
    check(status == 400 and "dimension 1 of shape (1,5) is 5" in json.loads(body)["error"], "bad shape: 400")
    status, _, body = call("POST", f"{http}/v2/models/nope/infer", json.dumps(request).encode(), as_json)
    check(status == 404 and "'nope'" in json.loads(body)["error"], "unknown model: 404")
    check(call("GET", f"{http}/v2/nothing")[0] == 404, "unknown path: 404")

    status, _, body = call("GET", metrics)
    check(status == 200 and 'nv_inference_request_success{model="affine",version="1"} 2' in body.decode(),
          "metrics count the REST inferences")
    check(call("POST", metrics, b"")[0] == 405, "POST /metrics: 405")

    check(shutil.which("curl") is not None, "curl is installed")
    status, body = curl(metrics)
    check(status == 200 and "nv_inference_compute_output_duration_us" in body, "curl scrapes the metrics")
    status, body = curl("-X", "POST", metrics)
    check(status == 405, "curl POST /metrics: 405")
    status, body = curl("-H", "Content-Type: application/json", "-d",
                        '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [0, 1, 0, 1]}]}',
                        infer)
    check(status == 200 and json.loads(body)["outputs"][0]["data"] == [0, 3, 0, 3], "curl JSON inference")


if __name__ == "__main__":
    main()
