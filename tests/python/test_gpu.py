"""The package on a Hopper GPU, against torch (skipped, with the reason, elsewhere). Operands are
quantised with torch (tests/python/quant.py); references are torch._scaled_mm where cuBLASLt takes
the shape and torch.matmul in fp32 on the same dequantised operands always. Outputs are
NaN-poisoned first; seeds are fresh per test (printed)."""
import pytest

from conftest import GPU_SKIP

if GPU_SKIP:
    pytest.skip(GPU_SKIP, allow_module_level=True)
torch = pytest.importorskip("torch")
import quant  # noqa: E402
import weave  # noqa: E402

DEV = torch.device("cuda", 0) if torch.cuda.is_available() else None
NAN = float("nan")


def poisoned(m, n, dtype):
    return torch.full((m, n), NAN, device=DEV, dtype=dtype)


def assert_close(out, ref, mode, what):
    """Bounds against the fp32 reference on the same quantised operands (those of
    tests/gpu/test_gemm_support.hpp): bf16 inputs are exact products with fp32 sums; fp8 inputs go
    through the tensor cores' fp8 accumulation (~13-14 mantissa bits inside each wgmma, measured on
    H200: rel L2 ~1e-4, ptpc elements up to ~3e-2 x rms at long K). A missed tile, a race or a
    wrong scale moves elements by O(rms), far outside either bound."""
    got = out.float()
    assert not torch.isnan(got).any(), f"{what}: {int(torch.isnan(got).sum())} outputs never written (NaN)"
    err = ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    rms = ref.pow(2).mean().sqrt().item()
    bf16_out = out.dtype == torch.bfloat16
    if mode == "bf16":
        rel_l2, rtol, atol = (5e-3, 2 ** -7, 1e-2 * rms) if bf16_out else (2e-5, 1e-4, 1e-4 * rms)
    else:
        rel_l2, rtol, atol = 1e-3 if not bf16_out else 5e-3, 2 ** -7 if bf16_out else 1e-2, \
            (3e-2 if mode == "ptpc" else 1e-2) * rms
    assert err <= rel_l2, f"{what}: relative L2 error {err:.3e} > {rel_l2}"
    bad = (got - ref).abs() > rtol * ref.abs() + atol
    assert not bad.any(), (f"{what}: {int(bad.sum())} elements outside |d| <= {rtol:.2e} |ref| + {atol:.2e}; "
                           f"max |d| {(got - ref).abs().max().item():.3e}")


def operands(m, n, k, gen):
    x = torch.randn(m, k, device=DEV, generator=gen)
    w = torch.randn(n, k, device=DEV, generator=gen) * 0.05
    return x, w


def quantised(mode, x, w, layout="raw"):
    """(a, b, scale_a, scale_b, fp32 reference of a @ b.T on the dequantised operands)."""
    if mode == "bf16":
        a, b = x.to(torch.bfloat16), w.to(torch.bfloat16)
        return a, b, None, None, a.float() @ b.float().T
    if mode == "ptpc":
        a, sa = quant.ptpc(x)
        b, sb = quant.ptpc(w)
        return a, b, sa, sb, (a.float() * sa[:, None]) @ (b.float() * sb[:, None]).T
    if mode == "blockscale":
        a, sa = quant.blockscale(x, 1)
        b, sb = quant.blockscale(w, 128)
        ref = quant.dequant_blockscale(a, sa, 1) @ quant.dequant_blockscale(b, sb, 128).T
        return a, b, (mn_major(sa) if layout == "mn-major" else sa), sb, ref
    a, sa = quant.mxfp8(x, 1)
    b, sb = quant.mxfp8(w, 32)
    ref = quant.dequant_mx(a, sa, 1) @ quant.dequant_mx(b, sb, 32).T
    if layout == "packed":
        sa, sb = quant.pack_mx_reference(sa).to(DEV), quant.pack_mx_reference(sb).to(DEV)
    return a, b, sa, sb, ref


def mn_major(sa):
    """Blockscale A scales [M, K/128] M-contiguous with the column stride padded to a multiple of 4
    (scale_layout "mn-major", DeepGEMM's TMA-aligned layout); the padding is NaN, never read."""
    m, kb = sa.shape
    ld = (m + 3) // 4 * 4
    buf = torch.full((kb, ld), float("nan"), device=sa.device, dtype=torch.float32)
    buf[:, :m] = sa.t()
    view = buf[:, :m].t()
    assert view.stride() == (1, ld) and torch.equal(view, sa)
    return view


def scaled_mm_reference(mode, a, b, sa, sb, out_dtype):
    """torch._scaled_mm on the same operands, or None where this torch / cuBLASLt refuses the shape."""
    try:
        if mode == "ptpc":
            return torch._scaled_mm(a, b.t(), scale_a=sa[:, None].contiguous(), scale_b=sb[None, :].contiguous(),
                                    out_dtype=out_dtype).float()
        if mode == "blockscale":
            return torch._scaled_mm(a, b.t(), scale_a=sa.t().contiguous().t(), scale_b=sb.t(),
                                    out_dtype=out_dtype).float()
    except (RuntimeError, ValueError, TypeError) as e:
        print(f"torch._scaled_mm {mode} refused {tuple(a.shape)}x{tuple(b.shape)}: {str(e)[:120]}")
    return None


SHAPES = [(1, 256, 512), (7, 512, 1024), (77, 384, 1024), (203, 1024, 2048), (1025, 2048, 1024), (4096, 2048, 2048)]
MODES = [("bf16", "raw"), ("ptpc", "raw"), ("blockscale", "raw"), ("blockscale", "mn-major"), ("mxfp8", "raw"),
         ("mxfp8", "packed")]


