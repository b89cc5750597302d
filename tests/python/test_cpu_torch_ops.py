"""weave.ops without a GPU: the torch.ops.weave.* registrations, their schemas (nothing mutated or
aliased), their fake (meta) implementations' exact output shapes and dtypes, the handle registry's
errors, and torch.compile(fullgraph=True) tracing a tensor-parallel block through them with no
graph break (on meta tensors, which dispatch to the fake implementations). Skips where torch is
not installed (CI's fresh machine has none: the GPU run covers them there, with real ops)."""
import types

import pytest

torch = pytest.importorskip("torch")

import weave  # noqa: E402
import weave.ops  # noqa: E402
from weave import _fused  # noqa: E402


def _meta(rows, cols, dtype=torch.bfloat16):
    return torch.empty(rows, cols, dtype=dtype, device="meta")


def _stand_in(cls, config, world):
    """An op object with its configuration and world but no window (its fake implementation reads
    only those): real ops need GPUs, the fakes do not."""
    op = object.__new__(cls)
    op._cfg, op.comm = config, types.SimpleNamespace(world_size=world, device=0)
    return op


@pytest.mark.parametrize("name, args", [
    ("gemm", "Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None, str mode=\"\", str out_dtype=\"bf16\", "
             "str scale_layout=\"raw\""),
    ("gemm_all_reduce", "SymInt handle, Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None"),
    ("gemm_reduce_scatter", "SymInt handle, Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None"),
    ("gemm_all_gather", "SymInt handle, Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None"),
    ("all_gather_gemm", "SymInt handle, Tensor a, Tensor b, Tensor? scale_a=None, Tensor? scale_b=None"),
    ("collective", "SymInt handle, Tensor inp"),
])
def test_ops_are_registered_with_functional_schemas(name, args):
    schema = str(getattr(torch.ops.weave, name).default._schema)
    assert schema == f"weave::{name}({args}) -> Tensor", schema
    assert "!" not in schema, "no argument is mutated or aliased"


def test_quantize_rows_is_registered_and_its_fake_gives_each_modes_outputs():
    schema = str(torch.ops.weave.quantize_rows.default._schema)
    assert schema == "weave::quantize_rows(Tensor x, str mode) -> (Tensor, Tensor)", schema
    x = _meta(37, 4096)
    for mode, scale_shape, scale_dtype in (("ptpc", (37,), torch.float32), ("blockscale", (37, 32), torch.float32),
                                           ("mxfp8", (37, 128), torch.uint8)):
        q, s = torch.ops.weave.quantize_rows(x, mode)
        assert q.shape == (37, 4096) and q.dtype == torch.float8_e4m3fn and q.device.type == "meta"
        assert s.shape == scale_shape and s.dtype == scale_dtype, mode
    with pytest.raises(weave.ArgumentError, match="argument 'mode'"):
        torch.ops.weave.quantize_rows(x, "bf16")


