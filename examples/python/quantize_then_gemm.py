"""Quantise a linear layer's activations and weights to fp8, then multiply with weave, next to
torch doing the same: the pattern an inference engine's fp8 linear layer follows.

    python examples/python/quantize_then_gemm.py [--m 4096 --n 5120 --k 2048] [--mode ptpc|blockscale|bf16]

Per-token x per-channel (ptpc) or DeepSeek 1x128 / 128x128 (blockscale) scales, quantised with
plain torch. weave's result is compared with torch._scaled_mm on the same fp8 operands (where
cuBLASLt takes the shape) and with torch.matmul on the dequantised operands; then both are timed
inside CUDA graphs. Without a Hopper GPU (or torch with CUDA) it says why and exits 77 ("skipped": it could not run), like the C++
examples.
"""
import argparse
import sys

import weave

try:
    import torch
except ImportError:  # skip_reason() says so
    torch = None

FP8_MAX = 448.0


def quantize_rows(x):  # per-token / per-channel: one fp32 scale per row
    scale = x.abs().amax(dim=1).float().clamp_min(1e-12) / FP8_MAX
    return (x / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


def quantize_blocks(x, rows_per_block):  # 1x128 (activations) or 128x128 (weights)
    r, k = x.shape
    rb = (r + rows_per_block - 1) // rows_per_block
    padded = torch.zeros(rb * rows_per_block, k, device=x.device, dtype=x.dtype)
    padded[:r] = x
    amax = padded.view(rb, rows_per_block, k // 128, 128).abs().amax(dim=(1, 3)).float()
    scale = amax.clamp_min(1e-12) / FP8_MAX                          # [ceil(r / rows), k / 128]
    full = scale.repeat_interleave(rows_per_block, 0)[:r].repeat_interleave(128, 1)
    return (x / full).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale.contiguous(), full


def graph_time_us(fn, iters=50):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(iters):
            fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    start.record()
    g.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / iters


def skip_reason() -> str:
    """'' when this machine can run the example, else why not (the C++ examples skip alike: exit 77)."""
    if weave.no_gpu_reason():
        return weave.no_gpu_reason()
    if torch is None:
        return "this example needs PyTorch with CUDA (pip install torch)"
    return "" if torch.cuda.is_available() else "torch sees no CUDA device"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--n", type=int, default=5120)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--mode", choices=["ptpc", "blockscale", "bf16"], default="ptpc")
    args = ap.parse_args()
    why = skip_reason()
    if why:
        print(f"GPU part skipped: {why}")
        return 77  # the usual "skipped" status, as the C++ examples
    m, n, k = args.m, args.n, args.k
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)           # activations
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02    # weight [out, in]
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    if args.mode == "bf16":
        gemm = weave.Gemm(x, w, out)                                     # out = x @ w.T
        reference = (x.float() @ w.float().T)
        torch_fn = lambda: torch.matmul(x, w.T)                          # noqa: E731
    elif args.mode == "ptpc":
        qx, sx = quantize_rows(x)
        qw, sw = quantize_rows(w)
        gemm = weave.Gemm(qx, qw, out, scale_a=sx, scale_b=sw, mode="ptpc")
        reference = (qx.float() * sx[:, None]) @ (qw.float() * sw[:, None]).T
        torch_fn = lambda: torch._scaled_mm(qx, qw.t(), scale_a=sx[:, None].contiguous(),  # noqa: E731
                                            scale_b=sw[None, :].contiguous(), out_dtype=torch.bfloat16)
    else:
        qx, sx, fx = quantize_blocks(x, 1)
        qw, sw, fw = quantize_blocks(w, 128)
        gemm = weave.Gemm(qx, qw, out, scale_a=sx, scale_b=sw, mode="blockscale")
        reference = (qx.float() * fx) @ (qw.float() * fw).T
        # cuBLASLt wants scale_a outer-dim-major and scale_b as the transpose of weave's layout.
        torch_fn = lambda: torch._scaled_mm(qx, qw.t(), scale_a=sx.t().contiguous().t(), scale_b=sw.t(),  # noqa: E731
                                            out_dtype=torch.bfloat16)

    print(f"{gemm}\n  plan: {gemm.plan.reason}")
    gemm.run()                                    # enqueued on torch.cuda.current_stream()
    torch.cuda.synchronize()
    err = ((out.float() - reference).norm() / reference.norm()).item()
    print(f"  weave vs torch.matmul on the same operands: rel L2 {err:.2e}")
    try:
        theirs = torch_fn()
        print(f"  weave vs torch ({'matmul' if args.mode == 'bf16' else '_scaled_mm'}): rel L2 "
              f"{((out.float() - theirs.float()).norm() / theirs.float().norm()).item():.2e}")
        t_torch = graph_time_us(torch_fn)
    except RuntimeError as e:                     # cuBLASLt refuses some shapes (small or odd M)
        print(f"  torch refused this shape: {str(e)[:100]}")
        t_torch = None
    t_weave = graph_time_us(gemm.run)
    flops = 2 * m * n * k
    line = f"  weave {t_weave:.1f} us ({flops / t_weave / 1e6:.0f} TFLOP/s)"
    if t_torch:
        line += f", torch {t_torch:.1f} us ({flops / t_torch / 1e6:.0f} TFLOP/s), weave/torch time {t_weave / t_torch:.2f}x"
    print(line)


if __name__ == "__main__":
    sys.exit(main())
