"""Times PyTorch on the cases of `clflash-bench --features` on a CUDA GPU, for side-by-side runs
(same shape, same cases, same visible-pair count).

Usage (on the GPU machine):
    python3 torch_features_bench.py OUT.json [--batch 4] [--heads 16] [--seq 4096] [--d 128]
        [--dtype float16] [--window 1024] [--softcap 50] [--key-lengths 4096,3000,2048,4096]
        [--cases plain,causal,causal-window,softcap,alibi,keylens,causal-softcap,bias] [--backward]

Each case as clflash-bench --features defines it: window = |i - j| <= W, causal-window =
0 <= i - j <= W, softcap = cap * tanh(s / cap), alibi = s - 2^-(1 + h % 8) * |i - j|, keylens =
j < length[b] (cycled over the batch), bias = s + B[i][j] (one fp32 [seq][seq] bias), bias-full =
s + B[b][h][i][j], bias-keys = s + B[j] (one fp32 [seq] bias of the keys), bias-grad = bias with B
requiring its gradient (with --backward the backward
computes dB too, summed over batch and heads, as clflash's bias_grad). Backends: flex_attention under torch.compile (Triton) with the case's block
mask and score_mod, for every case; SDPA's FlashAttention-2 for plain and causal; SDPA's cuDNN and
mem-efficient backends with the bias as a float attn_mask (broadcast for bias, bias-keys and bias-grad) and,
for keylens, a boolean mask. A backend that refuses a case gets null. Time per call: the mean of 20 calls
between CUDA events after 3 warm-up calls. With --backward (as `clflash-bench --features
--backward`) the time is that of the backward alone: torch.autograd.grad of one forward's output
for Q, K and V with a random dO, repeated on the retained graph. Prints one JSON line per case;
writes them all to OUT.json.
"""
import argparse, json
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
from torch.nn.attention.flex_attention import flex_attention, create_block_mask
from torch_timing import seconds_per_call  # tools/torch_timing.py