@pytest.mark.parametrize("mode", ["bf16", "ptpc", "blockscale"])
@pytest.mark.parametrize("m,n,k", [(7, 264, 512), (300, 512, 1024)], ids=["7x264x512", "300x512x1024"])
def test_gemm_on_torch_slices(mode, m, n, k, seed):
    """Operands and output as column slices of wider tensors (x[:, :k], w[:, :k], out[:, :n]), as
    models hand them over: the values match the reference, and the columns beside the output slice
    keep their NaN (issue 36 item 8)."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(m, n, k, gen)
    a, b, sa, sb, ref = quantised(mode, x, w)
    pad_k, pad_n = 64, 16  # keeps every leading dimension a multiple of 16 bytes
    a_wide = torch.zeros(m, k + pad_k, device=DEV, dtype=a.dtype)
    b_wide = torch.zeros(n, k + pad_k, device=DEV, dtype=b.dtype)
    a_wide[:, :k], b_wide[:, :k] = a, b
    out_wide = poisoned(m, n + pad_n, torch.bfloat16)
    a_s, b_s, out_s = a_wide[:, :k], b_wide[:, :k], out_wide[:, :n]
    assert a_s.stride() == (k + pad_k, 1) and out_s.stride() == (n + pad_n, 1)
    g = weave.Gemm(a_s, b_s, out_s, scale_a=sa, scale_b=sb, mode=mode)
    g.run()
    torch.cuda.synchronize()
    assert_close(out_s, ref, mode, f"{mode} {m}x{n}x{k} on slices ({g.plan.kernel}, seed {seed})")
    assert torch.isnan(out_wide[:, n:].float()).all(), "a column beside the output slice was written"



@pytest.mark.parametrize("mode,layout", MODES, ids=[f"{m}-{lay}" for m, lay in MODES])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32], ids=["bf16out", "fp32out"])
@pytest.mark.parametrize("m,n,k", SHAPES, ids=[f"{m}x{n}x{k}" for m, n, k in SHAPES])
def test_gemm_modes(mode, layout, out_dtype, m, n, k, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(m, n, k, gen)
    a, b, sa, sb, ref = quantised(mode, x, w, layout)
    out = poisoned(m, n, out_dtype)
    g = weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode=mode, scale_layout=layout)
    assert g.run() is out
    torch.cuda.synchronize()
    what = f"{mode}/{layout} {m}x{n}x{k} -> {out_dtype} ({g.plan.kernel}, split_k {g.plan.split_k}, seed {seed})"
    assert_close(out, ref, mode, what + " vs torch.matmul")
    cublas = scaled_mm_reference(mode, a, b, sa, sb, out_dtype)
    if cublas is not None:
        assert_close(out, cublas, mode, what + " vs torch._scaled_mm")


def test_mxfp8_raw_and_packed_bitwise(seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(333, 768, 2048, gen)
    a, b, sa, sb, _ = quantised("mxfp8", x, w)
    pa, pb = weave.pack_mxfp8_scales(sa.cpu()).to(DEV), weave.pack_mxfp8_scales(sb.cpu()).to(DEV)
    assert torch.equal(pa, quant.pack_mx_reference(sa).to(DEV))
    raw, packed = poisoned(333, 768, torch.float32), poisoned(333, 768, torch.float32)
    weave.gemm(a, b, scale_a=sa, scale_b=sb, mode="mxfp8", out=raw)
    weave.gemm(a, b, scale_a=pa, scale_b=pb, mode="mxfp8", scale_layout="packed", out=packed)
    torch.cuda.synchronize()
    assert torch.equal(raw, packed)


@pytest.mark.parametrize("m", [7, 333, 1024])
def test_blockscale_raw_and_mn_major_bitwise(m, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(m, 768, 2048, gen)
    a, b, sa, sb, _ = quantised("blockscale", x, w)
    raw, mn = poisoned(m, 768, torch.float32), poisoned(m, 768, torch.float32)
    weave.gemm(a, b, scale_a=sa, scale_b=sb, mode="blockscale", out=raw)
    g = weave.Gemm(a, b, mn, scale_a=mn_major(sa), scale_b=sb, mode="blockscale", scale_layout="mn-major")
    assert ("_blockscale_mn_" in g.plan.kernel) == (m > 32), g.plan.kernel  # M <= 32: the GEMV, through strides
    g.run()
    # The row-major scales through their MN-major copy (its workspace allocated here with torch),
    # against the same plan reading them as given: a forced route runs the tiled kernels, so M <= 32
    # is compared there, not on the GEMV.
    routed = {}
    for route in ("as-given", "mn-major-copy"):
        routed[route] = poisoned(m, 768, torch.float32)
        gr = weave.Gemm(a, b, routed[route], scale_a=sa, scale_b=sb, mode="blockscale", scale_a_route=route)
        assert gr.plan.scale_a_mn_copy == (route == "mn-major-copy") and not gr.plan.gemv, gr.plan.reason
        assert ("_blockscale_mn_" in gr.plan.kernel) == (route == "mn-major-copy"), gr.plan.kernel
        assert route == "as-given" or gr.workspace is not None
        gr.run()
    torch.cuda.synchronize()
    assert torch.equal(raw, mn)
    assert torch.equal(routed["as-given"], routed["mn-major-copy"])
    with pytest.raises(weave.ArgumentError, match="scale_layout mn-major needs M-contiguous scales"):
        weave.Gemm(a, b, mn, scale_a=sa, scale_b=sb, mode="blockscale", scale_layout="mn-major")


@pytest.mark.parametrize("layout", ["raw", "packed"])
def test_mxfp8_routes_agree_with_the_reference(layout, seed):
    # The bf16 route (A and B converted to bf16 with their scales) and the native fp8 kernel on the
    # same operands: both within tolerance of torch's fp32 matmul of the dequantised operands; the
    # route's workspace (allocated here with torch) holds its bf16 copies.
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(640, 1024, 2048, gen)
    a, b, sa, sb, ref = quantised("mxfp8", x, w)
    if layout == "packed":
        sa, sb = weave.pack_mxfp8_scales(sa.cpu()).to(DEV), weave.pack_mxfp8_scales(sb.cpu()).to(DEV)
    outs = {}
    for route in ("bf16", "native"):
        out = poisoned(640, 1024, torch.float32)
        g = weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode="mxfp8", scale_layout=layout, mx_route=route)
        assert g.plan.mx_dequant == (route == "bf16")
        assert (g.workspace_bytes >= (640 + 1024) * 2048 * 2) == (route == "bf16")
        g.run()
        torch.cuda.synchronize()
        assert_close(out, ref, "mxfp8", f"mxfp8/{layout} {route} route ({g.plan.kernel}) vs torch.matmul")
        outs[route] = out
    assert_close(outs["bf16"], outs["native"], "mxfp8", "bf16 route vs native")


@pytest.mark.parametrize("mode", ["bf16", "blockscale"])
def test_split_k_workspace(mode, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(128, 256, 8192, gen)
    a, b, sa, sb, ref = quantised(mode, x, w)
    outs = []
    for split in (4, 7):
        out = poisoned(128, 256, torch.float32)
        g = weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode=mode, split_k=split)
        assert g.plan.split_k == split and g.workspace_bytes == split * 128 * 256 * 4
        assert g.workspace is not None and g.workspace.numel() >= g.workspace_bytes
        g.run()
        g.run()  # the partials are summed in split order: bitwise reproducible
        outs.append(out)
    torch.cuda.synchronize()
    for out in outs:
        assert_close(out, ref, mode, f"{mode} split-K (seed {seed})")
    given = torch.empty(4 * 128 * 256 * 4 + 64, dtype=torch.uint8, device=DEV)
    out = poisoned(128, 256, torch.float32)
    weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode=mode, split_k=4, workspace=given).run()
    torch.cuda.synchronize()
    assert torch.equal(out, outs[0])
    with pytest.raises(weave.ArgumentError, match="needs a workspace of"):
        weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode=mode, split_k=4, workspace=given[:1024])


def test_current_and_given_streams(seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(512, 1024, 4096, gen)
    a, b, _, _, ref = quantised("bf16", x, w)
    side = torch.cuda.Stream()
    out1, out2 = poisoned(512, 1024, torch.bfloat16), poisoned(512, 1024, torch.bfloat16)
    g1, g2 = weave.Gemm(a, b, out1), weave.Gemm(a, b, out2)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        g1.run()  # current stream = side
        done = torch.cuda.Event()
        done.record()
    g2.run(stream=side)
    side.synchronize()
    assert done.query()
    assert_close(out1, ref, "bf16", "on torch.cuda.current_stream()")
    assert_close(out2, ref, "bf16", "on a given stream")


@pytest.mark.parametrize("mode,split_k,m", [("bf16", 0, 300), ("ptpc", 0, 1), ("blockscale", 0, 257),
                                            ("blockscale", 4, 128), ("mxfp8", 0, 96)])
def test_graph_capture_and_replay_with_changed_inputs(mode, split_k, m, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    n, k = 512, 4096
    x, w = operands(m, n, k, gen)
    a, b, sa, sb, _ = quantised(mode, x, w)
    out = poisoned(m, n, torch.float32)
    g = weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode=mode, split_k=split_k)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        g.run()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g.run()
    for _ in range(3):  # new operand values in the same buffers, then replay
        x2, w2 = operands(m, n, k, gen)
        a2, b2, sa2, sb2, ref2 = quantised(mode, x2, w2)
        for dst, src in ((a, a2), (b, b2), (sa, sa2), (sb, sb2)):
            if dst is not None:
                dst.copy_(src)
        out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, ref2, mode, f"{mode} split_k {split_k} graph replay (seed {seed})")


WRONG = [
    ("A fp16", lambda a, b, o: (a.half(), b, o), "argument 'A': dtype torch.float16 is not one weave reads"),
    ("A transposed", lambda a, b, o: (a.t().contiguous().t(), b, o), "argument 'A': last dimension must be contiguous"),
    ("A misaligned", lambda a, b, o: (a[:, 1:-7], b[:, :-8], o), "argument 'A': base address must be 16-byte aligned"),
    ("B on the host", lambda a, b, o: (a, b.cpu(), o), "argument 'B': must live in cuda:0 (got host memory)"),
    ("out fp16", lambda a, b, o: (a, b, o.half()), "argument 'out': dtype must be bf16 or fp32 (got torch.float16)"),
    ("out wrong shape", lambda a, b, o: (a, b, o[:, :-8]), "argument 'C': shape must be"),
    ("out strided", lambda a, b, o: (a, b, o.t()), "argument 'C'"),
]


@pytest.mark.parametrize("name,mutate,needle", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_tensors_raise(name, mutate, needle):
    a = torch.randn(64, 256, device=DEV).to(torch.bfloat16)
    b = torch.randn(128, 256, device=DEV).to(torch.bfloat16)
    out = torch.empty(64, 128, device=DEV, dtype=torch.bfloat16)
    a2, b2, o2 = mutate(a, b, out)
    with pytest.raises(weave.ArgumentError) as e:
        weave.Gemm(a2, b2, o2)
    assert needle in str(e.value)


def test_wrong_scales_raise():
    a, sa = quant.blockscale(torch.randn(64, 256, device=DEV), 1)
    b, sb = quant.blockscale(torch.randn(128, 256, device=DEV), 128)
    out = torch.empty(64, 128, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(weave.ArgumentError, match="argument 'scale_a': last dimension must be contiguous"):
        weave.Gemm(a, b, out, scale_a=sa.t().contiguous().t(), scale_b=sb, mode="blockscale")  # torch's layout
    with pytest.raises(weave.ArgumentError, match="ptpc takes fp32"):
        weave.Gemm(a, b, out, scale_a=torch.ones(64, 1, device=DEV), scale_b=torch.ones(128, device=DEV), mode="ptpc")


@pytest.mark.parametrize("mode", ["bf16", "ptpc", "blockscale"])
def test_one_shot_gemm_reuses_its_plan_with_new_operands_each_call(mode, seed):
    """weave.gemm (and torch.ops.weave.gemm) plan a problem once and re-point the plan at each
    call's operands: fresh operands (new addresses) and NaN-poisoned outputs every call, on the
    current and on a given stream, one problem whose plan needs a split-K workspace (a fresh one per
    call) and one that does not; the cache keeps the plan (one entry per problem) and none of the
    caller's tensors; a misaligned operand is still refused on a cached plan."""
    import gc
    import weakref
    from weave import _gemm
    gen = torch.Generator(device=DEV).manual_seed(seed)
    split = next(((m, n, k) for m, n, k in ((64, 1024, 8192), (32, 1280, 8192), (128, 512, 16384))
                  if weave.plan_gemm(m, n, k, mode).split_k > 1 and not weave.plan_gemm(m, n, k, mode).gemv), None)
    assert split is not None, f"no candidate shape takes a split-K plan in {mode}: the workspace path is untested"
    side = torch.cuda.Stream()
    for m, n, k in (split, (300, 512, 1024)):
        before = len(_gemm._plans._plans)
        for call in range(4):
            x, w = operands(m, n, k, gen)
            a, b, sa, sb, ref = quantised(mode, x, w)
            out = poisoned(m, n, torch.bfloat16)
            if call == 3:
                side.wait_stream(torch.cuda.current_stream())
                weave.gemm(a, b, scale_a=sa, scale_b=sb, mode=mode, out=out, stream=side)
                torch.cuda.current_stream().wait_stream(side)
            elif call == 2:
                out = torch.ops.weave.gemm(a, b, sa, sb, mode=mode)
            else:
                weave.gemm(a, b, scale_a=sa, scale_b=sb, mode=mode, out=out)
            torch.cuda.synchronize()
            assert_close(out, ref, mode, f"{mode} {m}x{n}x{k} one-shot call {call} (seed {seed})")
            held = weakref.ref(a)
            del a, x
            gc.collect()
            assert held() is None, "the plan cache holds a caller's operand"
        assert len(_gemm._plans._plans) == before + 1, "four calls of one problem made more than one plan"
    # The cached plan's problem (same shape, strides and dtype) at an address 1 element off.
    misaligned = torch.zeros(m * k + 16, device=DEV, dtype=b.dtype)[1:1 + m * k].view(m, k)
    with pytest.raises(weave.ArgumentError, match="argument 'A': base address must be 16-byte aligned"):
        weave.gemm(misaligned, b, scale_a=sa, scale_b=sb, mode=mode, out=poisoned(m, n, torch.bfloat16))


