"""PyTorch's matmul on the GPU: the reference for gpukit_matmul_bench (same shapes, dtypes,
timing and output format).

Run on the GPU host, with its Python and torch::

    python3 tests/bench/torch_matmul_reference.py [--sizes 4096,8192] [--reps 20]
        [--data pattern|random]

Each case is torch.matmul of two n x n matrices into a preallocated output, timed with CUDA
events around one call, median of ``reps`` runs after 3 warm-ups. FLOPs are 2 n^3. "fp32"
runs with torch.backends.cuda.matmul.allow_tf32 = False, "tf32" with it True. Inputs as the
gpukit benchmark's: "pattern" (i % 7 + 1) / 8, or "random" standard normal values.
"""

import argparse
import statistics

import torch


def median_seconds(fn, reps: int) -> float:
    times = []
    for i in range(reps + 3):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= 3:
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,8192")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--data", choices=["pattern", "random"], default="pattern")
    args = parser.parse_args()
    device = torch.device("cuda")
    print(f"device: {torch.cuda.get_device_name(device)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, torch.matmul, median of {args.reps} runs, {args.data} "
          "inputs")
    cases = [("fp32", torch.float32, False), ("tf32", torch.float32, True),
             ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)]
    for n in (int(s) for s in args.sizes.split(",")):
        # As the gpukit benchmark fills its inputs (for "random", the same distribution).
        if args.data == "random":
            generator = torch.Generator(device).manual_seed(1)
            values = torch.randn(n, n, device=device, generator=generator)
        else:
            values = ((torch.arange(n * n, device=device) % 7 + 1).float() * 0.125).reshape(n, n)
        for name, dtype, tf32 in cases:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            a = values.to(dtype)
            b = values.to(dtype)
            out = torch.empty(n, n, dtype=dtype, device=device)
            seconds = median_seconds(lambda: torch.matmul(a, b, out=out), args.reps)
            tflops = 2.0 * n * n * n / seconds / 1e12
            print(f"matmul {n:5d}^3 {name:<4} {seconds * 1e3:10.3f} ms {tflops:8.1f} TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = False


if __name__ == "__main__":
    main()
