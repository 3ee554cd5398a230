#!/usr/bin/env python3
"""tunefarm.optimize with the Python and PyTorch of a GPU server (issue 55: the bundle's
python/tunefarm under a Python other than Debian's): a torchvision ResNet-18 with seeded random
weights, compiled for the GPU holding the example input, in float32 and as a .half() model
with half inputs (--precision fp16: products on tensor cores, 16-bit tensors in and out),
each checked against PyTorch's float32 model (TF32 off) and timed against PyTorch in the same
precision (eager, CUDA events, interleaved rounds; a rough figure: bench/gpu_model_bench.py is
the benchmark).

Run it with the package on the path, e.g. PYTHONPATH=<bundle>/python python3
bench/gpu_optimize_check.py. Without a CUDA GPU it runs the float32 case on the CPU (a smoke
test of the script). Prints one line per case; exits 1 when an output is off by more than the
issue's bounds (1e-3 of the largest value in float32, 1e-2 in fp16), 2 when it cannot run.
"""
import copy
import statistics
import sys
import tempfile
import time


def fail(msg, code=2):
    print("gpu_optimize_check: " + msg, file=sys.stderr)
    sys.exit(code)


def main():
    try:
        import torch
        import torchvision
        import tunefarm
    except ImportError as e:
        fail("needs PyTorch, torchvision and the tunefarm package (PYTHONPATH=<bundle>/python): %s" % e)
    gpu = torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    if gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        print("GPU: %s; PyTorch %s; Python %s" % (torch.cuda.get_device_name(), torch.__version__,
                                                  sys.version.split()[0]), flush=True)
    torch.manual_seed(0)
    model = torchvision.models.resnet18().eval().to(device)
    x = torch.randn(1, 3, 224, 224, device=device)
    with torch.no_grad():
        want = model(x)

    def sync():
        if gpu:
            torch.cuda.synchronize()

    def time_ms(fn, calls=20):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        return (time.perf_counter() - t0) * 1e3 / calls

    cases = [("float32", model, x, "fp32", 1e-3)]
    if gpu:
        cases.append(("float16", copy.deepcopy(model).half(), x.half(), "fp16", 1e-2))
    bad = 0
    with tempfile.TemporaryDirectory() as cache:
        for name, m, inp, precision, bound in cases:
            t0 = time.perf_counter()
            try:
                ours = tunefarm.optimize(m, inp, precision=precision, cache_dir=cache)
            except Exception as e:  # the check reports what failed, then goes on
                print("BAD  %-8s optimize failed: %s: %s" % (name, type(e).__name__, e), flush=True)
                bad += 1
                continue
            seconds = time.perf_counter() - t0
            with torch.no_grad():
                got = ours(inp)
                peer = m(inp)
            sync()
            err = (got.float() - want).abs().max().item() / want.abs().max().item()
            peer_err = (peer.float() - want).abs().max().item() / want.abs().max().item()
            ok = got.dtype == inp.dtype and got.device == inp.device and err < bound
            bad += not ok
            samples = {"ours": [], "torch": []}
            with torch.no_grad():
                for fn in (lambda: ours(inp), lambda: m(inp)):  # warm-up
                    time_ms(fn, 5)
                for _ in range(5):
                    samples["ours"].append(time_ms(lambda: ours(inp)))
                    samples["torch"].append(time_ms(lambda: m(inp)))
            o, t = statistics.median(samples["ours"]), statistics.median(samples["torch"])
            print("%-4s %-8s %s -> %s %s, max error %.2g of the largest value (PyTorch in %s: %.2g); "
                  "optimize %.1f s; eager %.3f ms vs PyTorch %.3f ms (ratio %.2f)" %
                  ("ok" if ok else "BAD", name, inp.dtype, got.dtype, got.device, err, name, peer_err, seconds,
                   o, t, t / o), flush=True)
    if bad:
        fail("%d of %d cases failed" % (bad, len(cases)), 1)


if __name__ == "__main__":
    main()
