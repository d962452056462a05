"""Times PyTorch's variable-length (packed) attention on the shape of a `clflash-bench --varlen --json`
run, on a CUDA GPU, and prints it beside clflash's figures from that JSON: the anchor of the target
"varlen prefill within 1.1x of the same tokens run as separate calls".

Usage (on the GPU machine):
    clflash-bench --varlen --json [options] > varlen.json
    python3 torch_varlen_bench.py varlen.json [--iters 20] [--warmup 3] [--out torch_varlen.json]

The shape is the JSON's config: lengths (query length = key length per sequence), heads, heads_kv,
head_dim, dtype, causal, backward. Packed Q, K, V are [total][heads][head_dim] tensors with int32
cumulative lengths, as clflash's. Two PyTorch figures:
  varlen    one packed call: torch.nn.attention.varlen.varlen_attn when this PyTorch has it (its
            signature is read at run time: causal is is_causal=True in early versions and
            window_size=(-1, 0) later, GQA needs enable_gqa where that exists), else
            torch.ops.aten._flash_attention_forward with cum_seq_q/cum_seq_k (FlashAttention-2's
            varlen kernel); with backward, the gradients of Q, K and V (autograd for varlen_attn,
            aten._flash_attention_backward for the aten op)
  separate  one scaled_dot_product_attention call per sequence on the flash backend (views of the
            same packed tensors, [1][heads][length][head_dim]), all of them timed as one set
Time per call (per set): the mean of --iters calls between CUDA events after --warmup calls
(tools/torch_timing.py). TFLOP/s uses the JSON's visible pairs: 4 * head_dim * pairs, 2.5x that for
the backward, as clflash-bench counts them. A path that refuses the shape gets null and its reason.
Without CUDA (or without PyTorch) it says so and exits 0.
"""
import argparse
import inspect
import json
import sys

DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


def packed_attention(torch, q, k, v, cu, longest, causal, gqa):
    """(name, forward, backward_maker) for PyTorch's packed attention on these tensors; forward()
    returns O, backward_maker() returns a function that computes dQ, dK, dV once. Raises if no
    packed path takes the shape."""
    errors = []
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError as ex:
        varlen_attn = None
        errors.append("no torch.nn.attention.varlen.varlen_attn (%s)" % ex)
    if varlen_attn is not None:
        params = inspect.signature(varlen_attn).parameters
        kw = {}
        usable = True
        if causal:
            if "is_causal" in params:
                kw["is_causal"] = True
            elif "window_size" in params:
                kw["window_size"] = (-1, 0)  # (left, right): every key up to the diagonal
            else:
                usable = False
                errors.append("varlen_attn takes neither is_causal nor window_size")
        if gqa and "enable_gqa" in params:
            kw["enable_gqa"] = True
        if usable:
            def forward():
                out = varlen_attn(q, k, v, cu, cu, longest, longest, **kw)
                return out[0] if isinstance(out, tuple) else out

            def backward_maker():
                leaves = [x.detach().requires_grad_() for x in (q, k, v)]
                out = varlen_attn(*leaves, cu, cu, longest, longest, **kw)
                out = out[0] if isinstance(out, tuple) else out
                d_o = torch.randn_like(out)
                return lambda: torch.autograd.grad(out, leaves, d_o, retain_graph=True)
            try:
                forward()
                return "torch.nn.attention.varlen.varlen_attn", forward, backward_maker
            except Exception as ex:  # noqa: BLE001 - try the next path, keep the reason
                errors.append("varlen_attn: %s" % str(ex)[:200])

    aten_fwd = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if aten_fwd is None:
        raise RuntimeError("; ".join(errors + ["no aten._flash_attention_forward"]))

    def forward_all():
        # (output, logsumexp, philox seed, philox offset, debug mask)
        return aten_fwd(q, k, v, cu, cu, longest, longest, 0.0, causal, False)

    def backward_maker():
        out, lse, seed, offset = forward_all()[:4]
        d_o = torch.randn_like(out)
        aten_bwd = torch.ops.aten._flash_attention_backward
        return lambda: aten_bwd(d_o, q, k, v, out, lse, cu, cu, longest, longest, 0.0, causal, seed, offset)
    try:
        forward_all()
    except Exception as ex:  # noqa: BLE001
        raise RuntimeError("; ".join(errors + ["aten._flash_attention_forward: %s" % str(ex)[:200]]))
    return "aten._flash_attention_forward (cum_seq_q/cum_seq_k)", lambda: forward_all()[0], backward_maker


