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
    ("collective", "SymInt handle, Tensor inp"),
])
def test_ops_are_registered_with_functional_schemas(name, args):
    schema = str(getattr(torch.ops.weave, name).default._schema)
    assert schema == f"weave::{name}({args}) -> Tensor", schema
    assert "!" not in schema, "no argument is mutated or aliased"


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
    for op in (ar, rs, ag):
        weave.ops.release(weave.ops.handle(op))


def test_handles_are_stable_and_their_misuse_is_a_clear_error():
    ar = _stand_in(weave.GemmAllReduce, _fused._ar_config(128, 128, 256, "bf16", "raw", "auto", False, 0), 2)
    h = weave.ops.handle(ar)
    assert weave.ops.handle(ar) == h, "one handle per op"
    with pytest.raises(weave.ArgumentError, match="takes a GemmReduceScatter"):
        torch.ops.weave.gemm_reduce_scatter(h, _meta(8, 128), _meta(128, 128))
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


def _stand_in_comm(world, rank=0):
    comm = object.__new__(weave.Communicator)
    comm._impl = types.SimpleNamespace(world_size=world, rank=rank, device=0)
    return comm


@pytest.mark.parametrize("make, needle", [
    (lambda c: weave.nn.RowParallelLinear(1001, 512, max_tokens=64, comm=c), "'in_features': 1001 must be divisible"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1001, comm=c), "'out_features': 1001 must be divisible"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, sequence_parallel=True), "AllGatherGemm"),
    (lambda c: weave.nn.RowParallelLinear(1024, 512, max_tokens=64, comm=object()), "'comm': must be a weave.Communicator"),
    (lambda c: weave.nn.RowParallelLinear(1024, 512, max_tokens=64, comm=c, process_group=object()), "not both"),
    (lambda c: weave.nn.RowParallelLinear(1024, 0, max_tokens=64, comm=c), "'out_features': must be a positive int"),
    (lambda c: weave.nn.RowParallelLinear(1024, 512, max_tokens=64, comm=c, quant="blockscale"), "not built yet"),
    (lambda c: weave.nn.ColumnParallelLinear(512, 1024, comm=c, quant="fp4"), "'quant': must be one of bf16, ptpc"),
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
