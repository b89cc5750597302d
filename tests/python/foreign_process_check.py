"""weave inside a process that loads other C++ libraries (issue 13's regression check).

    python foreign_process_check.py torch,weave     (or weave,torch / numpy,weave / weave,numpy)

Imports the modules in the order given, then plans every GEMM mode (the planner formats its
reasons with iostreams: where libweave.so exported libstdc++ stream symbols, this crashed with
SIGSEGV in std::ostream::_M_insert<long>), formats errors, and, when a Hopper GPU and torch are
there, constructs and runs every GEMM mode against torch and an all-reduce on a one-rank
communicator. Prints "foreign-process check ok" and exits 0, or fails loudly.
"""
import importlib
import os
import random
import sys

order = sys.argv[1].split(",") if len(sys.argv) > 1 else ["torch", "weave"]
mods = {name: importlib.import_module(name) for name in order}
weave = mods["weave"]

for mode, k in (("bf16", 2048), ("ptpc", 2048), ("blockscale", 7168), ("mxfp8", 2048)):
    for m in (1, 77, 4096):
        plan = weave.plan_gemm(m, 5120, k, mode, "bf16")
        assert plan.kernel and plan.reason, plan
    assert weave.plan_gemm(4096, 5120, k, mode, "fp32", scale_layout="packed" if mode == "mxfp8" else "raw").grid > 0
try:
    weave.plan_gemm(3, 7, 9, "blockscale")
    raise AssertionError("an invalid problem was planned")
except weave.ArgumentError as e:
    assert "k must be a multiple of 128" in e.message
print(f"plans ok ({' -> '.join(order)})")

if weave.no_gpu_reason():
    print(f"foreign-process check ok (CPU part; GPU part skipped: {weave.no_gpu_reason()})")
    sys.exit(0)
try:
    import torch
except ImportError:
    print("foreign-process check ok (CPU part; GPU part skipped: torch is not installed)")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quant  # noqa: E402

seed = int(os.environ.get("WEAVE_TEST_SEED", random.SystemRandom().randrange(1 << 31)))
torch.manual_seed(seed)
dev = torch.device("cuda", 0)
M, N, K = 203, 512, 1024


def check(name, out, ref, rtol):
    got = out.float()
    assert not torch.isnan(got).any(), f"{name}: NaN left in the output (seed {seed})"
    err = (got - ref).norm() / ref.norm()
    assert err < rtol, f"{name}: relative error {err:.3e} > {rtol} (seed {seed})"
    print(f"{name}: rel err {err:.2e}")


x = torch.randn(M, K, device=dev)
w = torch.randn(N, K, device=dev) * 0.05
nan = float("nan")

out = torch.full((M, N), nan, device=dev, dtype=torch.bfloat16)
a16, b16 = x.to(torch.bfloat16), w.to(torch.bfloat16)
weave.Gemm(a16, b16, out).run()
torch.cuda.synchronize()
check("bf16", out, a16.float() @ b16.float().T, 1e-2)

qa, sa = quant.ptpc(x)
qb, sb = quant.ptpc(w)
out = torch.full((M, N), nan, device=dev, dtype=torch.bfloat16)
weave.Gemm(qa, qb, out, scale_a=sa, scale_b=sb, mode="ptpc").run()
torch.cuda.synchronize()
check("ptpc", out, (qa.float() * sa[:, None]) @ (qb.float() * sb[:, None]).T, 1e-2)

qa, sa = quant.blockscale(x, 1)
qb, sb = quant.blockscale(w, 128)
out = torch.full((M, N), nan, device=dev, dtype=torch.float32)
weave.Gemm(qa, qb, out, scale_a=sa, scale_b=sb, mode="blockscale").run()
torch.cuda.synchronize()
# fp8 partial sums are promoted to fp32 once per 128-wide K block, as cuBLASLt does: rel L2 ~1.3e-4.
check("blockscale", out, quant.dequant_blockscale(qa, sa, 1) @ quant.dequant_blockscale(qb, sb, 128).T, 5e-4)

qa, sa = quant.mxfp8(x, 1)
qb, sb = quant.mxfp8(w, 32)
ref = quant.dequant_mx(qa, sa, 1) @ quant.dequant_mx(qb, sb, 32).T
for layout, (pa, pb) in (("raw", (sa, sb)), ("packed", (quant.pack_mx_reference(sa).to(dev),
                                                        quant.pack_mx_reference(sb).to(dev)))):
    out = torch.full((M, N), nan, device=dev, dtype=torch.float32)
    weave.Gemm(qa, qb, out, scale_a=pa, scale_b=pb, mode="mxfp8", scale_layout=layout).run()
    torch.cuda.synchronize()
    check(f"mxfp8 {layout}", out, ref, 1e-4)

(comm,) = weave.Communicator.create_local([0])
op = weave.Collective(comm, "all-reduce", max_count=1 << 16, dtype="bf16")
inp = torch.randn(1 << 16, device=dev).to(torch.bfloat16)
res = torch.full_like(inp, nan)
op.run(inp, res)
torch.cuda.synchronize()
assert torch.equal(res, inp), f"one-rank all-reduce changed the data ({op.describe()})"
print(f"collective ok: {op.describe()}")
print(f"foreign-process check ok (GPU part, seed {seed})")