@pytest.mark.parametrize("out_dtype, dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_gemm_fake_gives_the_output_shape_and_dtype(out_dtype, dtype):
    y = torch.ops.weave.gemm(_meta(33, 256), _meta(72, 256), out_dtype=out_dtype)
    assert y.shape == (33, 72) and y.dtype == dtype and y.device.type == "meta"
    fp8 = torch.ops.weave.gemm(_meta(8, 128, torch.uint8), _meta(16, 128, torch.uint8), _meta(8, 1, torch.float32),
                               _meta(16, 1, torch.float32), mode="ptpc")
    assert fp8.shape == (8, 16) and fp8.dtype == torch.bfloat16
    with pytest.raises(weave.ArgumentError, match="out_dtype"):
        torch.ops.weave.gemm(_meta(4, 64), _meta(4, 64), out_dtype="fp16")


def test_fused_fakes_give_each_operators_output():
    ar = _stand_in(weave.GemmAllReduce, _fused._ar_config(384, 256, 4096, "bf16", "raw", "auto", False, 0), 4)
    rs = _stand_in(weave.GemmReduceScatter, _fused._rs_config(384, 256, 4096, "bf16", "raw", "auto", False, 0), 4)
    ag = _stand_in(weave.GemmAllGather, _fused._ag_config(384, 256, 4096, "bf16", "raw", "fp32", "auto"), 4)
    a, b = _meta(1000, 256), _meta(384, 256)
    y = torch.ops.weave.gemm_all_reduce(weave.ops.handle(ar), a, b)
    assert y.shape == (1000, 384) and y.dtype == torch.bfloat16
    y = torch.ops.weave.gemm_reduce_scatter(weave.ops.handle(rs), a, b)
    assert y.shape == (250, 384) and y.dtype == torch.bfloat16, "this rank's m / world rows"
    y = torch.ops.weave.gemm_all_gather(weave.ops.handle(ag), a, b)
    assert y.shape == (4000, 384) and y.dtype == torch.float32, "world x m rows of the op's out dtype"
    agm = _stand_in(weave.AllGatherGemm, _fused._agm_config(384, 256, 4096, "bf16", "raw", "fp32", "auto"), 4)
    y = torch.ops.weave.all_gather_gemm(weave.ops.handle(agm), a, b)
    assert y.shape == (4000, 384) and y.dtype == torch.float32, "every rank's m rows, of the op's out dtype"
    fp8 = _stand_in(weave.AllGatherGemm, _fused._agm_config(384, 256, 4096, "ptpc", "raw", "bf16", "auto"), 8)
    y = torch.ops.weave.all_gather_gemm(weave.ops.handle(fp8), _meta(33, 256, torch.float8_e4m3fn),
                                        _meta(384, 256, torch.float8_e4m3fn), torch.empty(33, device="meta"),
                                        torch.empty(384, device="meta"))
    assert y.shape == (264, 384) and y.dtype == torch.bfloat16
    for op in (ar, rs, ag, agm, fp8):
        weave.ops.release(weave.ops.handle(op))


def test_handles_are_stable_and_their_misuse_is_a_clear_error():
    ar = _stand_in(weave.GemmAllReduce, _fused._ar_config(128, 128, 256, "bf16", "raw", "auto", False, 0), 2)
    h = weave.ops.handle(ar)
    assert weave.ops.handle(ar) == h, "one handle per op"
    with pytest.raises(weave.ArgumentError, match="takes a GemmReduceScatter"):
        torch.ops.weave.gemm_reduce_scatter(h, _meta(8, 128), _meta(128, 128))
    # GemmAllGather and AllGatherGemm give outputs of one shape: the handle tells them apart.
    ag = _stand_in(weave.GemmAllGather, _fused._ag_config(128, 128, 256, "bf16", "raw", "bf16", "auto"), 2)
    with pytest.raises(weave.ArgumentError, match="is a GemmAllGather, this op takes a AllGatherGemm"):
        torch.ops.weave.all_gather_gemm(weave.ops.handle(ag), _meta(8, 128), _meta(128, 128))
    weave.ops.release(weave.ops.handle(ag))
    weave.ops.release(h)
    with pytest.raises(weave.ArgumentError, match="not a live weave.ops handle"):
        torch.ops.weave.gemm_all_reduce(h, _meta(8, 128), _meta(128, 128))
    with pytest.raises(weave.ArgumentError, match="not a live"):
        weave.ops.release(h)
    with pytest.raises(weave.ArgumentError, match="argument 'op'"):
        weave.ops.handle(object())


def test_compile_traces_a_tensor_parallel_block_without_a_graph_break():
    """Column-parallel up projection (gemm), activation, row-parallel down projection
    (GemmAllReduce), and the sequence-parallel form (GemmReduceScatter): one graph, fullgraph."""
    world = 2
    ar = _stand_in(weave.GemmAllReduce, _fused._ar_config(512, 1024, 2048, "bf16", "raw", "auto", False, 0), world)
    rs = _stand_in(weave.GemmReduceScatter, _fused._rs_config(512, 1024, 2048, "bf16", "raw", "auto", False, 0),
                   world)
    h_ar, h_rs = weave.ops.handle(ar), weave.ops.handle(rs)

    def block(x, w_up, w_down):
        h = torch.nn.functional.gelu(torch.ops.weave.gemm(x, w_up).float()).to(torch.bfloat16)
        return torch.ops.weave.gemm_all_reduce(h_ar, h, w_down) + 1, torch.ops.weave.gemm_reduce_scatter(h_rs, h, w_down)

    x, w_up, w_down = _meta(256, 512), _meta(1024, 512), _meta(512, 1024)
    explained = torch._dynamo.explain(block)(x, w_up, w_down)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    full, band = torch.compile(block, fullgraph=True, backend="aot_eager")(x, w_up, w_down)
    assert full.shape == (256, 512) and band.shape == (128, 512)
    # The handle as an argument of a function compiled with dynamic shapes: specialised, not lost.
    by_arg = torch.compile(lambda h, x, w: torch.ops.weave.gemm_all_reduce(h, x, w), fullgraph=True, dynamic=True,
                           backend="aot_eager")
    assert by_arg(h_ar, _meta(100, 1024), w_down).shape == (100, 512)
    weave.ops.release(h_ar)
    weave.ops.release(h_rs)


def test_compile_traces_a_sequence_parallel_block_without_a_graph_break():
    """The sequence-parallel MLP: every rank's tokens gathered into the up projection
    (AllGatherGemm, [T / W, h] -> [T, f / W]), activation, the down projection reduce-scattered
    back to [T / W, h] (GemmReduceScatter); one graph, fullgraph."""
    world, h, f = 2, 512, 2048
    agm = _stand_in(weave.AllGatherGemm, _fused._agm_config(f // world, h, 1024, "bf16", "raw", "bf16", "auto"), world)
    rs = _stand_in(weave.GemmReduceScatter, _fused._rs_config(h, f // world, 2048, "bf16", "raw", "auto", False, 0),
                   world)
    h_agm, h_rs = weave.ops.handle(agm), weave.ops.handle(rs)

    def block(x_rows, w_up, w_down):
        hid = torch.nn.functional.gelu(torch.ops.weave.all_gather_gemm(h_agm, x_rows, w_up).float())
        return torch.ops.weave.gemm_reduce_scatter(h_rs, hid.to(torch.bfloat16), w_down)

    x_rows, w_up, w_down = _meta(300, h), _meta(f // world, h), _meta(h, f // world)
    explained = torch._dynamo.explain(block)(x_rows, w_up, w_down)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    y = torch.compile(block, fullgraph=True, backend="aot_eager")(x_rows, w_up, w_down)
    assert y.shape == (300, h), "this rank's tokens back"
    weave.ops.release(h_agm)
    weave.ops.release(h_rs)


def _stand_in_comm(world, rank=0):
    comm = object.__new__(weave.Communicator)
    comm._impl = types.SimpleNamespace(world_size=world, rank=rank, device=0)
    return comm


@pytest.mark.parametrize("make, needle", [
    (lambda c: weave.nn.RowParallelLinear(1001, 512, max_tokens=64, comm=c), "'in_features': 1001 must be divisible"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1001, comm=c), "'out_features': 1001 must be divisible"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, sequence_parallel=True),
     "'max_tokens': sequence_parallel needs it"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, sequence_parallel=True, max_tokens=100),
     r"'max_tokens': 100 must be divisible by the world \(8\)"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, sequence_parallel=True, max_tokens=0),
     "'max_tokens': must be a positive int"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, max_tokens=-1), "'max_tokens': must be a positive int"),
    (lambda c: weave.nn.RowParallelLinear(1024, 512, max_tokens=64, comm=object()), "'comm': must be a weave.Communicator"),
    (lambda c: weave.nn.RowParallelLinear(1024, 512, max_tokens=64, comm=c, process_group=object()), "not both"),
    (lambda c: weave.nn.RowParallelLinear(1024, 0, max_tokens=64, comm=c), "'out_features': must be a positive int"),
    (lambda c: weave.nn.RowParallelLinear(1088, 512, max_tokens=64, comm=c, quant="blockscale"),
     r"'in_features / world': quant blockscale needs the layer's GEMM K, 136, to be a multiple of 128"),
    (lambda c: weave.nn.ColumnParallelLinear(520, 1024, comm=c, quant="blockscale"),
     r"'in_features': quant blockscale needs the layer's GEMM K, 520"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, quant="fp4"),
     "'quant': must be one of bf16, ptpc, blockscale, mxfp8"),
])
def test_layers_refuse_a_wrong_world_or_argument_before_any_gpu_work(make, needle):
    import weave.nn  # noqa: F401
    with pytest.raises(weave.ArgumentError, match=needle):
        make(_stand_in_comm(8))