def separate_sdpa(torch, q, k, v, bounds, causal, gqa, backward):
    """A function that runs one flash-backend SDPA call per sequence (the forward, or with backward
    the gradients of every sequence's Q, K and V), and the forward's outputs, packed again."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend

    def heads_first(x, lo, hi):  # rows lo..hi-1 of [total][heads][d] as [1][heads][len][d]
        return x[lo:hi].transpose(0, 1).unsqueeze(0)

    kw = {"is_causal": causal}
    if gqa:
        kw["enable_gqa"] = True
    views = [tuple(heads_first(x, lo, hi) for x in (q, k, v)) for lo, hi in bounds]

    def forward():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return [F.scaled_dot_product_attention(*qkv, **kw) for qkv in views]
    outs = forward()
    packed = torch.cat([o[0].transpose(0, 1) for o in outs])
    if not backward:
        return forward, packed
    leaves = [tuple(x.detach().requires_grad_() for x in qkv) for qkv in views]
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        outs = [F.scaled_dot_product_attention(*qkv, **kw) for qkv in leaves]
    d_os = [torch.randn_like(o) for o in outs]
    flat = [x for qkv in leaves for x in qkv]
    return (lambda: torch.autograd.grad(outs, flat, d_os, retain_graph=True)), packed


def fmt(x, spec):
    return format(x, spec) if x is not None else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("clflash_json", help="the output of clflash-bench --varlen --json")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", help="also write the PyTorch and clflash figures to this JSON file")
    a = ap.parse_args()
    with open(a.clflash_json) as f:
        cl = json.load(f)
    cfg = cl["config"]
    lengths = [int(x) for x in cfg["lengths"]]
    hq, hkv, d = int(cfg["heads"]), int(cfg["heads_kv"]), int(cfg["head_dim"])
    causal, backward = bool(cfg["causal"]), bool(cfg["backward"])
    pairs = int(cl["pairs"])
    flops = (10.0 if backward else 4.0) * d * pairs

    try:
        import torch
    except ImportError:
        print("torch_varlen_bench.py: PyTorch is not installed here; nothing timed")
        return 0
    if not torch.cuda.is_available():
        print("torch_varlen_bench.py: no CUDA device; nothing timed")
        return 0
    from torch_timing import seconds_per_call  # tools/torch_timing.py

    dtype = getattr(torch, DTYPES[cfg["dtype"]])
    total, longest = sum(lengths), max(lengths)
    cu_list = [0]
    for n in lengths:
        cu_list.append(cu_list[-1] + n)
    bounds = list(zip(cu_list[:-1], cu_list[1:]))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(total, hq, d, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(total, hkv, d, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(total, hkv, d, device="cuda", dtype=dtype, generator=gen)
    cu = torch.tensor(cu_list, device="cuda", dtype=torch.int32)
    gqa = hq != hkv

    row = dict(lengths=lengths, heads=hq, heads_kv=hkv, head_dim=d, dtype=cfg["dtype"], causal=causal,
               backward=backward, pairs=pairs, torch=torch.__version__, gpu=torch.cuda.get_device_name())

    def timed(fn):
        return seconds_per_call(fn, iters=a.iters, warmup=a.warmup) * 1e3

    varlen_out = None
    try:
        name, forward, backward_maker = packed_attention(torch, q, k, v, cu, longest, causal, gqa)
        row["torch_varlen_path"] = name
        row["torch_varlen_ms"] = timed(backward_maker() if backward else forward)
        varlen_out = forward()
    except Exception as ex:  # noqa: BLE001 - a refusal is a null, with its reason
        row["torch_varlen_ms"] = None
        row["torch_varlen_error"] = str(ex)[:400]
    try:
        fn, separate_out = separate_sdpa(torch, q, k, v, bounds, causal, gqa, backward)
        row["torch_separate_ms"] = timed(fn)
        if varlen_out is not None:
            row["torch_varlen_vs_separate_max_diff"] = float((varlen_out.float() - separate_out.float()).abs().max())
    except Exception as ex:  # noqa: BLE001
        row["torch_separate_ms"] = None
        row["torch_separate_error"] = str(ex)[:400]
    for case in ("varlen", "separate"):
        row["clflash_%s_ms" % case] = cl.get(case, {}).get("ms")
        row["clflash_%s_kernel" % case] = cl.get(case, {}).get("kernel")

    print("shape: %d sequences, %d tokens (%d to %d), heads %d/%d, head_dim %d, %s%s, %s"
          % (len(lengths), total, min(lengths), longest, hq, hkv, d, cfg["dtype"], ", causal" if causal else "",
             "backward" if backward else "forward"))
    print("PyTorch %s on %s; clflash %s on %s" % (torch.__version__, row["gpu"], cl.get("version"), cl.get("device")))
    print()
    print("%-24s %10s %9s  %s" % ("", "ms", "TFLOP/s", "what"))
    table = [("PyTorch varlen", row["torch_varlen_ms"], row.get("torch_varlen_path", row.get("torch_varlen_error"))),
             ("PyTorch separate SDPA", row["torch_separate_ms"],
              "%d calls, flash backend" % len(lengths) if row["torch_separate_ms"] is not None
              else row.get("torch_separate_error")),
             ("clflash varlen", row["clflash_varlen_ms"], row["clflash_varlen_kernel"]),
             ("clflash separate", row["clflash_separate_ms"],
              "%d calls, %s" % (len(lengths), row["clflash_separate_kernel"]))]
    for label, ms, what in table:
        tflops = flops / (ms * 1e-3) / 1e12 if ms else None
        print("%-24s %10s %9s  %s" % (label, fmt(ms, ".4f"), fmt(tflops, ".1f"), what))
    print()
    tv, ts = row["torch_varlen_ms"], row["torch_separate_ms"]
    cv, cs = row["clflash_varlen_ms"], row["clflash_separate_ms"]
    if tv and ts:
        print("PyTorch varlen / separate: %.3f" % (tv / ts))
    if cv and cs:
        print("clflash varlen / separate: %.3f" % (cv / cs))
    if tv and cv:
        print("clflash varlen / PyTorch varlen: %.3f" % (cv / tv))
    if "torch_varlen_vs_separate_max_diff" in row:
        print("PyTorch varlen against separate SDPA, largest |difference| of O: %.3g"
              % row["torch_varlen_vs_separate_max_diff"])
    if a.out:
        with open(a.out, "w") as f:
            json.dump(row, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
