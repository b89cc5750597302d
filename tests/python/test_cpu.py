"""The package without a GPU: import, plans, and every validation error with its message. Operands
are described through __cuda_array_interface__ objects that point nowhere: weave checks every
rule on the host before it touches a GPU, so the errors are the ones a real tensor gets."""
import os
import shutil
import subprocess
import sys
import types

import pytest

import weave
from conftest import GPU_SKIP

HERE = os.path.dirname(os.path.abspath(__file__))


class Dev:
    """A CUDA array as __cuda_array_interface__ (v3) describes it; nothing is allocated."""

    def __init__(self, shape, typestr, ptr=1 << 24, strides=None, device=0):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}
        self.device = types.SimpleNamespace(id=device)


BF16, F32, U8, I32 = "<V2", "<f4", "|u1", "<i4"


def test_import_without_gpu_reports_why():
    assert weave.__version__
    if GPU_SKIP:
        assert weave.devices() == [] or all(not d["hopper"] for d in weave.devices())
        assert weave.no_gpu_reason() != ""
    v = weave.nccl_versions()
    assert v["build"] == weave.nccl_build_version and v["runtime"].count(".") == 2


@pytest.mark.parametrize("mode,out,k", [("bf16", "bf16", 2048), ("bf16", "fp32", 1024), ("ptpc", "bf16", 2048),
                                        ("blockscale", "bf16", 2048), ("blockscale", "fp32", 7168),
                                        ("mxfp8", "bf16", 2048)])
def test_plan_gemm(mode, out, k):
    p = weave.plan_gemm(4096, 5120, k, mode, out)
    assert isinstance(p, weave.GemmPlan)
    assert p.kernel.startswith("sm90_gemm_")
    if p.mx_dequant:  # mxfp8 on the bf16 route: the bf16 kernel, rerun on the native one when needed
        assert mode == "mxfp8" and "_bf16_" in p.kernel and "mxfp8" in p.fallback_kernel and "bf16 route" in p.reason
    else:
        assert ("bf16" if mode == "bf16" else mode) in p.kernel
    assert p.grid >= 1 and p.tiles >= 1 and p.reason and not p.gemv
    assert weave.validate_gemm(4096, 5120, k, mode, out) == ""
    assert weave.plan_gemm(1, 5120, k, mode, out).gemv  # decode shapes take the GEMV
    assert weave.plan_gemm(1, 5120, k, mode, out, decode_route="gemv").gemv
    assert not weave.plan_gemm(1, 5120, k, mode, out, decode_route="tiles").gemv
    assert weave.plan_gemm(24, 5120, k, mode, out).gemv == (mode == "mxfp8")  # past the GEMV's range but mxfp8


def test_plan_decode_route_refusals():
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(4, 4096, 4096, decode_route="fast")
    assert "argument 'decode_route': must be one of auto, gemv, tiles" in str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(33, 4096, 4096, decode_route="gemv")
    assert "override 'decode_route' = gemv" in str(e.value) and "m = 33 > 32" in str(e.value)


def test_plan_gemv_split_beside_the_gemv_route():
    # split_k beside decode_route="gemv" is the GEMV's K split; without the route it asks for the tiles.
    p = weave.plan_gemm(4, 7168, 2048, decode_route="gemv", split_k=3)
    assert p.gemv and p.split_k == 3 and p.grid == 56 * 3, p
    assert not weave.plan_gemm(4, 7168, 2048, split_k=2).gemv
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(4, 7168, 64, decode_route="gemv", split_k=3)  # bf16 K 64: two 64-byte steps
    assert "override 'split_k' = 3 with decode_route = gemv" in str(e.value)


def test_plan_overrides_and_layouts():
    assert weave.plan_gemm(256, 512, 8192, "bf16", split_k=4).split_k == 4
    assert weave.plan_gemm(4096, 4096, 2048, block_m=128, block_n=128).block_n == 128
    packed = weave.plan_gemm(4096, 4096, 2048, "mxfp8", scale_layout="packed", mx_route="native")
    assert "packed" in packed.kernel and not packed.mx_dequant
    assert "_blockscale_mn_" in weave.plan_gemm(4096, 4096, 2048, "blockscale", scale_layout="mn-major").kernel
    assert "_blockscale_mn_" not in weave.plan_gemm(4096, 4096, 2048, "blockscale", scale_a_route="as-given").kernel
    route = weave.plan_gemm(4096, 4096, 2048, "mxfp8", scale_layout="packed", mx_route="bf16")
    assert route.mx_dequant and "packed" in route.fallback_kernel
    assert not weave.plan_gemm(64, 8192, 1280, "mxfp8").mx_dequant  # small M: the weights' conversion dominates
    # Row-major blockscale A scales: copied to MN-major where the model says it pays, or as forced.
    copied = weave.plan_gemm(16384, 2048, 7168, "blockscale")
    assert copied.scale_a_mn_copy and "_blockscale_mn_" in copied.kernel, copied.reason
    assert not weave.plan_gemm(16384, 2048, 7168, "blockscale", scale_a_route="as-given").scale_a_mn_copy
    assert weave.plan_gemm(256, 256, 256, "blockscale", scale_a_route="mn-major-copy").scale_a_mn_copy
    assert weave.plan_gemm(4096, 4096, 2048, weave.ScaleMode.PTPC, weave.DType.F32).kernel.endswith(
        weave.plan_gemm(4096, 4096, 2048, "ptpc", "fp32").kernel[-7:])
    # 2-CTA clusters only where forced (the planner's choice is 1 until measured), on whole pairs.
    assert weave.plan_gemm(4096, 7168, 2048, "ptpc").cluster == 1
    c2 = weave.plan_gemm(4096, 7168, 2048, "ptpc", cluster=2)
    assert c2.cluster == 2 and c2.kernel.endswith("_c2") and c2.grid % 2 == 0, c2.reason
    assert weave.plan_gemm(4096, 7168, 2048, "blockscale", scale_layout="mn-major", cluster=2).cluster == 2
    with pytest.raises(weave.Error) as e:
        weave.plan_gemm(4096, 7168, 2048, "bf16", cluster=2)
    assert "no instance of 2-CTA clusters is built for mode bf16" in str(e.value)


