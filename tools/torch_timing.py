"""The CUDA-event timing that the PyTorch comparison scripts in tools/ share (torch_decode_bench.py,
torch_features_bench.py, torch_sdpa_backward_bench.py, torch_varlen_bench.py), so that every anchor
is timed alike.
Imported from the script's own folder (Python puts it first on the path)."""
import torch


def seconds_per_call(fn, iters, warmup):
    """fn() `warmup` times untimed, then the mean seconds of `iters` calls between two CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters / 1e3