@pytest.mark.parametrize("mode", ["ptpc", "blockscale", "mxfp8"])
def test_quantize_rows_equals_the_layers_torch_rule(mode, seed):
    """torch.ops.weave.quantize_rows (one kernel) against the torch ops the layers used before it
    (weave.nn's quantisers, the same rule): e4m3 codes and scales bitwise, on rows of random
    magnitude, with a zero row; on a column slice of a wider tensor (copied first: the kernel reads
    aligned rows) and on a later call into memory the first call's outputs left behind."""
    from weave import nn as wnn
    gen = torch.Generator(device=DEV).manual_seed(seed)
    for m, k in ((1, 4096), (37, 7168), (300, 1024)):
        x = torch.randn(m, k, device=DEV, generator=gen) * torch.exp2(torch.randint(-30, 30, (m, 1), device=DEV,
                                                                                 generator=gen).float())
        x = x.to(torch.bfloat16)
        x[m // 2] = 0
        wide = torch.zeros(m, k + 8, device=DEV, dtype=torch.bfloat16)
        wide[:, 1:1 + k] = x  # 2 bytes off 16-byte alignment
        for what, inp in (("contiguous", x), ("a misaligned column slice", wide[:, 1:1 + k])):
            q, s = torch.ops.weave.quantize_rows(inp, mode)
            q_ref, s_ref = wnn._QUANTISE_ACTIVATIONS[mode](x)
            torch.cuda.synchronize()
            assert q.shape == (m, k) and q.dtype == torch.float8_e4m3fn
            assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), f"{mode} {m}x{k} {what}: e4m3 codes"
            assert s.shape == s_ref.shape and torch.equal(s, s_ref.to(s.dtype)), f"{mode} {m}x{k} {what}: scales"