@pytest.mark.parametrize("args,needle", [
    ((0, 64, 64), "m must be >= 1 (got 0)"),
    ((64, 64, 100, "bf16"), "k must be a multiple of 8 for bf16 inputs"),
    ((64, 64, 100, "ptpc"), "k must be a multiple of 16 for e4m3 inputs"),
    ((64, 64, 160, "blockscale"), "k must be a multiple of 128 for blockscale"),
    ((64, 100, 128, "bf16", "bf16"), "n must be a multiple of 8 for bf16 output"),
    ((64, 64, 128, "ptpc", "bf16", "mn-major"), "scale_layout 'mn-major' applies to mode blockscale only"),
])
def test_validate_gemm_rules(args, needle):
    assert needle in weave.validate_gemm(*args)
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(*args)
    assert needle in e.value.message and e.value.status == weave.Status.INVALID_ARGUMENT
    assert e.value.location  # raised by the C++ library, file:line kept


@pytest.mark.parametrize("kw,needle", [
    ({"mode": "int8"}, "argument 'mode': unknown scale mode 'int8'"),
    ({"out_dtype": "fp16"}, "argument 'out_dtype': unknown output dtype"),
    ({"out_dtype": "e4m3"}, "argument 'out_dtype': must be bf16 or fp32 (got e4m3)"),
    ({"scale_layout": "tiled"}, "argument 'scale_layout': unknown scale layout"),
    ({"split_k": 99}, "split"),
    ({"block_m": 96}, "block"),
    ({"mx_route": "fast"}, "argument 'mx_route': must be one of auto, native, bf16"),
    ({"mx_route": "bf16", "mode": "ptpc"}, "'mx_route': applies to mode mxfp8 only"),
    ({"scale_a_route": "copy"}, "argument 'scale_a_route': must be one of auto, as-given, mn-major-copy"),
    ({"scale_a_route": "mn-major-copy", "mode": "ptpc"}, "'scale_a_route': applies to mode blockscale"),
    ({"cluster": 3}, "override 'cluster': must be 1 (no clusters), 2"),
    ({"cluster": 2, "mode": "ptpc", "grid": 7}, "override 'grid' = 7: 2-CTA clusters"),
])
def test_plan_argument_errors(kw, needle):
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(4096, 4096, 2048, **kw)
    assert needle in str(e.value)


# A number the C++ binding cannot hold (too wide, a float, a bool) is the caller's mistake: an
# ArgumentError naming the argument. The binding's own TypeError named neither.
@pytest.mark.parametrize("call,needle", [
    (lambda: weave.plan_gemm(2**70, 4096, 4096), "argument 'm': must be an int <= 9223372036854775807 (got 2**70"),
    (lambda: weave.plan_gemm(4096, 4096.0, 4096), "argument 'n': must be an int (got float 4096.0)"),
    (lambda: weave.plan_gemm(4096, 4096, 4096, split_k=2.5), "argument 'split_k': must be an int (got float 2.5)"),
    (lambda: weave.plan_gemm(4096, 4096, 4096, grid=True), "argument 'grid': must be an int (got bool True)"),
    (lambda: weave.plan_gemm(4096, 4096, 4096, block_m=2**40, block_n=128), "argument 'block_m': must be an int <="),
    (lambda: weave.plan_gemm(4096, 4096, 4096, num_sms=2**40), "argument 'num_sms': must be an int <= 2147483647"),
    (lambda: weave.plan_gemm(4096, 4096, 4096, num_sms="132"), "argument 'num_sms': must be an int (got str '132')"),
    (lambda: weave.validate_gemm(-(2**64), 8, 8), "argument 'm': must be an int >= -9223372036854775808"),
    (lambda: weave.GemmAllReduce.validate(n=2**70, k=2048, m_max=128, world=2), "argument 'n': must be an int <="),
    (lambda: weave.GemmAllReduce.validate(n=7168, k=2048, m_max=128, world=2.0), "argument 'world': must be an int"),
    (lambda: weave.GemmAllReduce.validate(n=7168, k=2048, m_max=128, world=2, chunks=1.5), "argument 'chunks'"),
    (lambda: weave.GemmAllGather.window_bytes(n=2048, k=7168, m_max=2**63, world=2), "argument 'm_max': must be an int <="),
    (lambda: weave.GemmReduceScatter.validate(n=7168, k=2.5, m_max=128, world=2), "argument 'k': must be an int"),
    (lambda: weave.GemmReduceScatter.plan_for(True, n=7168, k=2048, m_max=128, world=2), "argument 'm': must be an int"),
    (lambda: weave.AllGatherGemm.window_bytes(n=2048, k=7168, m_max=2**63, world=2),
     "argument 'm_max': must be an int <="),
    (lambda: weave.AllGatherGemm.validate(n=2048.0, k=7168, m_max=128, world=2), "argument 'n': must be an int"),
    (lambda: weave.AllGatherGemm.plan_for(4, n=2048, k=7168, m_max=128, world=2, num_sms=1.5), "argument 'num_sms'"),
])
def test_numeric_mistakes_are_argument_errors_not_type_errors(call, needle):
    with pytest.raises(weave.ArgumentError) as e:
        call()
    assert needle.replace("2**70", str(2**70)) in str(e.value)


def test_numpy_integers_are_ints():
    np = pytest.importorskip("numpy")
    assert weave.plan_gemm(np.int64(4096), np.int32(4096), 4096, split_k=np.int64(1)).split_k == 1


# The library refuses what `weave plan gemm` refuses, with the same limits (gemm::kMaxSms and
# check_plan_limits): before, grid=500 on 132 SMs and num_sms=10**6 planned.
def test_plan_limits_are_the_clis():
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(4096, 4096, 4096, grid=500)
    assert "override 'grid' = 500: a persistent grid has at most one CTA per SM, so 1 .. num_sms = 132" in str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(4096, 4096, 4096, num_sms=10**6)
    assert "argument 'num_sms': must be 1 .. 1024" in str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.plan_gemm(4, 4096, 4096, num_sms=8, grid=9)  # the decode GEMV's path too
    assert "override 'grid' = 9" in str(e.value)
    assert weave.plan_gemm(4096, 4096, 4096, grid=132).grid == 132


def test_error_types():
    with pytest.raises(ValueError):
        weave.plan_gemm(0, 8, 8)
    err = weave.ArgumentError(weave.Status.INVALID_ARGUMENT, "argument 'x': rule")
    assert isinstance(err, weave.Error) and isinstance(err, RuntimeError)
    assert "invalid argument" in str(err) and err.message == "argument 'x': rule"


M, N, K = 96, 256, 512


