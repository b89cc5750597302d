"""weave.nn's mxfp8 layers without a GPU: the quantiser against an independent pure-Python reading
of include/weave/quant.hpp's OCP MX rule on crafted values, the layer's operands (whose dequantised
product is within e4m3's rounding of the unquantised one), and the shapes the layers refuse at
construction, which are exactly those weave's ops refuse. Skips where torch is not installed (CI's
fresh machine has none: the GPU run covers the layers there, with real ops)."""
import math
import struct
import types

import pytest

torch = pytest.importorskip("torch")

import weave  # noqa: E402
import weave.nn  # noqa: E402


# --- the reference: the OCP MX rule, written from its definition in plain Python ---------------

def _e4m3_values():
    """Every finite non-negative e4m3 value, by code (0x00 .. 0x7E; 0x7F is NaN)."""
    out = []
    for code in range(0x7F):
        e, m = code >> 3, code & 7
        out.append(m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return out


_E4M3 = _e4m3_values()


def ref_e4m3(x: float) -> float:
    """x rounded to the nearest e4m3 value, ties to the even code, saturating at +-448."""
    if math.isnan(x):
        return math.nan
    mag = min(abs(x), 448.0)
    best = min(range(len(_E4M3)), key=lambda c: (abs(_E4M3[c] - mag), c & 1))
    return math.copysign(_E4M3[best], x)


def ref_floor_log2(v: float) -> int:
    """floor(log2(v)) of a positive fp32 value, from its bits (exact, subnormals included)."""
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    biased = bits >> 23
    return biased - 127 if biased else -149 + (bits & 0x7FFFFF).bit_length() - 1


def ref_block(values):
    """(ue8m0 byte, e4m3 values) of one block of fp32 values."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    amax = max(finite, default=0.0)
    exp = max(-127, min(127, ref_floor_log2(amax) - 8)) if amax > 0 else -127
    bad = any(not math.isfinite(v) for v in values)
    return (255 if bad else exp + 127), [ref_e4m3(v * 2.0 ** -exp) for v in values]


def _f32(values):
    return [struct.unpack("<f", struct.pack("<f", v))[0] for v in values]  # exactly what an fp32 tensor holds


_ULP_BELOW_1 = struct.unpack("<f", struct.pack("<I", 0x3F7FFFFF))[0]  # the fp32 just under 1.0
# Blocks of 32 values: one activation group each.
CRAFTED = {
    "powers of two": [2.0 ** p for p in range(-8, 24)],
    "amax exactly 1.0": [1.0] + [0.3] * 31,
    "amax one ulp under 1.0": [_ULP_BELOW_1] + [0.3] * 31,
    "amax exactly 448": [448.0, -448.0] + [1.0] * 30,
    "amax 449 (same exponent as 448)": [449.0] + [2.0] * 31,
    "amax 2^9": [512.0] + [3.0] * 31,
    "saturating (1.9 x 2^k: above 448 x 2^e)": [1.9 * 2.0 ** 5, -1.99 * 2.0 ** 5] + [0.5] * 30,
    "ties to even (17 and 19 at e = 0)": [300.0, 17.0, 19.0, -17.0, 18.5] + [1.0] * 27,
    "all zero": [0.0] * 32,
    "tiny: amax 2^-119 (e clamps at -127)": [2.0 ** -119] + [2.0 ** -125] * 31,
    "tiny: amax 2^-118": [2.0 ** -118] + [2.0 ** -121] * 31,
    "fp32 subnormal": [2.0 ** -140] + [0.0] * 31,
    "Inf": [math.inf, 1.0] + [0.5] * 30,
    "NaN": [math.nan, 1.0] + [0.5] * 30,
    "large": [3.0e38, -1.0e38] + [1.0e30] * 30,
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_mxfp8_quantiser_matches_the_ocp_rule_on_crafted_blocks(name):
    """One activation block of 32 (rows_per_block 1): its ue8m0 byte and its e4m3 values equal the
    reference's, value by value (NaN where it says NaN)."""
    values = _f32(CRAFTED[name])
    q, byte = weave.nn._per_block_mx(torch.tensor([values], dtype=torch.float32), 1)
    want_byte, want_q = ref_block(values)
    assert q.dtype == torch.float8_e4m3fn and byte.dtype == torch.uint8 and byte.shape == (1, 1)
    assert byte.item() == want_byte, (name, byte.item(), want_byte)
    got = q.float().flatten().tolist()
    for i, (g, w) in enumerate(zip(got, want_q)):
        assert (math.isnan(g) and math.isnan(w)) or g == w, (name, i, values[i], g, w)


def test_mxfp8_quantiser_bytes_at_the_boundaries():
    """The byte is floor(log2(amax)) - 8 + 127: amax 2^k gives k + 119, the fp32 just under it one
    less; 448 and 449 share 127; 2^-119 and below give 0 (the clamp), 2^-118 gives 1."""
    cases = [(1.0, 119), (_ULP_BELOW_1, 118), (448.0, 127), (449.0, 127), (512.0, 128), (2.0 ** -119, 0),
             (2.0 ** -118, 1), (2.0 ** 127, 246), (0.0, 0)]
    x = torch.zeros(len(cases), 32)
    x[:, 0] = torch.tensor([v for v, _ in cases])
    _, byte = weave.nn._per_block_mx(x, 1)
    assert byte.flatten().tolist() == [b for _, b in cases]


def test_mxfp8_weight_blocks_are_32_by_32_with_a_partial_last_block():
    """B's scales [ceil(rows / 32), K / 32]: each byte is the reference's over its 32 x 32 block (the
    last block's 8 rows alone), and every element is quantised with its block's exponent."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(40, 64, generator=gen) * torch.logspace(-3, 3, 40)[:, None]
    q, byte = weave.nn._per_block_mx(w, 32)
    assert q.shape == (40, 64) and byte.shape == (2, 2)
    for br, (r0, r1) in enumerate(((0, 32), (32, 40))):
        for bk in range(2):
            block = w[r0:r1, bk * 32:(bk + 1) * 32]
            want_byte, want_q = ref_block(block.flatten().tolist())
            assert byte[br, bk].item() == want_byte, (br, bk)
            assert q[r0:r1, bk * 32:(bk + 1) * 32].float().flatten().tolist() == want_q, (br, bk)


def _dequant(q, byte, rows_per_block):
    scale = torch.exp2(byte.float() - 127)
    return q.float() * scale.repeat_interleave(rows_per_block, 0)[:q.shape[0]].repeat_interleave(32, 1)


def test_mxfp8_layer_operands_dequantise_to_the_bf16_product():
    """A layer's mxfp8 operands on the CPU (weights per 32 x 32 block, the last block of rows
    partial; activations per token and 32-wide group): e4m3 values with uint8 ue8m0 scales
    [300 / 32 rounded up, K / 32] and [tokens, K / 32] (the raw layout weave's ops take), whose
    dequantised product is within e4m3's rounding (relative L2 < 5%) of the unquantised one; an
    all-zero group stays zero with byte 0."""
    torch.manual_seed(2)
    w, x = torch.randn(300, 256) * 0.05, torch.randn(20, 256)
    x[3, 64:96] = 0
    layer = weave.nn._Weights()
    layer._init_weights(300, 256, "mxfp8", "cpu")
    assert layer.weight_scale.dtype == torch.uint8 and (layer.weight_scale == 127).all(), "scale 1 until loaded"
    layer._load_weights(w)
    a, b, sa, sb = layer._operands(x.to(torch.bfloat16))
    assert a.dtype == b.dtype == torch.float8_e4m3fn and a.shape == (20, 256) and b.shape == (300, 256)
    assert sa.shape == (20, 8) and sb.shape == (10, 8) and sa.dtype == sb.dtype == torch.uint8
    assert sa[3, 2] == 0 and not a[3, 64:96].float().any() and sa[3, 1] != 0
    ref = x.to(torch.bfloat16).float() @ w.T
    got = _dequant(a, sa, 1) @ _dequant(b, sb, 32).T
    assert ((got - ref).norm() / ref.norm()).item() < 5e-2
    # A group's largest element lands in [256, 448]: e puts amax in [2^8, 2^9), saturating above 448.
    top = a[:, :32].float().abs().amax(dim=1)
    assert ((top >= 256) & (top <= 448)).all()


def _stand_in_comm(world, rank=0):
    comm = object.__new__(weave.Communicator)
    comm._impl = types.SimpleNamespace(world_size=world, rank=rank, device=0)
    return comm


@pytest.mark.parametrize("make, needle", [
    (lambda c: weave.nn.RowParallelLinear(8 * 48, 512, max_tokens=64, comm=c, quant="mxfp8"),
     r"'in_features / world': quant mxfp8 needs the layer's GEMM K, 48, to be a multiple of 32"),
    (lambda c: weave.nn.RowParallelLinear(8 * 48, 512, max_tokens=64, comm=c, quant="mxfp8", sequence_parallel=True),
     r"'in_features / world': quant mxfp8 needs the layer's GEMM K, 48, to be a multiple of 32"),
    (lambda c: weave.nn.ColumnParallelLinear(48, 1024, comm=c, quant="mxfp8"),
     r"'in_features': quant mxfp8 needs the layer's GEMM K, 48, to be a multiple of 32"),
    (lambda c: weave.nn.ColumnParallelLinear(96, 1024, comm=c, quant="mxfp8", sequence_parallel=True, max_tokens=64),
     r"'in_features': quant mxfp8 with sequence_parallel needs the layer's GEMM K, 96, to be a multiple of 128 "
     r"\(weave.AllGatherGemm"),
])
def test_mxfp8_layers_refuse_a_k_the_ops_cannot_take_before_any_gpu_work(make, needle):
    with pytest.raises(weave.ArgumentError, match=needle):
        make(_stand_in_comm(8))


@pytest.mark.parametrize("k", [16, 48, 100, 32, 64, 96, 128, 160, 224, 256, 288, 384, 1024 + 32])
def test_mxfp8_layer_k_rules_are_the_ops_rules(k):
    """What the layers refuse for mxfp8 is what the ops they call refuse (and nothing more): K a
    multiple of 32 for weave.gemm, GemmAllReduce and GemmReduceScatter, of 128 for AllGatherGemm."""
    def refused(gathered):
        try:
            weave.nn._check_k("mxfp8", k, "in_features", gathered=gathered)
        except weave.ArgumentError:
            return True
        return False

    n, m = 256, 64
    assert refused(False) == bool(weave.validate_gemm(m, n, k, mode="mxfp8"))
    for op in (weave.GemmAllReduce, weave.GemmReduceScatter):
        assert refused(False) == bool(op.validate(n=n, k=k, m_max=m, world=2, quant="mxfp8")), op
    assert refused(True) == bool(weave.AllGatherGemm.validate(n=n, k=k, m_max=m, world=2, quant="mxfp8"))