def test_readme_compiled_block_runs_as_written():
    """README's first Python block (a compiled ptpc MLP on weave.nn at world 1), run as written: its
    output is finite and equals the same layers run eagerly (bf16 rounding apart)."""
    import readme
    env: dict = {}
    exec(compile(readme.python_blocks()[0], "README.md", "exec"), env)
    y, x, up, down = env["y"], env["x"], env["up"], env["down"]
    with torch.no_grad():
        eager = down(torch.nn.functional.silu(up(x)))
    torch.cuda.synchronize()
    assert y.shape == (16, 4096) and y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    err = ((y.float() - eager.float()).norm() / eager.float().norm()).item()
    assert err < 2e-2, f"the compiled block differs from the eager layers: rel L2 {err:.2e}"


def test_one_rank_collectives(seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    assert comm.rank == 0 and comm.world_size == 1 and comm.device == 0
    n = 1 << 15
    for op, kw in (("all-reduce", {"dtype": "bf16"}), ("all-reduce", {"dtype": torch.float32}),
                   ("all-gather", {}), ("reduce-scatter", {"dtype": "fp32"})):
        c = weave.Collective(comm, op, max_count=n if op != "all-gather" else 2 * n, **kw)
        dtype = torch.float32 if kw.get("dtype") in ("fp32", torch.float32) else torch.bfloat16
        inp = torch.randn(n, device=DEV, generator=gen).to(dtype)
        out = torch.full_like(inp, NAN)
        c.run(inp, out)
        torch.cuda.synchronize()
        assert torch.equal(out, inp), c.describe()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            c.run(inp, out)
        inp.copy_(torch.randn(n, device=DEV, generator=gen).to(dtype))
        out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, inp), c.describe() + " (graph replay)"
        c.check()
    c = weave.Collective(comm, "all-reduce", max_count=n, dtype="bf16")
    with pytest.raises(weave.ArgumentError, match="dtype must be bf16"):
        c.run(torch.zeros(n, device=DEV), torch.zeros(n, device=DEV))
    with pytest.raises(weave.ArgumentError, match="max_count"):
        c.run(torch.zeros(2 * n, device=DEV, dtype=torch.bfloat16), torch.zeros(2 * n, device=DEV, dtype=torch.bfloat16))
    with pytest.raises(weave.ArgumentError, match="must be contiguous"):
        x = torch.zeros(n, 2, device=DEV, dtype=torch.bfloat16)
        c.run(x[:, 0], x[:, 1])