def operands(mode="bf16", **over):
    ab = BF16 if mode == "bf16" else U8
    d = {"a": Dev((M, K), ab), "b": Dev((N, K), ab), "out": Dev((M, N), BF16)}
    if mode == "ptpc":
        d.update(scale_a=Dev((M,), F32), scale_b=Dev((N,), F32))
    elif mode == "blockscale":
        d.update(scale_a=Dev((M, K // 128), F32), scale_b=Dev(((N + 127) // 128, K // 128), F32))
    elif mode == "mxfp8":
        d.update(scale_a=Dev((M, K // 32), U8), scale_b=Dev(((N + 31) // 32, K // 32), U8))
    d.update(over)
    return d


def build(mode, **over):
    d = operands(mode, **over)
    return weave.Gemm(d.pop("a"), d.pop("b"), d.pop("out"), mode=mode, **d)


CASES = [
    ("bf16", {"a": Dev((M, K), "<f2")}, "argument 'A': dtype <f2 is not one weave reads (expected bf16"),
    ("ptpc", {"a": Dev((M, K), BF16)}, "argument 'A': dtype must be e4m3 (got bf16)"),
    ("bf16", {"b": Dev((N, K + 64), BF16)}, f"argument 'B': shape must be [{N}, {K}] (got [{N}, {K + 64}])"),
    ("bf16", {"a": Dev((M, K), BF16, strides=(2, 2 * M))}, "argument 'A': last dimension must be contiguous"),
    ("bf16", {"a": Dev((M, K), BF16, ptr=(1 << 24) + 2)}, "argument 'A': base address must be 16-byte aligned"),
    ("bf16", {"a": Dev((M, K), BF16, strides=(2 * (K + 4), 2))}, "leading dimension in bytes"),
    ("bf16", {"out": Dev((M, N), "<f2")}, "argument 'out': dtype must be bf16 or fp32 (got <f2)"),
    ("bf16", {"out": Dev((M, N + 8), BF16)}, f"argument 'C': shape must be [{M}, {N}]"),
    ("bf16", {"b": Dev((N, K), BF16, device=1)}, "argument 'B': must live in cuda:0 (got cuda:1)"),
    ("bf16", {"a": Dev((2, M, K), BF16)}, "argument 'A': must be a 2-D matrix (got rank 3"),
    ("bf16", {"a": [[1.0]]}, "argument 'A': expected a torch tensor or an object with __cuda_array_interface__"),
    ("bf16", {"scale_a": Dev((M,), F32)}, "mode bf16 takes no scales"),
    ("ptpc", {"scale_b": None}, "argument 'scale_b': mode ptpc needs it"),
    ("ptpc", {"scale_a": Dev((M, 1), F32)}, f"argument 'scale_a': ptpc takes fp32 [M] = [{M}], a 1-D vector"),
    ("ptpc", {"scale_b": Dev((N + 1,), F32)}, f"argument 'scale_b': length must be {N} (got {N + 1})"),
    ("ptpc", {"scale_a": Dev((M,), F32, strides=(8,))}, "argument 'scale_a': must be contiguous (stride 1; got 2)"),
    ("ptpc", {"scale_a": Dev((M,), BF16)}, "argument 'scale_a': dtype must be fp32 (got bf16)"),
    ("blockscale", {"scale_a": Dev((M, K // 128), F32, strides=(4, 4 * M))},
     "argument 'scale_a': last dimension must be contiguous"),
    ("blockscale", {"scale_b": Dev((N, K // 128), F32)}, "argument 'scale_b': shape must be [2, 4]"),
    ("mxfp8", {"scale_a": Dev((M, K // 16), U8)}, f"argument 'scale_a': shape must be [{M}, {K // 32}]"),
    ("mxfp8", {"scale_b": Dev(((N + 31) // 32, K // 32), F32)}, "argument 'scale_b': dtype must be ue8m0 (got fp32)"),
]


@pytest.mark.parametrize("mode,over,needle", CASES, ids=[f"{c[0]}-{c[2][:40]}" for c in CASES])
def test_gemm_operand_errors(mode, over, needle):
    with pytest.raises(weave.ArgumentError) as e:
        build(mode, **over)
    assert needle in str(e.value), str(e.value)


def test_gemm_packed_mxfp8_scales_take_int32_words():
    kw = K // 128
    # int32 words [ceil(K/128), rows] pass the operand checks (then the missing GPU stops it).
    d = operands("mxfp8", scale_a=Dev((kw, M), I32), scale_b=Dev((kw, (N + 31) // 32), I32))
    if GPU_SKIP:
        with pytest.raises(weave.Error) as e:
            weave.Gemm(d.pop("a"), d.pop("b"), d.pop("out"), mode="mxfp8", scale_layout="packed", **d)
        assert e.value.status != weave.Status.INVALID_ARGUMENT, str(e.value)
    else:  # a GPU: constructing (never running) on pointers that lead nowhere is host work only
        g = weave.Gemm(d.pop("a"), d.pop("b"), d.pop("out"), mode="mxfp8", scale_layout="packed", **d)
        assert "packed" in g.plan.kernel
    bad = operands("mxfp8", scale_a=Dev((kw, M + 1), I32), scale_b=Dev((kw, (N + 31) // 32), I32))
    with pytest.raises(weave.ArgumentError) as e:
        weave.Gemm(bad.pop("a"), bad.pop("b"), bad.pop("out"), mode="mxfp8", scale_layout="packed", **bad)
    assert f"argument 'scale_a': shape must be [{kw}, {4 * M}]" in str(e.value)


@pytest.mark.skipif(not GPU_SKIP, reason="checks the no-GPU path")
@pytest.mark.parametrize("mode", ["bf16", "ptpc", "blockscale", "mxfp8"])
def test_valid_operands_without_gpu_raise_not_crash(mode):
    with pytest.raises(weave.Error) as e:
        build(mode)
    assert e.value.status in (weave.Status.CUDA_ERROR, weave.Status.NO_DEVICE), str(e.value)


@pytest.mark.parametrize("value", [1, "yes", None])
def test_allow_pdl_must_be_a_bool_before_any_gpu_work(value):
    with pytest.raises(weave.ArgumentError, match="argument 'allow_pdl': must be a bool"):
        build("bf16", allow_pdl=value)


def test_fused_allow_pdl_is_a_bool_and_only_for_the_all_reduces_decode():
    with pytest.raises(weave.ArgumentError, match="argument 'allow_pdl': must be a bool"):
        weave.GemmAllReduce(None, n=256, k=256, m_max=64, allow_pdl=1)
    with pytest.raises(weave.ArgumentError, match="GemmReduceScatter has no decode mode"):
        weave.GemmReduceScatter(None, n=256, k=256, m_max=64, allow_pdl=True)
    cfg = weave._weave.GemmAllReduceConfig()
    assert cfg.allow_pdl is False  # off unless asked


def test_host_memory_is_refused():
    np = pytest.importorskip("numpy")
    a = np.zeros((M, K), dtype=np.float32)
    with pytest.raises(weave.ArgumentError) as e:
        weave.Gemm(a, Dev((N, K), BF16), Dev((M, N), BF16))
    assert "argument 'A': dtype float32 is not one weave reads" in str(e.value)
    b = np.zeros((N, K), dtype=np.uint8)  # e4m3 bytes, but on the host
    with pytest.raises(weave.ArgumentError) as e:
        weave.Gemm(Dev((M, K), U8), b, Dev((M, N), BF16), mode="ptpc", scale_a=Dev((M,), F32), scale_b=Dev((N,), F32))
    assert "argument 'B': must live in cuda:0 (got host memory)" in str(e.value)


def test_comm_argument_errors():
    with pytest.raises(weave.ArgumentError) as e:
        weave.Communicator.create(b"short", 0, 1, 0)
    assert "argument 'unique_id': must be 128 bytes (got 5)" in str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.Collective(object(), "all-reduce", max_count=16)
    assert "argument 'comm': must be a weave.Communicator" in str(e.value)
    with pytest.raises(TypeError):
        weave.Communicator(object())


def test_fused_ops_validate_window_and_argument_errors():
    ok = dict(n=7168, k=2048, m_max=8192)
    assert weave.GemmAllReduce.validate(**ok, world=2, quant="blockscale") == ""
    assert weave.GemmAllGather.validate(n=2048, k=7168, m_max=4096, world=8, out_dtype="fp32") == ""
    assert "multiple of 8" in weave.GemmAllReduce.validate(n=7170, k=2048, m_max=8192, world=2)
    assert "world" in weave.GemmAllReduce.validate(**ok, world=9)
    assert "chunks" in weave.GemmAllReduce.validate(**ok, world=2, chunks=17)
    assert "bf16 output" in weave.GemmAllGather.validate(n=256, k=256, m_max=256, world=2, quant="ptpc",
                                                         out_dtype="fp32")
    # Window sizes grow with the world (staging per source) and match the C++ planner's layout.
    w2 = weave.GemmAllReduce.window_bytes(**ok, world=2)
    w8 = weave.GemmAllReduce.window_bytes(**ok, world=8)
    assert w2 >= 2 * 8192 * 7168 * 2 and w8 > w2
    assert weave.GemmAllReduce.window_bytes(**ok, world=2, mode="split-lsa") < w2  # no fused staging
    assert weave.GemmAllGather.window_bytes(n=2048, k=7168, m_max=4096, world=2) >= 2 * 4096 * 2048 * 2
    for bad, needle in [(dict(mode="fused-lsa"), "unknown mode 'fused-lsa'"), (dict(quant="fp4"), "unknown scale mode"),
                        (dict(m_max=0), "argument 'm_max': must be an int >= 1"), (dict(chunks=-1), "argument 'chunks'")]:
        with pytest.raises(weave.ArgumentError) as e:
            weave.GemmAllReduce.validate(**{**ok, **bad}, world=2)
        assert needle in str(e.value), str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.GemmAllReduce.window_bytes(n=7170, k=2048, m_max=8192, world=2)
    assert "multiple of 8" in str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.GemmAllReduce(object(), **ok)
    assert "argument 'comm': must be a weave.Communicator" in str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.GemmAllGather(object(), n=256, k=256, m_max=256)
    assert "argument 'comm': must be a weave.Communicator" in str(e.value)
    assert weave._weave.name(weave.GemmAllReduceMode.FUSED) == "fused"
    assert weave._weave.name(weave.GemmAllReduceMode.FUSED_CE) == "fused-ce"
    # fused-ce: the fused staging plus its copy-stream words
    assert (weave.GemmAllReduce.window_bytes(**ok, world=2, mode="fused-ce")
            > weave.GemmAllReduce.window_bytes(**ok, world=2, mode="fused"))
    assert weave._weave.name(weave.GemmAllGatherMode.FUSED_LSA) == "fused-lsa"
    assert weave._weave.name(weave.GemmAllGatherMode.FUSED_CE) == "fused-ce"
    # mxfp8's bf16 route: the config carries it; a bad name is refused by argument before any GPU work.
    from weave._fused import _ag_config, _ar_config

    assert _ag_config(256, 256, 256, "mxfp8", "raw", "bf16", "auto", "", "bf16").mx_route == 2
    assert _ar_config(256, 256, 256, "mxfp8", "raw", "auto", False, 0, "", "native").mx_route == 1
    for op in (weave.GemmAllGather, weave.GemmAllReduce):
        with pytest.raises(weave.ArgumentError) as e:
            op(object(), n=256, k=256, m_max=256, mx_route="fp8")
        assert "argument 'mx_route': must be one of auto, native, bf16" in str(e.value)
    # max_sms: CTAs per rank at most (SMs left for other communicators' kernels), checked by argument.
    assert _ar_config(256, 256, 256, "bf16", "raw", "auto", False, 0, "", "auto", 66).max_sms == 66
    assert _ag_config(256, 256, 256, "bf16", "raw", "bf16", "auto", "", "auto", 8).max_sms == 8
    for op in (weave.GemmAllGather, weave.GemmAllReduce):
        for bad in (2000, -1, 1.5):
            with pytest.raises(weave.ArgumentError) as e:
                op(object(), n=256, k=256, m_max=256, max_sms=bad)
            assert "argument 'max_sms'" in str(e.value)


def test_reduce_scatter_validate_window_and_argument_errors():
    """GemmReduceScatter: GemmAllReduce's rules plus its own (m_max >= world; mode fused: m_max >=
    world x 128), its modes (no decode, fused-rs or fused-ce), every argument error before any GPU
    work."""
    ok = dict(n=7168, k=2048, m_max=8192)
    assert weave.GemmReduceScatter.validate(**ok, world=2, quant="blockscale") == ""
    assert weave.GemmReduceScatter.validate(**ok, world=8, mode="fused") == ""
    assert "multiple of 8" in weave.GemmReduceScatter.validate(n=7170, k=2048, m_max=8192, world=2)
    assert "world" in weave.GemmReduceScatter.validate(**ok, world=9)
    assert "m_max must be >= the world (4)" in weave.GemmReduceScatter.validate(n=256, k=256, m_max=3, world=4)
    assert "mode fused needs m_max >= world x 128 = 512" in weave.GemmReduceScatter.validate(
        n=256, k=256, m_max=500, world=4, mode="fused")
    assert weave.GemmReduceScatter.validate(n=256, k=256, m_max=500, world=4, mode="split-lsa") == ""
    # The window: GemmAllReduce's layout (the output at m_max, fused staging per source), whose split
    # collective is a reduce-scatter (a world'th of the all-reduce's output).
    w2, w8 = (weave.GemmReduceScatter.window_bytes(**ok, world=w) for w in (2, 8))
    assert w2 >= 2 * 8192 * 7168 * 2 and w8 > w2
    assert weave.GemmReduceScatter.window_bytes(**ok, world=2, mode="split-lsa") < w2  # no fused staging
    for bad, needle in [(dict(mode="decode"), "argument 'mode': unknown mode 'decode' (one of: auto, gemm-only, "
                                              "split-nccl, split-lsa, split-ce, fused)"),
                        (dict(mode="fused-ce"), "unknown mode 'fused-ce'"), (dict(quant="fp4"), "unknown scale mode"),
                        (dict(m_max=0), "argument 'm_max': must be an int >= 1"), (dict(chunks=-1), "argument 'chunks'")]:
        with pytest.raises(weave.ArgumentError) as e:
            weave.GemmReduceScatter.validate(**{**ok, **bad}, world=2)
        assert needle in str(e.value), str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.GemmReduceScatter.window_bytes(n=256, k=256, m_max=3, world=4)
    assert "m_max must be >= the world" in str(e.value)
    assert [weave._weave.name(v) for v in (weave.GemmReduceScatterMode.AUTO, weave.GemmReduceScatterMode.GEMM_ONLY,
                                           weave.GemmReduceScatterMode.SPLIT_NCCL, weave.GemmReduceScatterMode.SPLIT_LSA,
                                           weave.GemmReduceScatterMode.SPLIT_CE, weave.GemmReduceScatterMode.FUSED)] == [
        "auto", "gemm-only", "split-nccl", "split-lsa", "split-ce", "fused"]
    assert "GemmReduceScatter" in weave.__all__ and "GemmReduceScatterMode" in weave.__all__
    from weave._fused import _rs_config

    c = _rs_config(256, 256, 256, "mxfp8", "raw", "fused", True, 2, "", "native", 66)
    assert (c.mode, c.exact_own, c.chunks, c.mx_route, c.max_sms) == (weave.GemmReduceScatterMode.FUSED, True, 2, 1, 66)
    for kw, needle in [(dict(comm=object()), "argument 'comm': must be a weave.Communicator"),
                       (dict(mx_route="fp8"), "argument 'mx_route': must be one of auto, native, bf16"),
                       (dict(max_sms=2000), "argument 'max_sms'"), (dict(mode="decode"), "unknown mode 'decode'"),
                       (dict(calibration=3), "argument 'calibration': must be a path")]:
        with pytest.raises(weave.ArgumentError) as e:
            weave.GemmReduceScatter(**{"comm": object(), "n": 256, "k": 256, "m_max": 256, **kw})
        assert needle in str(e.value), str(e.value)


def test_all_gather_gemm_validate_window_and_argument_errors():
    """AllGatherGemm: its rules (the gathered GEMM's, world x m_max rows; raw scales only, since A's
    scales travel with their rows; fp8 gives bf16; mxfp8 needs k a multiple of 128; mx_route for
    mxfp8 only; fused-ce for bf16, ptpc and blockscale with bf16 output), its modes, every argument
    error before any GPU work."""
    from weave._fused import _agm_config

    ok = dict(n=2048, k=7168, m_max=1024)
    for quant in ("bf16", "ptpc", "blockscale", "mxfp8"):
        assert weave.AllGatherGemm.validate(**ok, world=8, quant=quant) == "", quant
    assert weave.AllGatherGemm.validate(**ok, world=2, out_dtype="fp32") == ""
    for bad, needle in [(dict(quant="ptpc", out_dtype="fp32"), "fp8 modes (ptpc) produce bf16 output"),
                        (dict(quant="blockscale", scale_layout="mn-major"),
                         "scale_layout must be raw: A's scales travel with their rows, and mn-major interleaves"),
                        (dict(quant="mxfp8", scale_layout="packed"), "packed interleaves the rows of several ranks"),
                        (dict(quant="mxfp8", k=160), "mxfp8 needs k a multiple of 128"),
                        (dict(n=2050), "n must be a multiple of 8"),
                        (dict(world=9), "world must be in 1..8, got 9")]:
        assert needle in weave.AllGatherGemm.validate(**{**ok, "world": 2, **bad}), (bad, needle)
    c = _agm_config(256, 256, 256, "bf16", "raw", "bf16", "auto", mx_route="native")
    assert "mx_route applies to quant mxfp8 only" in weave._weave.all_gather_gemm_validate(c, 2)
    # fused-ce: its GEMM reads A's scales as they land and stores bf16; the split modes keep the rest.
    rule = "mode fused-ce runs quant bf16, ptpc and blockscale with bf16 output"
    for quant in ("bf16", "ptpc", "blockscale"):
        assert weave.AllGatherGemm.validate(**ok, world=4, quant=quant, mode="fused-ce") == "", quant
    for bad, got in [(dict(quant="mxfp8"), "got mxfp8 -> bf16"), (dict(out_dtype="fp32"), "got bf16 -> fp32")]:
        why = weave.AllGatherGemm.validate(**ok, world=2, mode="fused-ce", **bad)
        assert rule in why and got in why, why
        assert weave.AllGatherGemm.validate(**ok, world=2, mode="split-lsa", **bad) == "", bad
        with pytest.raises(weave.ArgumentError) as e:
            weave.AllGatherGemm.window_bytes(**ok, world=2, mode="fused-ce", **bad)
        assert rule in str(e.value), str(e.value)
    # Its window: no split gathers, its landed words instead.
    fused_w2 = weave.AllGatherGemm.window_bytes(**ok, world=2, mode="fused-ce")
    assert 0 < fused_w2 != weave.AllGatherGemm.window_bytes(**ok, world=2, mode="split-lsa")
    # The window: world x m_max rows of A (e4m3 and its scales in the fp8 modes) and of the output,
    # plus the split gathers' words; it grows with the world.
    w2, w8 = (weave.AllGatherGemm.window_bytes(**ok, world=w) for w in (2, 8))
    assert w2 >= 2 * 1024 * (7168 * 2 + 2048 * 2) and w8 > w2
    assert weave.AllGatherGemm.window_bytes(**ok, world=2, quant="ptpc") < w2  # e4m3 rows: half the bytes
    for bad, needle in [(dict(mode="fused-lsa"), "argument 'mode': unknown mode 'fused-lsa' (one of: auto, gemm-only, "
                                                 "split-nccl, split-lsa, split-ce, fused-ce)"),
                        (dict(quant="fp4"), "unknown scale mode"),
                        (dict(m_max=0), "argument 'm_max': must be an int >= 1"),
                        (dict(out_dtype="fp16"), "argument 'out_dtype'")]:
        with pytest.raises(weave.ArgumentError) as e:
            weave.AllGatherGemm.validate(**{**ok, **bad}, world=2)
        assert needle in str(e.value), str(e.value)
    with pytest.raises(weave.ArgumentError) as e:
        weave.AllGatherGemm.window_bytes(n=2050, k=7168, m_max=1024, world=2)
    assert "n must be a multiple of 8" in str(e.value)
    assert [weave._weave.name(v) for v in (weave.AllGatherGemmMode.AUTO, weave.AllGatherGemmMode.GEMM_ONLY,
                                           weave.AllGatherGemmMode.SPLIT_NCCL, weave.AllGatherGemmMode.SPLIT_LSA,
                                           weave.AllGatherGemmMode.SPLIT_CE, weave.AllGatherGemmMode.FUSED_CE)] == [
        "auto", "gemm-only", "split-nccl", "split-lsa", "split-ce", "fused-ce"]
    assert "AllGatherGemm" in weave.__all__ and "AllGatherGemmMode" in weave.__all__
    c = _agm_config(256, 256, 256, "mxfp8", "raw", "bf16", "split-ce", "t.txt", "native", 66)
    assert (c.mode, c.quant, c.mx_route, c.max_sms) == (weave.AllGatherGemmMode.SPLIT_CE, weave.ScaleMode.MXFP8, 1, 66)
    assert c.calibration == "t.txt"
    assert _agm_config(256, 256, 256, "ptpc", "raw", "bf16", "fused-ce").mode == weave.AllGatherGemmMode.FUSED_CE
    for kw, needle in [(dict(comm=object()), "argument 'comm': must be a weave.Communicator"),
                       (dict(mx_route="fp8"), "argument 'mx_route': must be one of auto, native, bf16"),
                       (dict(max_sms=2000), "argument 'max_sms'"), (dict(mode="fused-lsa"), "unknown mode 'fused-lsa'"),
                       (dict(calibration=b"t.txt"), "argument 'calibration': must be a path")]:
        with pytest.raises(weave.ArgumentError) as e:
            weave.AllGatherGemm(**{"comm": object(), "n": 256, "k": 256, "m_max": 256, **kw})
        assert needle in str(e.value), str(e.value)


class _RecordingOp:
    """Stands in for the C++ op: records run() calls (none may happen when an argument is bad)."""

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)


def test_fused_run_out_is_checked_before_any_gpu_work():
    """run(..., out=): the caller's buffer is checked (rank, dtype, shape, device) before the op is
    called; a good one reaches the op as a view of the op's output dtype, and run() returns it.
    (Strides, alignment and the op's window are the C++ op's checks: tests/cpu/test_fused_caller_output.cpp.)"""
    from weave._fused import _ag_config, _ar_config

    comm = types.SimpleNamespace(world_size=2, device=0)  # a two-rank communicator on cuda:0
    ag = weave.GemmAllGather._wrap(comm, _ag_config(N, K, 256, "bf16", "raw", "fp32", "auto"), _RecordingOp())
    ar = weave.GemmAllReduce._wrap(comm, _ar_config(N, K, 256, "bf16", "raw", "auto", False, 0), _RecordingOp())
    a, b = Dev((M, K), BF16), Dev((N, K), BF16)
    cases = [
        (ag, [[1.0]], "argument 'out': expected a torch tensor or an object with __cuda_array_interface__"),
        (ag, Dev((2, M, N), F32), f"argument 'out': must be a 2-D matrix (got rank 3: [2, {M}, {N}])"),
        (ag, Dev((2 * M, N), BF16), "argument 'out': dtype must be fp32, the op's output dtype (got <V2)"),
        (ag, Dev((M, N), F32), f"argument 'out': shape must be [{2 * M}, {N}] (got [{M}, {N}])"),
        (ag, Dev((2 * M, N), F32, device=1), "argument 'out': must live in cuda:0, this rank's GPU (got cuda:1)"),
        (ar, Dev((M, N), F32), "argument 'out': dtype must be bf16, the op's output dtype (got <f4)"),
        (ar, Dev((M, N), U8), "argument 'out': dtype must be bf16, the op's output dtype (got |u1)"),
        (ar, Dev((M, N + 8), BF16), f"argument 'out': shape must be [{M}, {N}] (got [{M}, {N + 8}])"),
    ]
    for op, out, needle in cases:
        with pytest.raises(weave.ArgumentError) as e:
            op.run(a, b, out=out)
        assert needle in str(e.value), str(e.value)
    assert ag._impl.calls == [] and ar._impl.calls == []
    # GemmReduceScatter: m (A's rows) a multiple of the world (fused: of world x 128); out this
    # rank's rows, [m / world, N] bf16.
    from weave._fused import _rs_config

    rs = weave.GemmReduceScatter._wrap(comm, _rs_config(N, K, 512, "bf16", "raw", "auto", False, 0), _RecordingOp())
    fused = weave.GemmReduceScatter._wrap(comm, _rs_config(N, K, 512, "bf16", "raw", "fused", False, 0), _RecordingOp())
    for op, rows, out, needle in [
        (rs, M + 1, None, f"argument 'A': its rows m = {M + 1} must be a multiple of the world (2): each rank "
                          "receives m / world rows"),
        (rs, M + 1, Dev(((M + 1) // 2, N), BF16), "must be a multiple of the world (2)"),  # before out's shape
        (rs, M, Dev((M, N), BF16), f"argument 'out': shape must be [{M // 2}, {N}] (got [{M}, {N}])"),
        (rs, M, Dev((M // 2, N), F32), "argument 'out': dtype must be bf16, the op's output dtype (got <f4)"),
        (rs, M, Dev((M // 2, N), BF16, device=1), "argument 'out': must live in cuda:0, this rank's GPU (got cuda:1)"),
        (rs, 513, None, "argument 'A': its rows m = 513 must be in 1..m_max = 512"),
        (fused, M, None, f"argument 'A': its rows m = {M} must be a multiple of world x 128 = 256 in mode fused "
                         "(its bands are whole tiles); use mode auto or a split mode"),
    ]:
        with pytest.raises(weave.ArgumentError) as e:
            op.run(Dev((rows, K), BF16), b, out=out)
        assert needle in str(e.value), str(e.value)
    assert rs._impl.calls == [] and fused._impl.calls == []
    good_rs = Dev((M // 2, N), BF16, strides=(2 * (N + 8), 2))
    assert rs.run(a, b, out=good_rs) is good_rs
    assert rs._impl.calls[-1][0] == M  # the C++ op gets all m rows; it hands back this rank's m / world
    assert rs._impl.calls[-1][-1].describe() == f"[{M // 2}, {N}] bf16 strides [{N + 8}, 1] cuda:0"
    assert fused.run(Dev((256, K), BF16), b, out=Dev((128, N), BF16)) is not None and len(fused._impl.calls) == 1
    # Good buffers reach the op (the view last, in the op's dtype, strided rows kept) and come back.
    good_ag = Dev((2 * M, N), F32)
    assert ag.run(a, b, out=good_ag) is good_ag
    assert ag._impl.calls[-1][-1].describe() == f"[{2 * M}, {N}] fp32 strides [{N}, 1] cuda:0"
    strided = Dev((M, N), BF16, strides=(2 * (N + 64), 2))
    assert ar.run(a, b, out=strided, stream=5) is strided
    assert ar._impl.calls[-1][-1].describe() == f"[{M}, {N}] bf16 strides [{N + 64}, 1] cuda:0"
    assert ar._impl.calls[-1][-2] == 5  # the stream
    ar.output = lambda m: ("the window's view", m)  # (the real one needs torch and a GPU)
    assert ar.run(a, b) == ("the window's view", M) and ar._impl.calls[-1][-1] is None  # no out


def test_all_gather_gemm_run_and_views_are_checked_before_any_gpu_work():
    """AllGatherGemm.run: this rank's rows A [m, K] (1 <= m <= m_max), B, the quant's scales for m
    rows and out [world x m, N] of the op's out dtype are checked before the op is called; a good
    call reaches the op with all of them (A as e4m3 in ptpc, the view of out last) and returns out.
    The window views refuse an m outside 1..m_max by argument before asking the op."""
    from weave._fused import _agm_config

    comm = types.SimpleNamespace(world_size=2, device=0)  # a two-rank communicator on cuda:0
    op = weave.AllGatherGemm._wrap(comm, _agm_config(N, K, 256, "ptpc", "raw", "bf16", "auto"), _RecordingOp())
    bf = weave.AllGatherGemm._wrap(comm, _agm_config(N, K, 256, "bf16", "raw", "fp32", "auto"), _RecordingOp())
    a, b, sa, sb = Dev((M, K), U8), Dev((N, K), U8), Dev((M,), F32), Dev((N,), F32)
    cases = [
        (op, dict(a=Dev((2, M, K), U8)), f"argument 'A': must be a 2-D matrix (got rank 3: [2, {M}, {K}])"),
        (op, dict(a=Dev((257, K), U8), scale_a=Dev((257,), F32)), "argument 'A': its rows m = 257 must be in "
                                                                   "1..m_max = 256"),
        (op, dict(scale_a=None), "argument 'scale_a': mode ptpc needs it (got None)"),
        (op, dict(scale_a=Dev((M, 1), F32)), f"argument 'scale_a': ptpc takes fp32 [M] = [{M}], a 1-D vector"),
        (op, dict(out=Dev((M, N), BF16)), f"argument 'out': shape must be [{2 * M}, {N}] (got [{M}, {N}])"),
        (op, dict(out=Dev((2 * M, N), F32)), "argument 'out': dtype must be bf16, the op's output dtype (got <f4)"),
        (op, dict(out=Dev((2 * M, N), BF16, device=1)), "argument 'out': must live in cuda:0, this rank's GPU"),
        (bf, dict(a=Dev((M, K), BF16), b=Dev((N, K), BF16)), "mode bf16 takes no scales"),
        (bf, dict(a=Dev((M, K), BF16), b=Dev((N, K), BF16), scale_a=None, scale_b=None, out=Dev((2 * M, N), BF16)),
         "argument 'out': dtype must be fp32, the op's output dtype (got <V2)"),
    ]
    for target, over, needle in cases:
        kw = {"a": a, "b": b, "scale_a": sa, "scale_b": sb, **over}
        with pytest.raises(weave.ArgumentError) as e:
            target.run(kw.pop("a"), kw.pop("b"), **kw)
        assert needle in str(e.value), str(e.value)
    assert op._impl.calls == [] and bf._impl.calls == []
    out = Dev((2 * M, N), BF16, strides=(2 * (N + 64), 2))
    assert op.run(a, b, scale_a=sa, scale_b=sb, out=out, stream=7) is out
    m, ta, tb, tsa, tsb, stream, tout = op._impl.calls[-1]
    assert m == M and stream == 7
    assert ta.describe() == f"[{M}, {K}] e4m3 strides [{K}, 1] cuda:0"
    assert tsa.describe() == f"[{M}] fp32 strides [1] cuda:0"
    assert tout.describe() == f"[{2 * M}, {N}] bf16 strides [{N + 64}, 1] cuda:0"
    for view in ("gathered_a", "gathered_scale_a", "input", "input_scales"):
        for m_bad, needle in [(0, "argument 'm': must be an int >= 1"), (257, "argument 'm': must be an int <= 256"),
                              (1.0, "argument 'm': must be an int")]:
            with pytest.raises(weave.ArgumentError) as e:
                getattr(op, view)(m_bad)
            assert needle in str(e.value), (view, str(e.value))


def test_create_sharing_window_checks_every_spec_before_gpu_work():
    """Each spec's error names its list and index; specs are parsed before the communicator is
    looked at, so all of this runs without a GPU."""
    ok_ar = dict(n=512, k=512, m_max=256)
    cases = [
        (dict(all_reduces=[ok_ar, dict(n=512, k=512)]), "argument 'all_reduces[1]': missing a required argument: 'm_max'"),
        (dict(all_gathers=[dict(n=512, k=512, m_max=256, nn=3)]), "argument 'all_gathers[0]': got an unexpected keyword argument 'nn'"),
        (dict(all_reduces=[dict(ok_ar, mode="fused-lsa")]), "argument 'all_reduces[0]': argument 'mode': unknown mode 'fused-lsa'"),
        (dict(all_gathers=[dict(n=512, k=512, m_max=0)]), "argument 'all_gathers[0]': argument 'm_max': must be an int >= 1"),
        (dict(collectives=[dict(op="all-reduce", max_count=0)]), "argument 'collectives[0]': argument 'max_count'"),
        (dict(collectives=[dict(op="broadcast", max_count=8)]), "argument 'collectives[0]'"),
        (dict(collectives=[("all-reduce", 8)]), "argument 'collectives[0]': must be a dict of weave.Collective's keyword arguments"),
        (dict(all_reduces=ok_ar), "argument 'all_reduces': must be a list of dicts (got dict)"),
        (dict(all_reduces="fused"), "argument 'all_reduces': must be a list of dicts (got str)"),
        (dict(all_reduces=[ok_ar]), "argument 'comm': must be a weave.Communicator"),
        (dict(reduce_scatters=[dict(ok_ar, allow_pdl=True)]), "argument 'reduce_scatters[0]': argument 'allow_pdl'"),
        (dict(reduce_scatters=[dict(ok_ar, mode="fused-ce")]), "argument 'reduce_scatters[0]': argument 'mode'"),
        (dict(all_gather_gemms=[dict(n=512, k=512, m_max=256, calibration=3)]),
         "argument 'all_gather_gemms[0]': argument 'calibration': must be a path"),
        (dict(all_gather_gemms=[dict(n=512, k=512, m_max=256, mode="fused")]),
         "argument 'all_gather_gemms[0]': argument 'mode'"),
        (dict(all_gather_gemms=[dict(n=512, k=512, m_max=256)]), "argument 'comm': must be a weave.Communicator"),
    ]
    for kw, needle in cases:
        with pytest.raises(weave.ArgumentError) as e:
            weave.create_sharing_window(object(), **kw)
        assert needle in str(e.value), (kw, str(e.value))
    # The configs the specs become carry every field (here: the ones that differ from the defaults).
    from weave._shared import _collective_config

    c = _collective_config("all-reduce", 1 << 20, "fp32", "lsa", "auto", 0.0)
    assert c.max_count == 1 << 20 and weave._weave.name(c.op) == "all-reduce" and weave._weave.name(c.dtype) == "fp32"


def test_stream_argument():
    from weave._tensors import resolve_stream

    assert resolve_stream(1234, 0) == 1234
    assert resolve_stream(types.SimpleNamespace(ptr=77), 0) == 77
    with pytest.raises(weave.ArgumentError) as e:
        resolve_stream("s", 0)
    assert "argument 'stream'" in str(e.value)


def test_pack_mxfp8_scales_matches_the_documented_layout(seed):
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(seed)
    for rows, groups in ((5, 4), (3, 7), (1, 64)):
        raw = rng.integers(0, 255, size=(rows, groups), dtype=np.uint8)
        words = (groups + 3) // 4
        pad = np.full((rows, words * 4), 127, dtype=np.uint64)
        pad[:, :groups] = raw
        ref = (pad[:, 0::4] | pad[:, 1::4] << 8 | pad[:, 2::4] << 16 | pad[:, 3::4] << 24).T.astype(np.uint32)
        got = weave.pack_mxfp8_scales(raw)
        assert got.shape == (words, rows) and got.dtype == np.int32
        assert (got.view(np.uint32) == ref).all()


def test_gemm_check_is_exposed():
    # Gemm.check() raises a GEMM pipeline timeout recorded by an aborted kernel (the GPU test
    # test_a_stalled_gemm_is_reported_and_the_process_keeps_working shows it raising); here: the
    # wrapper and the native class both carry it, with a docstring that says what it raises.
    assert callable(getattr(weave.Gemm, "check", None))
    assert "timeout" in (weave.Gemm.check.__doc__ or "")
    assert callable(getattr(weave._weave.Gemm, "check", None))


def test_libweave_exports_only_the_api():
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is not installed")
    lib = os.path.join(os.path.dirname(weave.__file__), "libweave.so")
    out = subprocess.run([nm, "-DC", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    names = [line.split(" ", 2)[2] for line in out.splitlines() if line.count(" ") >= 2]
    assert names
    foreign = [n for n in names if not n.startswith(("weave::", "typeinfo for weave::", "typeinfo name for weave::",
                                                       "vtable for weave::"))]
    assert foreign == [], foreign[:10]


@pytest.mark.parametrize("order", ["numpy,weave", "weave,numpy", "torch,weave", "weave,torch"])
def test_foreign_process(order):
    """Issue 13's regression: weave imported beside numpy / torch, in either order, plans every
    mode (the planner's stream formatting crashed there) and, with a GPU, runs every GEMM mode and
    a collective against torch. A fresh interpreter each, so the import order is the one named."""
    pytest.importorskip([m for m in order.split(",") if m != "weave"][0])
    r = subprocess.run([sys.executable, os.path.join(HERE, "foreign_process_check.py"), order],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-3000:]}\nstderr:\n{r.stderr[-3000:]}"
    assert "foreign-process check ok" in r.stdout


def test_one_shot_gemm_plan_cache_is_bounded_and_hands_each_plan_to_one_caller():
    from weave._gemm import _PlanCache
    cache = _PlanCache(2)
    for key in ("a", "b", "c"):
        cache.put(key, key.upper())
    assert cache.take("a") is None, "the oldest plan is dropped past the limit"
    assert cache.take("b") == "B" and cache.take("b") is None, "a taken plan is out until put back"
    cache.put("b", "B")
    cache.put("d", "D")  # c is now the oldest
    assert cache.take("c") is None and cache.take("b") == "B" and cache.take("d") == "D"


def test_quantize_rows_refuses_before_any_gpu_work():
    import numpy as np
    x = np.zeros((4, 256), dtype=np.float32)
    with pytest.raises(weave.ArgumentError, match="arguments 'q' and 'scales': required unless x is a torch tensor"):
        weave.quantize_rows(x, "ptpc")
    with pytest.raises(weave.ArgumentError, match="argument 'mode': must be ptpc, blockscale or mxfp8"):
        weave.quantize_rows(x, "bf16", q=x, scales=x)
    with pytest.raises(weave.ArgumentError, match="argument 'mode'"):
        weave.quantize_rows(x, "fp4", q=x, scales=x)


def test_readme_python_blocks_parse_and_the_first_is_the_compiled_layer():
    import ast
    import readme
    blocks = readme.python_blocks()
    assert len(blocks) >= 2, "the README's Python section lost its blocks"
    for block in blocks:
        ast.parse(block)
    assert "torch.compile(" in blocks[0] and "weave.nn." in blocks[0], "the first block shows the compiled layers"