def bench(fn):
    return seconds_per_call(fn, iters=20, warmup=3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--softcap", type=float, default=50.0)
    ap.add_argument("--key-lengths", default=None)
    ap.add_argument("--cases", default="plain,causal,causal-window,softcap,alibi,keylens,causal-softcap,bias")
    ap.add_argument("--backward", action="store_true")
    a = ap.parse_args()
    b, h, n, d = a.batch, a.heads, a.seq, a.d
    dtype = getattr(torch, a.dtype)
    W, cap = a.window, a.softcap
    lens_list = [int(x) for x in a.key_lengths.split(",")] if a.key_lengths else [n, n * 3000 // 4096, n // 2, n]
    lens = torch.tensor([lens_list[i % len(lens_list)] for i in range(b)], device="cuda", dtype=torch.int32)
    slopes = torch.tensor([2.0 ** -(1 + i % 8) for i in range(h)], device="cuda", dtype=torch.float32)
    q = torch.randn(b, h, n, d, device="cuda", dtype=dtype)
    k, v = torch.randn_like(q), torch.randn_like(q)
    for x in (q, k, v):
        x.requires_grad_(a.backward)

    def timed(fn, extra=()):
        """The forward fn's time, or with --backward its backward's (gradients of Q, K, V and extra)."""
        if not a.backward:
            return bench(fn)
        out = fn()
        d_o = torch.randn_like(out)
        return bench(lambda: torch.autograd.grad(out, (q, k, v) + tuple(extra), d_o, retain_graph=True))
    # Every case (its score_mod and block mask) compiles flex_attention again; past dynamo's limit
    # of 8 recompiles a call falls back to the unfused path silently (the ninth case of a run, a
    # broadcast bias, took 44 ms there against 1.4 fused), so the limit is raised for the run.
    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    flex = torch.compile(flex_attention, dynamic=False)  # no dynamic shapes after the recompiles the cases cause

    def causal(b_, h_, i, j): return i >= j
    def window(b_, h_, i, j): return (i - j <= W) & (j - i <= W)
    def causal_window(b_, h_, i, j): return (i >= j) & (i - j <= W)
    def keylen(b_, h_, i, j): return j < lens[b_]
    def softcap(s, b_, h_, i, j): return cap * torch.tanh(s / cap)
    def alibi(s, b_, h_, i, j): return s - slopes[h_] * (i - j).abs()
    def causal_softcap(s, b_, h_, i, j): return cap * torch.tanh(s / cap)
    bias = None
    bias_full = None
    bias_keys = None
    cases = a.cases.split(",")
    if "bias" in cases or "bias-grad" in cases:
        bias = torch.rand(n, n, device="cuda", dtype=torch.float32) * 2 - 1
    bias_g = bias.clone().requires_grad_(a.backward) if "bias-grad" in cases else None
    if "bias-full" in cases:
        bias_full = torch.zeros(b, h, n, n, device="cuda", dtype=torch.float32)
    if "bias-keys" in cases:
        bias_keys = torch.rand(n, device="cuda", dtype=torch.float32) * 2 - 1
    def add_bias(s, b_, h_, i, j): return s + bias[i, j]
    def add_bias_full(s, b_, h_, i, j): return s + bias_full[b_, h_, i, j]
    def add_bias_grad(s, b_, h_, i, j): return s + bias_g[i, j]
    def add_bias_keys(s, b_, h_, i, j): return s + bias_keys[j]

    spec = {  # case: (mask_mod, score_mod, batch-dependent mask)
        "plain": (None, None, False), "causal": (causal, None, False), "window": (window, None, False),
        "causal-window": (causal_window, None, False), "softcap": (None, softcap, False),
        "causal-softcap": (causal, causal_softcap, False), "alibi": (None, alibi, False),
        "causal-alibi": (causal, alibi, False), "keylens": (keylen, None, True),
        "bias": (None, add_bias, False), "bias-full": (None, add_bias_full, False),
        "bias-grad": (None, add_bias_grad, False), "bias-keys": (None, add_bias_keys, False),
    }
    rows = []
    for case in cases:
        mask_mod, score_mod, per_batch = spec[case]
        extra = (bias_g,) if case == "bias-grad" and a.backward else ()
        i_ = torch.arange(n, device="cuda")[:, None]
        j_ = torch.arange(n, device="cuda")[None, :]
        vis = torch.ones(n, n, dtype=torch.bool, device="cuda")
        if mask_mod is not None and not per_batch:
            vis = mask_mod(0, 0, i_, j_)
        pairs = int(vis.sum().item()) * h * b
        if per_batch:
            pairs = sum(min(int(lens[x].item()), n) * n for x in range(b)) * h
        row = dict(case=case, backward=a.backward, batch=b, heads=h, seq=n, d=d, dtype=a.dtype, window=W, softcap=cap, pairs=pairs,
                   torch=torch.__version__)
        try:
            bm = create_block_mask(mask_mod, b if per_batch else None, None, n, n) if mask_mod else None
            t = timed(lambda: flex(q, k, v, score_mod=score_mod, block_mask=bm), extra)
            row["flex_ms"] = round(t * 1e3, 4)
        except Exception as ex:  # noqa: BLE001 - a refusal is a null, with its reason
            row["flex_ms"] = None
            row["flex_error"] = str(ex)[:200]
        sdpa = []
        if case in ("plain", "causal"):
            sdpa.append(("flash", SDPBackend.FLASH_ATTENTION, None, case == "causal"))
        if case in ("plain", "causal"):
            sdpa.append(("cudnn", SDPBackend.CUDNN_ATTENTION, None, case == "causal"))
        if case == "bias":
            m = bias.to(dtype)[None, None].expand(b, h, n, n)
            sdpa += [("cudnn", SDPBackend.CUDNN_ATTENTION, m, False), ("efficient", SDPBackend.EFFICIENT_ATTENTION, m, False)]
        if case == "bias-keys":
            m = bias_keys.to(dtype)[None, None, None].expand(b, h, n, n)
            sdpa += [("cudnn", SDPBackend.CUDNN_ATTENTION, m, False), ("efficient", SDPBackend.EFFICIENT_ATTENTION, m, False)]
        if case == "bias-grad":
            m = bias_g.to(dtype)[None, None].expand(b, h, n, n)
            sdpa += [("cudnn", SDPBackend.CUDNN_ATTENTION, m, False), ("efficient", SDPBackend.EFFICIENT_ATTENTION, m, False)]
        if case == "keylens":
            m = (j_[None, None] < lens[:, None, None, None]).expand(b, h, n, n)
            sdpa += [("cudnn", SDPBackend.CUDNN_ATTENTION, m, False), ("efficient", SDPBackend.EFFICIENT_ATTENTION, m, False)]
        for name, be, m, is_causal in sdpa:
            try:
                with sdpa_kernel(be):
                    t = timed(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=is_causal), extra)
                row[name + "_ms"] = round(t * 1e3, 4)
            except Exception:  # noqa: BLE001
                row[name + "_ms"] = None
        print(json.dumps(row), flush=True)
        rows.append(row)
    json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