def _world_one_call_and_replay(op, gen, n, k, m=257):
    """One call of a reducing op at world 1 (its output: the rank's own GEMM, [m, n] bf16) against
    torch's matmul, check(), then a graph of the call replayed with changed inputs; returns B."""
    a = torch.randn(m, k, device=DEV, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device=DEV, generator=gen).to(torch.bfloat16)
    out = op.run(a, b)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().t()
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item()), op.describe()
    op.check()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op.run(a, b)
    a.copy_(torch.randn(m, k, device=DEV, generator=gen).to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    ref = a.float() @ b.float().t()
    assert torch.allclose(op.output(m).float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    return b


def test_one_rank_fused_ops(seed):
    """GemmAllReduce, GemmReduceScatter and GemmAllGather over a one-rank communicator: every mode
    that runs at world 1 (nothing to reduce or gather: the output is the rank's own GEMM, all of its
    rows for GemmReduceScatter), against torch's matmul, the self-test, a graph replay with changed
    inputs, and argument errors."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    m_max, n, k = 300, 256, 512
    for mode in ("auto", "gemm-only", "split-lsa", "fused", "fused-rs", "fused-ce"):
        ar = weave.GemmAllReduce(comm, n=n, k=k, m_max=m_max, mode=mode)
        assert ar.self_test(200)["ok"], ar.describe()
        _world_one_call_and_replay(ar, gen, n, k)
        assert ar.plan(257)["mode"] in ("gemm-only", "split-lsa", "fused", "fused-rs")
    # auto at decode sizes takes weave::Gemm's route at world 1: the decode GEMV (its own plan).
    auto = weave.GemmAllReduce(comm, n=n, k=k, m_max=m_max)
    _world_one_call_and_replay(auto, gen, n, k, m=4)
    assert auto.last_mode == "decode" == auto.plan(4)["mode"], auto.plan(4)["reason"]
    # GemmReduceScatter: at world 1 rank 0 owns every row, so the output is [m, n], the rank's own GEMM.
    for mode in ("auto", "gemm-only", "split-lsa", "fused"):
        rs = weave.GemmReduceScatter(comm, n=n, k=k, m_max=m_max, mode=mode)
        assert rs.self_test(200)["ok"], rs.describe()
        b = _world_one_call_and_replay(rs, gen, n, k)
        assert rs.last_mode == rs.plan(257)["mode"] != "auto", rs.describe()
        assert rs.plan(257)["mode"] in ("gemm-only", "split-lsa", "fused") and "bytes_ag" not in rs.plan(257)
    with pytest.raises(weave.ArgumentError, match="m_max"):
        rs.run(torch.zeros(m_max + 1, k, device=DEV, dtype=torch.bfloat16), b)
    # decode (m <= 32): the decode GEMV (nothing to reduce at world 1); m = 33 refused by name.
    dec = weave.GemmAllReduce(comm, n=n, k=k, m_max=64, mode="decode")
    assert dec.self_test(17)["ok"], dec.describe()
    a = torch.randn(17, k, device=DEV, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device=DEV, generator=gen).to(torch.bfloat16)
    out = dec.run(a, b)
    torch.cuda.synchronize()
    ref = a.float() @ b.float().t()
    assert dec.last_mode == "decode"
    assert torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item()), dec.describe()
    with pytest.raises(weave.ArgumentError, match="mode decode runs m <= 32"):
        dec.run(torch.zeros(33, k, device=DEV, dtype=torch.bfloat16), b)
    ag = weave.GemmAllGather(comm, n=n, k=k, m_max=m_max, out_dtype="fp32")
    assert ag.self_test(100)["ok"], ag.describe()
    checked = ag.self_test(100, b=torch.randn(n, k, device=DEV, generator=gen).to(torch.bfloat16))
    assert checked["ok"] and "identical on every rank" in checked["detail"], checked["detail"]
    a = torch.randn(100, k, device=DEV, generator=gen).to(torch.bfloat16)
    b = torch.randn(n, k, device=DEV, generator=gen).to(torch.bfloat16)
    out = ag.run(a, b)
    torch.cuda.synchronize()
    assert out.shape == (100, n) and out.dtype == torch.float32
    assert torch.allclose(out, a.float() @ b.float().t(), rtol=1e-3, atol=1e-3)
    with pytest.raises(weave.ArgumentError, match="m_max"):
        ar.run(torch.zeros(m_max + 1, k, device=DEV, dtype=torch.bfloat16), b)
    with pytest.raises(weave.ArgumentError, match="2-D"):
        ar.run(torch.zeros(k, device=DEV, dtype=torch.bfloat16), b)


def test_one_rank_fused_ops_copy_into_out(seed):
    """run(..., out=) over a one-rank communicator: the output copied into the caller's tensor after
    the call, bitwise the window's view (a dense and a row-strided out, NaN-poisoned first; the wide
    buffer's other columns untouched), also inside a CUDA graph replayed with changed inputs; bad
    buffers are ArgumentErrors naming 'out' and the rule, raised before any GPU work (the window's
    view stays as it was)."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    m_max, n, k, m = 300, 256, 512, 257
    ar = weave.GemmAllReduce(comm, n=n, k=k, m_max=m_max, mode="fused")
    rs = weave.GemmReduceScatter(comm, n=n, k=k, m_max=m_max, mode="fused")  # world 1: [m, n], all rows
    ag = weave.GemmAllGather(comm, n=n, k=k, m_max=m_max, out_dtype="fp32")

    def assert_right(out, a, b, what):  # the bounds test_one_rank_fused_ops uses (NaN fails them)
        ref = a.float() @ b.float().t()
        if out.dtype == torch.bfloat16:
            assert torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item()), what
        else:
            assert torch.allclose(out, ref, rtol=1e-3, atol=1e-3), what

    for op, dtype, bits in ((ar, torch.bfloat16, torch.int16), (rs, torch.bfloat16, torch.int16),
                            (ag, torch.float32, torch.int32)):
        what = op.describe()
        a = torch.randn(m, k, device=DEV, generator=gen).to(torch.bfloat16)
        b = torch.randn(n, k, device=DEV, generator=gen).to(torch.bfloat16)
        wide = poisoned(m, n + 64, dtype)
        for out in (poisoned(m, n, dtype), wide[:, :n]):
            assert op.run(a, b, out=out) is out
            torch.cuda.synchronize()
            assert torch.equal(out.view(bits), op.output(m).view(bits)), what
            assert_right(out, a, b, what)
        assert wide[:, n:].isnan().all(), f"{what}: the copy wrote outside out's columns"
        # Captured: the copy is a node of the graph; each replay refills out.
        out = poisoned(m, n, dtype)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            op.run(a, b, out=out)
        for _ in range(3):
            a.copy_(torch.randn(m, k, device=DEV, generator=gen).to(torch.bfloat16))
            out.fill_(NAN)
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out.view(bits), op.output(m).view(bits)), what
            assert_right(out, a, b, what)
        # Bad buffers: nothing runs (the window's view keeps its poison).
        op.output(m).fill_(NAN)
        torch.cuda.synchronize()
        other = torch.float32 if dtype == torch.bfloat16 else torch.bfloat16
        misaligned = torch.empty(m * n + 8, dtype=dtype, device=DEV)[1:1 + m * n].view(m, n)
        for bad, needle in [(torch.empty((m, n), dtype=other, device=DEV), "argument 'out': dtype must be"),
                            (torch.empty((m + 1, n), dtype=dtype, device=DEV), "argument 'out': shape must be"),
                            (torch.empty((m, n), dtype=dtype), "argument 'out': must live in cuda:0"),
                            (torch.empty((n, m), dtype=dtype, device=DEV).t(), "argument 'out': last dimension"),
                            (misaligned, "argument 'out': base address must be 16-byte aligned"),
                            (op.output(m), "argument 'out': overlaps the op's window")]:
            with pytest.raises(weave.ArgumentError, match=needle):
                op.run(a, b, out=bad)
        torch.cuda.synchronize()
        assert op.output(m).isnan().all(), f"{what}: a refused call ran"
        op.check()