def test_collective_fakes_stack_split_or_keep_dim_zero():
    def coll(kind, world):
        op = object.__new__(weave.Collective)
        op.comm, op._impl = types.SimpleNamespace(world_size=world, device=0), types.SimpleNamespace(op=kind)
        return weave.ops.handle(op)

    x = _meta(96, 512)
    h_ag, h_rs, h_ar = (coll(k, 4) for k in (weave.CollectiveOp.ALL_GATHER, weave.CollectiveOp.REDUCE_SCATTER,
                                              weave.CollectiveOp.ALL_REDUCE))
    assert torch.ops.weave.collective(h_ag, x).shape == (384, 512)
    assert torch.ops.weave.collective(h_rs, x).shape == (24, 512)
    assert torch.ops.weave.collective(h_ar, x).shape == (96, 512)
    with pytest.raises(weave.ArgumentError, match="multiple of it"):
        torch.ops.weave.collective(h_rs, _meta(98, 512))
    with pytest.raises(weave.ArgumentError, match="is a Collective, this op takes a GemmAllReduce"):
        torch.ops.weave.gemm_all_reduce(h_ar, x, _meta(8, 512))
    for h in (h_ag, h_rs, h_ar):
        weave.ops.release(h)


def test_ptpc_layer_operands_dequantise_to_the_bf16_product():
    """A layer's ptpc operands (weights per output feature, activations per token: amax / 448) on
    the CPU: e4m3 values with fp32 scales of one per row, whose dequantised product is within e4m3's
    rounding (relative L2 < 5%) of the unquantised one, and zero rows stay zero with scale 1."""
    import weave.nn
    torch.manual_seed(0)
    w, x = torch.randn(48, 256) * 0.05, torch.randn(20, 256)
    x[3] = 0
    layer = weave.nn._Weights()
    layer._init_weights(48, 256, "ptpc", "cpu")
    layer._load_weights(w)
    a, b, sa, sb = layer._operands(x)
    assert a.dtype == b.dtype == torch.float8_e4m3fn and sa.shape == (20,) and sb.shape == (48,)
    assert sa.dtype == sb.dtype == torch.float32 and sa[3] == 1 and not a[3].float().any()
    got = (a.float() * sa[:, None]) @ (b.float() * sb[:, None]).T
    ref = x @ w.T
    assert ((got - ref).norm() / ref.norm()).item() < 5e-2
    bf = weave.nn._Weights()
    bf._init_weights(48, 256, "bf16", "cpu")
    bf._load_weights(w)
    assert bf.weight.dtype == torch.bfloat16 and bf._operands(x.to(torch.bfloat16))[2] is None


