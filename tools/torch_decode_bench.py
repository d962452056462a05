"""Times PyTorch's scaled_dot_product_attention backends on decoding shapes on a CUDA GPU, for
side-by-side runs with `clflash-bench --decode` (same shapes, same bandwidth figure).

Usage (on the GPU machine):
    python3 torch_decode_bench.py OUT.json [--dtype float16] [--d 128]
        [--shapes "1,32,8,1,4096;1,32,8,1,32768;..."]    (batch,heads_q,heads_kv,seq_q,seq_k; ...)

GB/s = bytes of K and V read (2 * batch * heads_kv * seq_k * d * element size) / time per call,
the time being the mean of 50 calls between CUDA events after 5 warm-up calls. GQA goes through
enable_gqa=True. Backends: flash (FlashAttention-2), cuDNN, mem-efficient; one that refuses a
shape gets null. Prints one JSON line per shape; writes them all to OUT.json.
"""
import argparse, json
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch_timing import seconds_per_call  # tools/torch_timing.py

DEFAULT_SHAPES = "1,32,8,1,4096;1,32,8,1,32768;1,32,8,1,131072;8,32,8,1,8192;32,32,8,1,4096;1,32,32,1,32768;8,32,8,16,8192"


def bench(fn):
    return seconds_per_call(fn, iters=50, warmup=5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--causal", action="store_true")
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION)]
    rows = []
    for spec in a.shapes.split(";"):
        b, hq, hkv, sq, sk = map(int, spec.split(","))
        q = torch.randn(b, hq, sq, a.d, device="cuda", dtype=dtype)
        k = torch.randn(b, hkv, sk, a.d, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        kv_bytes = 2 * b * hkv * sk * a.d * q.element_size()
        row = dict(batch=b, heads_q=hq, heads_kv=hkv, seq_q=sq, seq_k=sk, d=a.d, dtype=a.dtype,
                   causal=a.causal, kv_bytes=kv_bytes, torch=torch.__version__)
        for name, be in backends:
            try:
                with sdpa_kernel(be):
                    t = bench(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=a.causal,
                                                                     enable_gqa=hq != hkv))
                row[name + "_ms"] = round(t * 1e3, 5)
                row[name + "_gbps"] = round(kv_bytes / t / 1e9, 1)
            except Exception:
                row[name + "_ms"] = row[name + "_gbps"] = None
        print(json.dumps(row), flush=True)
        rows.append(row)
        del q, k, v
    json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