@pytest.mark.parametrize("quant", ["bf16", "ptpc", "blockscale", "mxfp8"])
def test_one_rank_all_gather_gemm(quant, seed):
    """AllGatherGemm over a one-rank communicator (the gathered rows are this rank's own, so the
    output is its GEMM): every mode that runs at world 1 bitwise equal to weave.Gemm of the same
    operands without a K split (the op runs weave::Gemm's plan) and within the reference; gathered_a and gathered_scale_a
    bitwise this rank's operands; the zero-copy input (A written into input(m)); out= dense and
    row-strided (the GEMM stores into it; the wide buffer's other columns untouched); a graph
    replayed with changed inputs; the self-test; bad arguments refused before any GPU work."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    m_max, n, k, m = 300, 256, 512, 257
    mx = {"mx_route": "native"} if quant == "mxfp8" else {}  # one kernel in both ops: bitwise comparable
    x, w = operands(m, n, k, gen)
    a, b, sa, sb, ref = quantised(quant, x, w)

    def gemm_of(a_, sa_):  # weave.Gemm of this rank's operands as the op plans them (no K split)
        out_ = torch.empty(m, n, device=DEV, dtype=torch.bfloat16)
        weave.Gemm(a_, b, out_, scale_a=sa_, scale_b=sb, mode=quant, split_k=1, **mx).run()
        torch.cuda.synchronize()
        return out_

    want = gemm_of(a, sa)
    assert_close(want, ref, quant, f"weave.Gemm {quant}")

    def bits(t):  # a dense tensor's bytes: fp8 values and ue8m0 scales compare as bytes
        return t.view(torch.uint8)

    for mode in ("auto", "gemm-only", "split-lsa", "split-ce"):
        op = weave.AllGatherGemm(comm, n=n, k=k, m_max=m_max, quant=quant, mode=mode, **mx)
        what = op.describe()
        assert op.self_test(200)["ok"], what
        out = op.run(a, b, scale_a=sa, scale_b=sb)
        torch.cuda.synchronize()
        assert out.shape == (m, n) and out.dtype == torch.bfloat16, what
        assert torch.equal(out, want), f"{what}: differs from weave.Gemm's output"
        assert op.last_mode == op.plan(m)["mode"] == ("gemm-only" if mode == "auto" else mode), what
        assert op.gathered_a(m).shape == (m, k) and torch.equal(bits(op.gathered_a(m)), bits(a)), what
        if sa is None:
            assert op.gathered_scale_a(m) is None and op.input_scales(m) is None, what
        else:
            assert torch.equal(bits(op.gathered_scale_a(m)), bits(sa)), f"{what}: the gathered scales"
        # Zero-copy: A and its scales written into this rank's slot, then passed as the operands.
        op.output(m).fill_(NAN)
        bits(op.input(m)).copy_(bits(a))
        if sa is not None:
            bits(op.input_scales(m)).copy_(bits(sa))
        assert torch.equal(op.run(op.input(m), b, scale_a=op.input_scales(m), scale_b=sb), want), f"{what}: input(m)"
        # out=: the GEMM stores into the caller's tensor, dense or the rows of a wider buffer.
        wide = poisoned(m, n + 64, torch.bfloat16)
        for dst in (poisoned(m, n, torch.bfloat16), wide[:, :n]):
            assert op.run(a, b, scale_a=sa, scale_b=sb, out=dst) is dst
            torch.cuda.synchronize()
            assert torch.equal(dst, want), f"{what}: into out {tuple(dst.stride())}"
        assert wide[:, n:].isnan().all(), f"{what}: the GEMM wrote outside out's columns"
        # Captured: every replay computes from the operands' current values.
        ga, gsa = a.clone(), None if sa is None else sa.clone()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            op.run(ga, b, scale_a=gsa, scale_b=sb)
        for _ in range(2):
            a2, _, sa2, _, ref2 = quantised(quant, torch.randn(m, k, device=DEV, generator=gen), w)
            ga.copy_(a2)
            if gsa is not None:
                gsa.copy_(sa2)
            op.output(m).fill_(NAN)
            graph.replay()
            torch.cuda.synchronize()
            assert_close(op.output(m), ref2, quant, f"{what}: graph replay")
            assert torch.equal(op.output(m), gemm_of(ga, gsa)), f"{what}: graph replay"
        op.check()
    # Bad arguments: nothing runs (the window's output keeps its poison).
    op.output(m).fill_(NAN)
    torch.cuda.synchronize()
    bad = [(dict(a=torch.empty(m_max + 1, k, device=DEV, dtype=a.dtype)), "argument 'A': its rows m = 301"),
           (dict(out=poisoned(m, n + 4, torch.bfloat16)[:, :n]), "argument 'out': the GEMM stores into it by TMA"),
           (dict(out=op.output(m)), "argument 'out': overlaps the op's window"),
           (dict(out=poisoned(m, n, torch.float32)), "argument 'out': dtype must be bf16")]
    if quant == "bf16":  # inside the window but not this rank's slot: it may be a peer's landing rows
        bad.append((dict(a=op.gathered_a(m)[1:]), "argument 'A': lies in the op's window but is not this rank's slot"))
    else:
        bad.append((dict(scale_a=None), "argument 'scale_a': mode"))
    for over, needle in bad:
        kw = {"a": a, "b": b, "scale_a": sa, "scale_b": sb, **over}
        with pytest.raises(weave.ArgumentError) as e:
            op.run(kw.pop("a"), kw.pop("b"), **kw)
        assert needle in str(e.value), str(e.value)
    with pytest.raises(weave.ArgumentError, match="argument 'm'"):
        op.gathered_a(m_max + 1)
    torch.cuda.synchronize()
    assert op.output(m).isnan().all(), "a refused call ran"
    if quant == "bf16":  # fp32 out (bf16 inputs only)
        f32 = weave.AllGatherGemm(comm, n=n, k=k, m_max=m_max, out_dtype="fp32")
        out = f32.run(a, b)
        torch.cuda.synchronize()
        assert out.shape == (m, n) and out.dtype == torch.float32
        assert torch.allclose(out, ref, rtol=1e-3, atol=1e-3)


def test_all_gather_gemm_custom_op_at_world_one(seed):
    """torch.ops.weave.all_gather_gemm over a one-rank communicator: a new tensor (the GEMM stores
    into it), bitwise the op's own run, eager and compiled with fullgraph=True, for bf16 and ptpc."""
    import weave.ops
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    n, k, m = 384, 512, 200
    for mode in ("bf16", "ptpc"):
        a, b, sa, sb, _ = quantised(mode, *operands(m, n, k, gen))
        op = weave.AllGatherGemm(comm, n=n, k=k, m_max=m, quant=mode)
        h = weave.ops.handle(op)
        own = op.run(a, b, scale_a=sa, scale_b=sb).clone()
        y = torch.ops.weave.all_gather_gemm(h, a, b, sa, sb)
        compiled = torch.compile(lambda *t: torch.ops.weave.all_gather_gemm(h, *t), fullgraph=True)(a, b, sa, sb)
        torch.cuda.synchronize()
        assert y.data_ptr() != op.output(m).data_ptr() and y.shape == (m, n)
        assert torch.equal(y, own) and torch.equal(compiled, own), mode
        weave.ops.release(h)