def test_blockscale_layer_operands_dequantise_to_the_bf16_product():
    """A layer's blockscale operands on the CPU (weights per 128 x 128 block, the last block of rows
    partial; activations per token and 128-wide group): e4m3 values with fp32 scales [300 / 128
    rounded up, K / 128] and [tokens, K / 128], whose dequantised product is within e4m3's rounding
    (relative L2 < 5%) of the unquantised one; an all-zero group stays zero with scale 1."""
    import weave.nn
    torch.manual_seed(1)
    w, x = torch.randn(300, 256) * 0.05, torch.randn(20, 256)
    x[3, 128:] = 0
    layer = weave.nn._Weights()
    layer._init_weights(300, 256, "blockscale", "cpu")
    layer._load_weights(w)
    a, b, sa, sb = layer._operands(x)
    assert a.dtype == b.dtype == torch.float8_e4m3fn and a.shape == (20, 256) and b.shape == (300, 256)
    assert sa.shape == (20, 2) and sb.shape == (3, 2) and sa.dtype == sb.dtype == torch.float32
    assert sa[3, 1] == 1 and not a[3, 128:].float().any() and sa[3, 0] != 1
    deq_a = a.float() * sa.repeat_interleave(128, dim=1)
    deq_b = b.float() * sb.repeat_interleave(128, dim=0)[:300].repeat_interleave(128, dim=1)
    ref = x @ w.T
    assert ((deq_a @ deq_b.T - ref).norm() / ref.norm()).item() < 5e-2
    # A group's scale is its amax / 448: its largest element lands on e4m3's largest (448).
    assert (a[0, :128].float().abs().max() == 448).item()


def _meta_layer(cls, quant, rows, cols, world, op_cls, config):
    """A weave.nn layer (weight [rows, cols]) on meta tensors whose op is a stand-in: its forward
    dispatches to the fake implementations, so the layer's wiring (operands, op, bias, output
    shape) is checked without a GPU."""
    layer = object.__new__(cls)
    torch.nn.Module.__init__(layer)
    layer._init_weights(rows, cols, quant, "meta")
    layer._init_bias(rows, True, "meta")  # both layers: the weight's rows
    layer.comm, layer.sequence_parallel = types.SimpleNamespace(world_size=world, device=0), True
    layer.op = _stand_in(op_cls, config, world)
    layer._handle = weave.ops.handle(layer.op)
    return layer


