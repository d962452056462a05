"""Times the backward pass of PyTorch's scaled_dot_product_attention backends on a CUDA GPU, to set
clflash-bench --backward beside them in one device run (a developer tool; not built or installed).

Why: the shared forward benchmark (torch_sdpa_bench.py) has no backward, and the backward targets
are set against PyTorch's FlashAttention-2 backend.

Usage (on the GPU machine): python3 torch_sdpa_backward_bench.py OUT.json [--dtype float16,bfloat16]
       [--d 64,128] [--n 1024,4096,16384]
Shapes are clflash-bench's and torch_sdpa_bench.py's: batch*seq = 16384 tokens, heads*d = 2048.
Only the backward is timed: the forward runs once per shape, then out.backward(dO, retain_graph=True)
repeats. FLOP count: 2.5 * 4*b*h*n*n*d (five matrix products against the forward's two), halved
for causal, as clflash-bench --backward counts it. Prints one JSON line per shape; writes all to
OUT.json.
"""
import argparse
import json

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch_timing import seconds_per_call  # tools/torch_timing.py


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float16,bfloat16")
    ap.add_argument("--d", default="64,128")
    ap.add_argument("--n", default="1024,4096,16384")
    args = ap.parse_args()
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    rows = []
    for dtype_name in args.dtype.split(","):
        dtype = getattr(torch, dtype_name)
        for d in map(int, args.d.split(",")):
            for n in map(int, args.n.split(",")):
                for causal in (False, True):
                    h, b = 2048 // d, max(1, 16384 // n)
                    flops = 2.5 * 4 * b * h * n * n * d / (2 if causal else 1)
                    row = dict(dtype=dtype_name, d=d, n=n, causal=causal, b=b, h=h, pass_="backward")
                    for name, backend in backends:
                        try:
                            q = torch.randn(b, h, n, d, device="cuda", dtype=dtype, requires_grad=True)
                            k = torch.randn_like(q, requires_grad=True)
                            v = torch.randn_like(q, requires_grad=True)
                            with sdpa_kernel(backend):
                                out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            grad = torch.randn_like(out)
                            t = seconds_per_call(lambda: out.backward(grad, retain_graph=True), iters=10, warmup=2)
                            row[name + "_tflops"] = round(flops / t / 1e12, 1)
                            del q, k, v, out, grad
                        except Exception:
                            row[name + "_tflops"] = None
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    json.dump(rows, open(args.out, "w"), indent=1)


if __name__ == "__main__":
    main()