def test_one_rank_sharing_window(seed):
    """weave.create_sharing_window over a one-rank communicator: two GemmAllReduces, a GemmAllGather,
    a GemmReduceScatter, an AllGatherGemm and an all-reduce Collective in one window, called
    interleaved on one stream; each output is
    checked against torch, so an op writing over another's regions shows as a wrong result; then the
    ops outlive every Python name of the window's spec lists and the communicator."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    n, k = 256, 512
    ops = weave.create_sharing_window(
        comm, collectives=[dict(op="all-reduce", max_count=4096, dtype="fp32")],
        all_gathers=[dict(n=n, k=k, m_max=128, out_dtype="fp32")],
        all_reduces=[dict(n=n, k=k, m_max=300, mode="fused"), dict(n=n, k=k, m_max=300, mode="split-lsa")],
        reduce_scatters=[dict(n=n, k=k, m_max=256)], all_gather_gemms=[dict(n=n, k=k, m_max=128)])
    cols, ags, ars, rss, agms = ops
    assert [type(o).__name__ for o in cols + ags + ars + rss + agms] == [
        "Collective", "GemmAllGather", "GemmAllReduce", "GemmAllReduce", "GemmReduceScatter", "AllGatherGemm"]
    for op in ags + ars + rss + agms:
        assert op.self_test(100)["ok"], op.describe()
    del ops, comm
    a = [torch.randn(200, k, device=DEV, generator=gen).to(torch.bfloat16) for _ in range(3)]
    b = [torch.randn(n, k, device=DEV, generator=gen).to(torch.bfloat16) for _ in range(3)]
    x = torch.randn(4096, device=DEV, generator=gen)
    y = torch.full_like(x, float("nan"))
    for _ in range(3):  # interleaved: every op's output must survive the others' calls
        out0 = ars[0].run(a[0], b[0])
        out1 = ars[1].run(a[1], b[1])
        outg = ags[0].run(a[2][:100], b[2])
        outrs = rss[0].run(a[0][:128], b[1])
        outagm = agms[0].run(a[1][:64], b[2])
        cols[0].run(x, y)
        torch.cuda.synchronize()
        for out, (ai, bi) in ((out0, (a[0], b[0])), (out1, (a[1], b[1]))):
            ref = ai.float() @ bi.float().t()
            assert torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
        assert torch.allclose(outg, a[2][:100].float() @ b[2].float().t(), rtol=1e-3, atol=1e-3)
        for out, (ai, bi) in ((outrs, (a[0][:128], b[1])), (outagm, (a[1][:64], b[2]))):  # world 1: the whole GEMM
            ref = ai.float() @ bi.float().t()
            assert torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
        assert torch.equal(y, x)
        for op in cols + ags + ars + rss + agms:
            op.check()
    assert ars[0].last_mode == "fused" and ars[1].last_mode == "split-lsa"


def test_a_stalled_gemm_is_reported_and_the_process_keeps_working(seed, monkeypatch):
    # The cooperative abort seen from Python: a K block the producer never loads (debug knob, read
    # at construction) makes every pipeline wait give up after its 0.2 s bound; the kernel still ends
    # (torch.cuda.synchronize() returns), check() raises the recorded timeout once, and torch and
    # weave keep working in the same process.
    gen = torch.Generator(device=DEV).manual_seed(seed)
    x, w = operands(256, 512, 1024, gen)
    a, b, sa, sb, ref = quantised("ptpc", x, w)
    out = poisoned(256, 512, torch.bfloat16)
    monkeypatch.setenv("WEAVE_GEMM_DEBUG_STALL_K_BLOCK", "2")
    monkeypatch.setenv("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS", "200")
    stalled = weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode="ptpc")
    monkeypatch.delenv("WEAVE_GEMM_DEBUG_STALL_K_BLOCK")
    monkeypatch.delenv("WEAVE_GEMM_DEBUG_PIPELINE_TIMEOUT_MS")
    stalled.run()
    torch.cuda.synchronize()
    with pytest.raises(weave.Error) as info:
        stalled.check()
    assert info.value.status == weave.Status.TIMEOUT and "GEMM pipeline wait timed out" in str(info.value)
    stalled.check()  # reported once
    out = poisoned(256, 512, torch.bfloat16)
    weave.Gemm(a, b, out, scale_a=sa, scale_b=sb, mode="ptpc").run()
    torch.cuda.synchronize()
    assert_close(out, ref, "ptpc", "ptpc GEMM right after an aborted one")


def test_torch_ops_compiled_block_equals_eager_and_replays_in_a_cuda_graph(seed):
    """weave.ops on a GPU (world 1, real ops): torch.ops.weave.gemm against torch's matmul; a
    block of gemm -> gelu -> GemmAllReduce compiled with fullgraph=True equals the eager block
    (bitwise through aot_eager, within bf16 rounding through inductor), and captured in a CUDA
    graph it replays with changed inputs."""
    import weave.ops
    gen = torch.Generator(device=DEV).manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    m, n_up, k, n = 256, 1024, 512, 512
    x = torch.randn(m, k, device=DEV, generator=gen).to(torch.bfloat16)
    w_up = (torch.randn(n_up, k, device=DEV, generator=gen) * 0.05).to(torch.bfloat16)
    w_down = (torch.randn(n, n_up, device=DEV, generator=gen) * 0.05).to(torch.bfloat16)
    y = torch.ops.weave.gemm(x, w_up)
    ref = x.float() @ w_up.float().t()
    assert torch.allclose(y.float(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    ar = weave.GemmAllReduce(comm, n=n, k=n_up, m_max=m)
    h = weave.ops.handle(ar)

    def block(x, w_up, w_down):
        hid = torch.nn.functional.gelu(torch.ops.weave.gemm(x, w_up).float()).to(torch.bfloat16)
        return torch.ops.weave.gemm_all_reduce(h, hid, w_down)

    eager = block(x, w_up, w_down)
    # aot_eager: the same kernels as eager, so the traced graph must give the same bits; inductor
    # (the default) may fuse gelu and round otherwise, so it is held to a tolerance.
    assert torch.equal(torch.compile(block, fullgraph=True, backend="aot_eager")(x, w_up, w_down), eager)
    compiled = torch.compile(block, fullgraph=True)
    assert torch.allclose(compiled(x, w_up, w_down).float(), eager.float(), rtol=1e-2,
                          atol=1e-2 * eager.float().abs().max().item())
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = compiled(x, w_up, w_down)
    x.copy_(torch.randn(m, k, device=DEV, generator=gen).to(torch.bfloat16))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static_out, compiled(x, w_up, w_down)), "the replay computed the changed inputs"
    weave.ops.release(h)


def test_layers_of_one_shape_share_one_op(seed):
    """weave.nn share_op=True: two row-parallel layers of one shape (two decoder layers' down_proj)
    share one GemmAllReduce, and calls alternating between them each give their own layer's result
    (every call writes a fresh output, so the shared window is only ever the op's scratch); another
    shape, or share_op=False, gets its own op."""
    import weave.nn
    torch.manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    downs = [torch.nn.Linear(1024, 512).to(DEV, torch.bfloat16) for _ in range(2)]
    rows = [weave.nn.RowParallelLinear.from_linear(d, comm=comm, max_tokens=256, share_op=True) for d in downs]
    assert rows[0].op is rows[1].op
    other = weave.nn.RowParallelLinear(1024, 384, comm=comm, max_tokens=256, share_op=True)
    own = weave.nn.RowParallelLinear.from_linear(downs[0], comm=comm, max_tokens=256)
    assert other.op is not rows[0].op and own.op is not rows[0].op
    xs = [torch.randn(200, 1024, device=DEV).to(torch.bfloat16) for _ in range(2)]
    outs = []
    for _ in range(3):  # alternating, not synchronised in between
        outs += [rows[0](xs[0]), rows[1](xs[1])]
    torch.cuda.synchronize()
    for i, y in enumerate(outs):
        ref = downs[i % 2](xs[i % 2])
        assert torch.allclose(y.float(), ref.float(), rtol=2e-2, atol=2e-2 * ref.float().abs().max().item()), i


@pytest.mark.parametrize("quant", ["bf16", "ptpc", "blockscale", "mxfp8"])
def test_tensor_parallel_layers_at_world_one_match_torch_linear(seed, quant):
    """weave.nn at world 1 (real ops): ColumnParallelLinear (and AllGatherGemm with
    sequence_parallel) and RowParallelLinear (GemmAllReduce, and GemmReduceScatter with
    sequence_parallel) made from torch.nn.Linear layers equal them within bf16 rounding (ptpc,
    blockscale and mxfp8: within e4m3's, relative L2 < 5%); the MLP blocks compiled with
    fullgraph=True equal the eager blocks."""
    import weave.nn
    torch.manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    h, f, tokens = 512, 1024, 200
    up = torch.nn.Linear(h, f).to(DEV, torch.bfloat16)
    down = torch.nn.Linear(f, h).to(DEV, torch.bfloat16)
    x = torch.randn(2, tokens // 2, h, device=DEV).to(torch.bfloat16)
    col = weave.nn.ColumnParallelLinear.from_linear(up, comm=comm, quant=quant)
    row = weave.nn.RowParallelLinear.from_linear(down, comm=comm, max_tokens=tokens, quant=quant)
    row_sp = weave.nn.RowParallelLinear.from_linear(down, comm=comm, max_tokens=tokens, sequence_parallel=True,
                                                    quant=quant)
    col_sp = weave.nn.ColumnParallelLinear.from_linear(up, comm=comm, max_tokens=tokens, sequence_parallel=True,
                                                       quant=quant)

    def close(got, ref):
        assert got.shape == ref.shape, (got.shape, ref.shape)
        if quant != "bf16":
            rel = ((got.float() - ref.float()).norm() / ref.float().norm()).item()
            assert rel < 5e-2, rel
        else:
            assert torch.allclose(got.float(), ref.float(), rtol=2e-2, atol=2e-2 * ref.float().abs().max().item())

    close(col(x), up(x))
    hid = torch.nn.functional.gelu(up(x).float()).to(torch.bfloat16)
    close(row(hid), down(hid))
    close(row_sp(hid.reshape(tokens, f)), down(hid).reshape(tokens, h))  # world 1: every token is this rank's
    close(col_sp(x.reshape(tokens, h)), up(x).reshape(tokens, f))  # world 1: the gathered tokens are this rank's
    assert torch.equal(col_sp.op.gathered_a(tokens).view(torch.uint8),
                       col_sp._operands(x.reshape(tokens, h))[0].view(torch.uint8)), "the gathered activations"
    if quant == "mxfp8":  # the ue8m0 bytes travelled with their rows
        assert torch.equal(col_sp.op.gathered_scale_a(tokens).view(torch.uint8),
                           col_sp._operands(x.reshape(tokens, h))[2]), "the gathered scales"

    def block(x):
        return row(torch.nn.functional.gelu(col(x).float()).to(torch.bfloat16))

    def block_sp(x_rows):
        return row_sp(torch.nn.functional.gelu(col_sp(x_rows).float()).to(torch.bfloat16))

    with torch.no_grad():  # inductor's gelu may round otherwise: close, not equal
        close(torch.compile(block, fullgraph=True)(x), block(x))
        close(torch.compile(block_sp, fullgraph=True)(x.reshape(tokens, h)), block_sp(x.reshape(tokens, h)))
    with pytest.raises(weave.ArgumentError, match="bf16 activations"):
        row(hid.float())


@pytest.mark.parametrize("quant", ["bf16", "ptpc"])
def test_eager_layers_skip_the_dispatcher_and_give_the_ops_bits(seed, quant, monkeypatch):
    """weave.nn's eager forward on CUDA tensors calls the custom ops' kernels itself (nn._direct:
    no torch dispatcher, ~14 us of host time per op call) and gives the torch.ops.weave path's bits
    for fresh inputs each round (a stale output would repeat the last round's); whatever must see
    torch.ops.weave.* still goes through the ops: an input that requires grad under grad mode, a
    dispatch mode, meta and CPU tensors. Control: with the direct path forced off, the layers call
    the registered ops (their handle lookup counts, the direct GEMM's does not)."""
    import weave.nn
    import weave.ops
    from torch.utils._python_dispatch import TorchDispatchMode
    gen = torch.Generator(device=DEV).manual_seed(seed)
    torch.manual_seed(seed)
    (comm,) = weave.Communicator.create_local([0])
    col = weave.nn.ColumnParallelLinear.from_linear(torch.nn.Linear(512, 768).to(DEV, torch.bfloat16), comm=comm,
                                                    quant=quant)
    row = weave.nn.RowParallelLinear.from_linear(torch.nn.Linear(768, 512).to(DEV, torch.bfloat16), comm=comm,
                                                 max_tokens=64, quant=quant)
    calls = {"gemm": 0, "handle": 0}
    real_gemm, real_op_of = weave.ops._gemm_op, weave.ops._op_of

    def counted_gemm(*args, **kwargs):
        calls["gemm"] += 1
        return real_gemm(*args, **kwargs)

    def counted_op_of(*args, **kwargs):
        calls["handle"] += 1
        return real_op_of(*args, **kwargs)

    monkeypatch.setattr(weave.ops, "_gemm_op", counted_gemm)  # read by the direct path only
    monkeypatch.setattr(weave.ops, "_op_of", counted_op_of)  # read by the registered fused ops only

    def forward(x):
        y = row(torch.nn.functional.gelu(col(x).float()).to(torch.bfloat16))
        torch.cuda.synchronize()
        return y

    last = None
    for rnd in range(3):
        x = torch.randn(3, 21, 512, device=DEV, generator=gen).to(torch.bfloat16)
        assert weave.nn._direct(x.reshape(-1, 512))
        direct = forward(x)
        assert calls == {"gemm": rnd + 1, "handle": rnd}, calls
        with monkeypatch.context() as off:
            off.setattr(weave.nn, "_direct", lambda t: False)
            through_ops = forward(x)
        assert calls == {"gemm": rnd + 1, "handle": rnd + 1}, calls
        assert not torch.isnan(direct).any() and direct.abs().sum() > 0
        assert torch.equal(direct, through_ops), f"round {rnd}: the direct path's bits differ from torch.ops.weave's"
        assert last is None or not torch.equal(direct, last), f"round {rnd}: the last round's output again"
        last = direct
    x_grad = x.clone().requires_grad_(True)
    assert not weave.nn._direct(x_grad) and not weave.nn._direct(x.to("meta")) and not weave.nn._direct(x.cpu())
    with torch.no_grad():
        assert weave.nn._direct(x_grad)

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Seen():
        assert not weave.nn._direct(x)


def test_collective_custom_op_at_world_one(seed):
    """torch.ops.weave.collective over a one-rank communicator: all-gather, reduce-scatter and
    all-reduce each return a new tensor equal to the input (one rank: nothing moves), also
    compiled with fullgraph=True."""
    import weave.ops
    (comm,) = weave.Communicator.create_local([0])
    t = torch.randn(64, 256, device=DEV, generator=torch.Generator(device=DEV).manual_seed(seed)).to(torch.bfloat16)
    for op in ("all-gather", "reduce-scatter", "all-reduce"):
        coll = weave.Collective(comm, op, max_count=t.numel() * (2 if op == "all-gather" else 1))
        h = weave.ops.handle(coll)
        out = torch.ops.weave.collective(h, t)
        compiled = torch.compile(lambda x: torch.ops.weave.collective(h, x), fullgraph=True)(t)
        torch.cuda.synchronize()
        assert out.data_ptr() != t.data_ptr() and torch.equal(out, t) and torch.equal(compiled, t), op
        weave.ops.release(h)
