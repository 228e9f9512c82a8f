#!/usr/bin/env python3
"""Prints FashionMNIST test image N (default 0) as 784 comma-separated floats in [0, 1] (what
flow's ToTensor gives), for `flow_client infer --input image=...`; its label goes to stderr."""
import gzip
import sys

ROOT = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]

index = int(sys.argv[1]) if len(sys.argv) > 1 else 0
with gzip.open(f"{ROOT}/t10k-images-idx3-ubyte.gz") as f:
    pixels = f.read()[16 + 784 * index:16 + 784 * (index + 1)]
with gzip.open(f"{ROOT}/t10k-labels-idx1-ubyte.gz") as f:
    label = f.read()[8 + index]
print(",".join(f"{p / 255:.4f}" for p in pixels))
print(f"label {label} ({CLASSES[label]})", file=sys.stderr)