@pytest.mark.parametrize("quant", ["bf16", "ptpc", "blockscale", "mxfp8"])
def test_sequence_parallel_layers_trace_to_the_gather_and_the_scatter(quant):
    """weave.nn's sequence-parallel pair on meta tensors: ColumnParallelLinear(sequence_parallel)
    takes this rank's [T / W, h] and gives [T, f / W] through torch.ops.weave.all_gather_gemm (fp8:
    the e4m3 activations and their per-token scales, quantised before the gather);
    RowParallelLinear(sequence_parallel) takes that and gives [T / W, h]; compiled whole, in grad
    mode too (the layers are forward only: nothing of theirs requires grad)."""
    import weave.nn
    world, h, f, tokens = 4, 256, 1024, 512
    dt = torch.bfloat16
    col = _meta_layer(weave.nn.ColumnParallelLinear, quant, f // world, h, world, weave.AllGatherGemm,
                      _fused._agm_config(f // world, h, tokens // world, quant, "raw", "bf16", "auto"))
    row = _meta_layer(weave.nn.RowParallelLinear, quant, h, f // world, world, weave.GemmReduceScatter,
                      _fused._rs_config(h, f // world, tokens, quant, "raw", "auto", False, 0))
    x_rows = torch.empty(tokens // world, h, device="meta", dtype=dt)
    up = col(x_rows)
    assert up.shape == (tokens, f // world) and up.dtype == dt
    assert row(up).shape == (tokens // world, h)
    block = torch.compile(lambda x: row(torch.nn.functional.gelu(col(x).float()).to(dt)), fullgraph=True,
                          backend="aot_eager")
    assert torch.is_grad_enabled()
    assert block(x_rows).shape == (tokens // world, h)
    assert not any(p.requires_grad for layer in (col, row) for p in layer.parameters())
    for layer in (col, row):
        weave.ops.release(layer._handle)


def test_all_gather_gemm_window_views_are_torch_tensors_of_the_cpp_views(monkeypatch):
    """AllGatherGemm's gathered_a / gathered_scale_a / input / input_scales: the C++ op's view
    (pointer, dtype, shape, strides) becomes a torch tensor of that dtype, shape and strides (e4m3 as
    float8_e4m3fn, ue8m0 as float8_e8m0fnu), and an empty view (bf16's scales) None. torch.as_tensor
    stands in for the device memory here (the real views: tests/python/test_gpu.py)."""
    seen = []

    def as_tensor(buf, device=None):  # a host buffer of the bytes the view spans
        seen.append((buf.__cuda_array_interface__["data"][0], device))
        return torch.zeros(buf.__cuda_array_interface__["shape"], dtype=torch.uint8)

    monkeypatch.setattr(torch, "as_tensor", as_tensor)
    DT, view = weave.DType, weave._weave.TensorView
    world, m, k = 4, 6, 512
    views = {"gathered_a": view(1 << 20, DT.E4M3, [world * m, k], [k, 1], 0),
             "gathered_scale_a": view(1 << 21, DT.UE8M0, [world * m, k // 32], [k // 32, 1], 0),
             "input": view((1 << 20) + 2 * m * k, DT.E4M3, [m, k], [k, 1], 0),
             "input_scales": view(0, DT.F32, [], [], -1)}
    op = _stand_in(weave.AllGatherGemm, _fused._agm_config(256, k, 64, "mxfp8", "raw", "bf16", "auto"), world)
    op._impl = types.SimpleNamespace(**{name: (lambda m, v=v: v) for name, v in views.items()})
    a, sa, slot = op.gathered_a(m), op.gathered_scale_a(m), op.input(m)
    assert (a.dtype, tuple(a.shape), a.stride()) == (torch.float8_e4m3fn, (world * m, k), (k, 1))
    ue8m0 = getattr(torch, "float8_e8m0fnu", torch.uint8)  # bytes where torch has no e8m0 type
    assert (sa.dtype, tuple(sa.shape), sa.stride()) == (ue8m0, (world * m, k // 32), (k // 32, 1))
    assert (slot.dtype, tuple(slot.shape)) == (torch.float8_e4m3fn, (m, k)) and op.input_scales(m) is None
    assert seen == [(1 << 20, "cuda:0"), (1 << 21, "cuda:0"), ((1 << 20) + 2 * m * k, "cuda:0")]
    ptpc = view(1 << 22, DT.F32, [world * m], [1], 0)
    op._impl = types.SimpleNamespace(gathered_scale_a=lambda m: ptpc)
    s = op.gathered_scale_a(m)
    assert (s.dtype, tuple(s.shape)) == (torch.float32, (world * m,))
