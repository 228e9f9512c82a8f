"""PyTorch twin of bench/cuda_bench.cpp: the same cases, float32, TF32 off, on the same GPU.
Each case: warm-up, then the median of the timed repetitions, synchronised around each one."""
import sys
import time

import torch

reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 20
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.manual_seed(0)
dev = torch.device("cuda:0")


def median_ms(body):
    for _ in range(3):
        body()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        body()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[reps // 2]


def report(name, ms, flops):
    print(f"{name:<34} {ms:10.3f} ms {flops / ms / 1e9 if flops else 0.0:10.2f} TFLOP/s")


print(f"{'case (float32)':<34} {'median':>13} {'rate':>18}")
a, b = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
report("matmul 4096^3", median_ms(lambda: a @ b), 2.0 * 4096**3)
conv_flops = 2.0 * 32 * 64 * 56 * 56 * 64 * 9
x, w = torch.randn(32, 64, 56, 56, device=dev), torch.randn(64, 64, 3, 3, device=dev)
report("conv2d 32x64x56x56 3x3 forward", median_ms(lambda: torch.nn.functional.conv2d(x, w, padding=1)), conv_flops)
xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
grad = torch.randn(32, 64, 56, 56, device=dev)


def forward_backward():
    torch.nn.functional.conv2d(xg, wg, padding=1).backward(grad)
    xg.grad = None
    wg.grad = None


report("conv2d 3x3 forward+backward", median_ms(forward_backward), 3 * conv_flops)
stem = torch.randn(32, 64, 112, 112, device=dev)
report("max_pool2d 3x3/2 32x64x112x112", median_ms(lambda: torch.nn.functional.max_pool2d(stem, 3, 2, 1)), 0)
report("relu 32x64x112x112", median_ms(lambda: torch.relu(stem)), 0)
report("add 32x64x112x112", median_ms(lambda: stem + stem), 0)
